/**
 * Envoy's `CheckRequest` -> the request /authz would have seen, and a committed decision ->
 * `CheckResponse`. Pure: no I/O, no decision of its own. The decision itself is the shared
 * `authorize` (decision/engine.ts), so the gRPC and HTTP ext_authz answers are the same; this
 * file only changes the envelope. Field names are the proto's (loaded with `keepCase`).
 */
import { H } from '../../lib/brand.js';
import { answerHeaders, type Committed } from '../decision/commit.js';
import { MAX_HEADER_BYTES } from '../decision/facts.js';
import { safeHeaderValue } from '../proxy/headers.js';

/** google.rpc.Code values Envoy reads from `CheckResponse.status`. */
export const RPC_OK = 0;
export const RPC_PERMISSION_DENIED = 7;
export const RPC_UNAUTHENTICATED = 16;

/** `HeaderValueOption.HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD`: a client cannot pre-set a stamped header. */
const OVERWRITE_IF_EXISTS_OR_ADD = 2;
/** The same rule as the HTTP listener: values with control characters are dropped, not sent. */
const SAFE_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** Identity headers the decision stamps; on allow, those it did not stamp are removed upstream. */
const STAMPED = [H.subject, H.upstream, H.actor, H.agentDid] as const;

export interface HeaderValueOption {
  header: { key: string; value: string };
  append_action: number;
}

/** google.protobuf.Struct: protobufjs builds the well-known types with their JSON (camelCase) field names. */
export interface Struct {
  fields: Record<string, { stringValue: string } | { boolValue: boolean } | { numberValue: number }>;
}

export interface CheckResponse {
  status: { code: number; message: string };
  /** The ext_authz filter's dynamic metadata: `allow`, `rule`, `reason`, `policy_version` (access logs). */
  dynamic_metadata: Struct;
  ok_response?: { headers: HeaderValueOption[]; headers_to_remove: string[] };
  denied_response?: { status: { code: number }; headers: HeaderValueOption[]; body: string };
}

/** What /authz reads from an HTTP request: the headers, the method and the path after `/authz`. */
export interface AuthzRequest {
  headers: Record<string, string>;
  method: string | undefined;
  path: string;
  /** With `header_map` (Envoy's `encode_raw_headers`): each header line as node's `rawHeaders` has it, repeats apart. */
  rawHeaders?: string[];
  /** The header lines add up to more than MAX_HEADER_BYTES (as `name: value\r\n`): 431, as the HTTP listener. */
  tooLarge?: true;
  /** The request body (Envoy's `with_request_body`): an MCP message is decided from it. */
  body?: string;
}

type Obj = Record<string, unknown>;

function obj(v: unknown): Obj | undefined {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : undefined;
}

