/**
 * Where the applier sends desired state: the registry's one `apply` (in process for `npm start`,
 * `POST /v1/registry/apply` on the management API from the cluster operator), and the identity
 * authority's HTTP API (agents and governance), either over the network or in process through the
 * Hono app's `request` (the same routes, no socket).
 */
import type { Service } from '../runtime/control-plane/types.js';
import type { ApplyResult } from './status.js';

export interface RegistryPort {
  apply(services: readonly Service[], opts: { owner: string; dryRun?: boolean; by?: string }): Promise<ApplyResult>;
  /** The registry version now (it moves on every write by anyone). */
  version(): Promise<number>;
}

/** A fetch-shaped call against the identity authority: `path` is absolute (`/v1/...`). */
export type IdentityRequest = (path: string, init?: RequestInit) => Promise<Response>;

/** The in-process registry (runtime/control-plane/registry): apply is already that shape. */
export function inProcessRegistry(registry: {
  apply(desired: readonly unknown[], opts: { owner: string; dryRun?: boolean; by?: string }): Promise<ApplyResult>;
  readonly version: number;
}): RegistryPort {
  return { apply: (services, opts) => registry.apply(services, opts), version: async () => registry.version };
}

/** `init` with `Authorization: Bearer <apiKey>` added (WRIT_API_KEY, for WRIT_API_AUTH=keys listeners). */
export function withCredential(init: RequestInit | undefined, apiKey: string | undefined): RequestInit | undefined {
  if (!apiKey) return init;
  const headers = new Headers(init?.headers);
  headers.set('authorization', `Bearer ${apiKey}`);
  return { ...init, headers };
}

async function failure(res: Response): Promise<Error> {
  const text = await res.text().catch(() => '');
  return new Error(`${res.status} ${text.slice(0, 500)}`);
}

/** `POST <mgmt>/v1/registry/apply`: the apply route of the management API. */
export function httpRegistry(mgmtUrl: string, fetchImpl: typeof fetch = fetch, apiKey?: string): RegistryPort {
  const url = new URL('/v1/registry/apply', mgmtUrl).toString();
  const versionUrl = new URL('/v1/registry/version', mgmtUrl).toString();
  return {
    async version() {
      const res = await fetchImpl(versionUrl, withCredential({ signal: AbortSignal.timeout(15_000) }, apiKey));
      if (res.status !== 200) throw await failure(res);
      return ((await res.json()) as { version: number }).version;
    },
    async apply(services, opts) {
      const res = await fetchImpl(
        url,
        withCredential(
          {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            // The route names the caller in its audit records itself (`by` is for in-process callers).
            body: JSON.stringify({ owner: opts.owner, services, ...(opts.dryRun ? { dryRun: true } : {}) }),
            signal: AbortSignal.timeout(30_000),
          },
          apiKey,
        ),
      );
      if (res.status !== 200) throw await failure(res);
      return (await res.json()) as ApplyResult;
    },
  };
}

/** Identity authority over HTTP at `baseUrl`. */
export function httpIdentity(baseUrl: string, fetchImpl: typeof fetch = fetch, apiKey?: string): IdentityRequest {
  return (path, init) => fetchImpl(new URL(path, baseUrl), withCredential({ ...init, signal: init?.signal ?? AbortSignal.timeout(15_000) }, apiKey));
}

/** Identity authority in process: its Hono app answers without a socket. */
export function inProcessIdentity(app: { request(path: string, init?: RequestInit): Response | Promise<Response> }, apiKey?: string): IdentityRequest {
  return async (path, init) => app.request(path, withCredential(init, apiKey));
}

/** JSON POST helper: returns status and parsed body (undefined when not JSON). */
export async function postJson(req: IdentityRequest, path: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await req(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed };
}

/** The message of an identity-authority error envelope `{error:{code,message}}` (or the raw body). */
export function errorText(status: number, body: any): string {
  const e = body?.error;
  if (e && typeof e === 'object') return `${status} ${e.code ?? ''}: ${e.message ?? ''}`.trim();
  if (body?.detail) return `${status} ${JSON.stringify(body.detail).slice(0, 500)}`;
  return `${status} ${typeof body === 'string' ? body.slice(0, 500) : JSON.stringify(body ?? '').slice(0, 500)}`;
}
