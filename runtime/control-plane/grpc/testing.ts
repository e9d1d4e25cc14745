/**
 * A real `@grpc/grpc-js` client of the ext_authz listener, for tests and the benchmark: Check
 * with a CheckRequest as Envoy builds it, health Check and Watch, and the answer read back as
 * HTTP /authz would have given it (status, headers, {allow, reason, rule}).
 */
import * as grpc from '@grpc/grpc-js';
import { serviceDefinitions } from './server.js';

type Header = { header?: { key?: string; value?: string }; append_action?: number };

/** A CheckResponse as the client decodes it (proto field names; absent fields absent). */
export interface WireCheckResponse {
  status?: { code?: number; message?: string };
  http_response?: 'ok_response' | 'denied_response';
  ok_response?: { headers?: Header[]; headers_to_remove?: string[] };
  denied_response?: { status?: { code?: number }; headers?: Header[]; body?: string };
  dynamic_metadata?: { fields?: Record<string, { stringValue?: string; boolValue?: boolean; numberValue?: number }> };
}

export interface HttpRequestAttrs {
  method?: string;
  path?: string;
  host?: string;
  headers?: Record<string, string>;
  header_map?: { headers: { key: string; value?: string; raw_value?: Buffer }[] };
}

/** `CheckRequest{attributes.request.http}` as Envoy's HTTP filter sends it (pseudo-headers included). */
export function checkRequest(http: HttpRequestAttrs): object {
  const headers = http.headers
    ? { ':method': http.method ?? 'GET', ':path': http.path ?? '/', ...(http.host ? { ':authority': http.host } : {}), ...http.headers }
    : undefined;
  return { attributes: { request: { http: { ...http, ...(headers ? { headers } : {}) } } } };
}

export interface CheckClient {
  check(req: object, md?: grpc.Metadata): Promise<WireCheckResponse>;
  health(service?: string): Promise<number>;
  watch(service?: string): grpc.ClientReadableStream<{ status?: number }>;
  /** The raw client: `makeUnaryRequest` with hand-encoded bytes. */
  readonly raw: grpc.Client;
  close(): void;
}

export function checkClient(port: number, host = '127.0.0.1'): CheckClient {
  const defs = serviceDefinitions();
  const Auth = grpc.makeGenericClientConstructor(defs.auth, 'Authorization');
  const Health = grpc.makeGenericClientConstructor(defs.health, 'Health');
  const target = `${host}:${port}`;
  const auth = new Auth(target, grpc.credentials.createInsecure()) as unknown as grpc.Client & Record<string, (...a: unknown[]) => unknown>;
  const health = new Health(target, grpc.credentials.createInsecure()) as unknown as grpc.Client & Record<string, (...a: unknown[]) => unknown>;
  const unary = <T>(c: Record<string, (...a: unknown[]) => unknown>, method: string, req: object, md = new grpc.Metadata()) =>
    new Promise<T>((resolve, reject) => {
      c[method]!(req, md, (err: grpc.ServiceError | null, res: T) => (err ? reject(err) : resolve(res)));
    });
  return {
    check: (req, md) => unary<WireCheckResponse>(auth, 'Check', req, md),
    health: async (service = '') => (await unary<{ status?: number }>(health, 'Check', { service })).status ?? 0,
    watch: (service = '') => health.Watch!({ service }) as grpc.ClientReadableStream<{ status?: number }>,
    raw: auth,
    close() {
      auth.close();
      health.close();
    },
  };
}

/** What /authz would have answered: status, the X-Writ-* headers, and `{allow, reason, rule}`. */
export interface AsHttp {
  status: number;
  headers: Record<string, string>;
  body: { allow: boolean; reason: string; rule: string };
}

function headerRecord(list: Header[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of list ?? []) if (h.header?.key) out[h.header.key] = h.header.value ?? '';
  return out;
}

export function asHttp(r: WireCheckResponse): AsHttp {
  const md = r.dynamic_metadata?.fields ?? {};
  const body = { allow: md.allow?.boolValue === true, reason: md.reason?.stringValue ?? '', rule: md.rule?.stringValue ?? '' };
  if (r.ok_response) return { status: 200, headers: headerRecord(r.ok_response.headers), body };
  const d = r.denied_response ?? {};
  return { status: d.status?.code ?? 403, headers: headerRecord(d.headers), body };
}