function text(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

function add(bag: Record<string, string>, key: string, value: string): void {
  const k = key.toLowerCase();
  // Envoy merges repeated headers with a comma in `headers`; do the same for `header_map`.
  bag[k] = bag[k] === undefined ? value : `${bag[k]}, ${value}`;
}

/**
 * `headers` (the merged map) or, with `encode_raw_headers`, `header_map` (key + raw_value),
 * whose lines are also kept one by one: there a repeated header can be told from a comma.
 */
function headersOf(http: Obj): { bag: Record<string, string>; raw?: string[]; bytes: number } {
  const bag: Record<string, string> = {};
  let bytes = 0;
  const map = obj(http.headers);
  if (map) {
    for (const [k, v] of Object.entries(map)) {
      if (typeof v !== 'string') continue;
      add(bag, k, v);
      bytes += k.length + v.length + 4;
    }
  }
  const list = obj(http.header_map)?.headers;
  if (!Array.isArray(list)) return { bag, bytes };
  const raw: string[] = [];
  for (const e of list) {
    const hv = obj(e);
    const key = text(hv?.key);
    if (!hv || !key) continue;
    const rawValue = hv.raw_value;
    const value = typeof hv.value === 'string' && hv.value !== '' ? hv.value : rawValue instanceof Uint8Array ? Buffer.from(rawValue).toString('latin1') : '';
    add(bag, key, value);
    raw.push(key, value);
    bytes += key.length + value.length + 4;
  }
  return { bag, raw, bytes };
}

/**
 * The request /authz would have seen behind Envoy's HTTP ext_authz filter: header keys
 * lower-cased, `host` from the request's host (`:authority`), the path without its query.
 * A missing or malformed part leaves a fact unset: the decision then denies, as /authz does.
 */
export function requestOf(check: unknown): AuthzRequest {
  const http = obj(obj(obj(obj(check)?.attributes)?.request)?.http) ?? {};
  const { bag: headers, raw, bytes } = headersOf(http);
  const host = text(http.host) ?? headers[':authority'];
  if (host !== undefined) headers.host = host;
  const method = text(http.method) ?? headers[':method'];
  const target = text(http.path) ?? headers[':path'] ?? '/';
  const q = target.indexOf('?');
  const path = q === -1 ? target : target.slice(0, q);
  const rawBody = http.raw_body;
  const body = text(http.body) ?? (rawBody instanceof Uint8Array && rawBody.length ? Buffer.from(rawBody).toString('utf8') : undefined);
  return {
    headers,
    method,
    path: path === '' ? '/' : path,
    ...(raw ? { rawHeaders: raw } : {}),
    ...(bytes > MAX_HEADER_BYTES ? { tooLarge: true } : {}),
    ...(body !== undefined ? { body } : {}),
  };
}

function options(headers: Record<string, string>): HeaderValueOption[] {
  const out: HeaderValueOption[] = [];
  for (const [key, value] of Object.entries(headers)) {
    if (SAFE_VALUE.test(value)) out.push({ header: { key, value }, append_action: OVERWRITE_IF_EXISTS_OR_ADD });
  }
  return out;
}

/** The headers /authz answers with (decision headers, policy version, needs-approval). */

function metadata(allow: boolean, rule: string, reason: string, version?: number): Struct {
  const fields: Struct['fields'] = { allow: { boolValue: allow }, rule: { stringValue: rule }, reason: { stringValue: reason } };
  if (version !== undefined) fields.policy_version = { numberValue: version };
  return { fields };
}

/** A deny in the HTTP listener's shape: status, headers, JSON body `{allow, reason, rule}`. */
function denied(status: number, reason: string, rule: string, headers: Record<string, string>, version?: number): CheckResponse {
  const body = JSON.stringify({ allow: false, reason, rule });
  const all = { 'content-type': 'application/json', ...headers, [H.denyReason]: safeHeaderValue(reason) };
  return {
    status: { code: status === 401 ? RPC_UNAUTHENTICATED : RPC_PERMISSION_DENIED, message: reason },
    dynamic_metadata: metadata(false, rule, reason, version),
    denied_response: { status: { code: status }, headers: options(all), body },
  };
}

/** Allow -> OK with the stamped headers upstream; deny -> PERMISSION_DENIED or UNAUTHENTICATED (401). */
export function responseOf(c: Committed): CheckResponse {
  const d = c.decision;
  const headers = answerHeaders(c);
  if (!d.allow) return denied(d.status, d.reason, d.rule, headers, c.version);
  const set = options(headers);
  const stamped = new Set(set.map((o) => o.header.key));
  return {
    status: { code: RPC_OK, message: '' },
    dynamic_metadata: metadata(true, d.rule, d.reason, c.version),
    ok_response: { headers: set, headers_to_remove: STAMPED.filter((h) => !stamped.has(h)) },
  };
}

/** Headers past MAX_HEADER_BYTES: a 431 with no decision made, as the HTTP listener's. */
export function tooLargeResponse(): CheckResponse {
  return denied(431, `request headers larger than ${MAX_HEADER_BYTES} bytes`, 'inline', {});
}

/** The answer when the decision itself failed (it never should): a deny, as the HTTP listener's. */
export function failedResponse(): CheckResponse {
  return denied(403, 'internal decision error', 'inline', {});
}
