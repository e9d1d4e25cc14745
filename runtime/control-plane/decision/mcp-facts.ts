/**
 * An MCP message as facts (issue 42): the one JSON-RPC message of a streamable-HTTP POST (MCP
 * 2025-11-25; a batch, a JSON array, left MCP in 2025-06-18 and is refused), or, without a body,
 * the routable headers `Mcp-Method` / `Mcp-Name` (MCP 2026-07-28, SEP-2243) a gateway in front of
 * an MCP server sends to `/authz`. Headers and body must agree. Pure: the MCP gateway
 * (runtime/mcp), `/authz` over HTTP and gRPC and the dry-run build the same facts.
 */
import { argsDigest } from '../../lib/jcs.js';
import type { HeaderBag } from './facts.js';
import type { McpCall } from './types.js';

export type Message =
  | { kind: 'request'; id: string | number; method: string; params: Record<string, unknown> | undefined }
  | { kind: 'notification'; method: string; params: Record<string, unknown> | undefined }
  | { kind: 'response'; id: string | number };

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isId = (v: unknown): v is string | number => typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v));

/** Reads one JSON-RPC message; a string says why it is not one. */
export function readMessage(v: unknown): Message | string {
  if (Array.isArray(v)) return 'JSON-RPC batches are not part of MCP (removed in 2025-06-18): send one message per request';
  if (!isObject(v) || v.jsonrpc !== '2.0') return 'not a JSON-RPC 2.0 message';
  if (v.params !== undefined && !isObject(v.params)) return 'params must be an object';
  const params = v.params as Record<string, unknown> | undefined;
  if (typeof v.method === 'string') {
    if (v.method.length === 0 || v.method.length > 256) return 'method must be 1-256 characters';
    if (!('id' in v)) return { kind: 'notification', method: v.method, params };
    if (!isId(v.id)) return 'id must be a string or a number';
    return { kind: 'request', id: v.id, method: v.method, params };
  }
  if ('method' in v) return 'method must be a string';
  if (isId(v.id) && ('result' in v || 'error' in v)) return { kind: 'response', id: v.id };
  return 'neither a request, a notification nor a response';
}

/** Methods whose target is `params.name`, and those whose target is `params.uri`. */
const BY_NAME: ReadonlySet<string> = new Set(['tools/call', 'prompts/get']);
const BY_URI: ReadonlySet<string> = new Set(['resources/read', 'resources/subscribe', 'resources/unsubscribe']);

/** What the tool layer decides of a message; a string says why its params cannot be decided. */
export function callOf(m: Message, session: string | undefined): McpCall | string {
  const method = m.kind === 'response' ? 'response' : m.method;
  const call: McpCall = { method };
  if (session) call.session = session;
  if (m.kind === 'response') return call;
  const p = m.params;
  if (BY_NAME.has(method) || BY_URI.has(method)) {
    const name = p?.[BY_NAME.has(method) ? 'name' : 'uri'];
    if (typeof name !== 'string' || name.length === 0) return `${method} needs params.${BY_NAME.has(method) ? 'name' : 'uri'}`;
    call.name = name;
  }
  if (BY_NAME.has(method)) {
    const args = p?.arguments;
    if (args !== undefined && !isObject(args)) return `${method}: params.arguments must be an object`;
    call.args = args ?? {};
    call.digest = argsDigest(call.args);
  }
  return call;
}

/** A routable header's value: `=?base64?...?=` is decoded (SEP-2243), anything else taken as sent. */
function headerValue(v: string): string | undefined {
  const m = /^=\?base64\?([A-Za-z0-9+/=]*)\?=$/.exec(v);
  if (!m) return v;
  const s = Buffer.from(m[1]!, 'base64').toString('utf8');
  return Buffer.from(s, 'utf8').toString('base64').replace(/=+$/, '') === m[1]!.replace(/=+$/, '') ? s : undefined;
}

/**
 * Why the routable headers disagree with the message, or undefined when they agree or are
 * absent. A header sent twice (`string[]`) disagrees: one request is routed by one value.
 */
export function routableMismatch(h: HeaderBag, call: McpCall, m: Message | undefined): string | undefined {
  const method = h['mcp-method'];
  const name = h['mcp-name'];
  if (Array.isArray(method) || Array.isArray(name)) return 'Mcp-Method or Mcp-Name sent more than once';
  if (method !== undefined) {
    if (m?.kind === 'response') return 'Mcp-Method on a JSON-RPC response';
    if (headerValue(method) !== call.method) return `Mcp-Method ${JSON.stringify(method)} disagrees with the body's method ${JSON.stringify(call.method)}`;
  }
  if (name !== undefined && headerValue(name) !== call.name)
    return `Mcp-Name ${JSON.stringify(name)} disagrees with the body's ${call.name === undefined ? 'absent name' : JSON.stringify(call.name)}`;
  return undefined;
}

const first = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);

/**
 * The MCP message an `/authz` check carries, for an egress check: its body when that is JSON
 * (Envoy's `with_request_body`), else its routable headers; undefined when it carries neither.
 * A string says why the message cannot be decided (the decision denies it).
 */
export function mcpCallOf(h: HeaderBag, body: string | undefined): McpCall | string | undefined {
  const session = first(h['mcp-session-id']);
  const text = body?.trim();
  // A body is read as MCP when it is JSON-RPC (any other body is another API's, not decided here).
  if (text && (text.startsWith('{') || text.startsWith('[')) && text.includes('"jsonrpc"')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return 'the body is not JSON';
    }
    const m = readMessage(parsed);
    if (typeof m === 'string') return m;
    const call = callOf(m, session);
    if (typeof call === 'string') return call;
    return routableMismatch(h, call, m) ?? call;
  }
  const method = h['mcp-method'];
  if (method === undefined) return undefined;
  if (Array.isArray(method) || Array.isArray(h['mcp-name'])) return 'Mcp-Method or Mcp-Name sent more than once';
  const m = headerValue(method);
  if (!m) return 'Mcp-Method is not a valid value';
  const call: McpCall = { method: m };
  const name = first(h['mcp-name']);
  if (name !== undefined) {
    const n = headerValue(name);
    if (n === undefined) return 'Mcp-Name is not a valid value';
    call.name = n;
  }
  if (session) call.session = session;
  return call;
}
