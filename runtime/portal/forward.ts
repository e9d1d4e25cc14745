/**
 * The portal's narrow same-origin forwarder to the identity authority (AGENT_IDP_URL): the
 * governance and delegation data live there (:8090), the portal is served on :8181. Only the
 * routes below pass, each with its own allowed query parameters; anything else is 404. It is
 * never an open proxy: the target is always `identityUrl` + one of these fixed paths.
 *
 * POSTs must be `application/json` (a cross-site form cannot send that without a CORS
 * preflight, which this listener never answers), bodies are capped at 16 KiB, and every call
 * has a timeout. Errors use the management API's shape `{error: string}`:
 * 503 no identity authority configured, 504 timeout, 502 unreachable.
 */
import type { Context, Hono } from 'hono';
import { isJson } from '../lib/api.js';
import { errMsg, logger } from '../lib/log.js';

const log = logger('portal');

interface Allowed {
  method: 'GET' | 'POST';
  path: RegExp;
  query: readonly string[];
}

/** The identity-authority routes the portal reads or writes, and nothing else. */
export const IDENTITY_ALLOWLIST: readonly Allowed[] = [
  { method: 'GET', path: /^\/v1\/governance\/summary$/, query: ['tenant'] },
  { method: 'GET', path: /^\/v1\/governance\/agents$/, query: ['tenant', 'status'] },
  { method: 'GET', path: /^\/v1\/governance\/issues$/, query: ['tenant'] },
  { method: 'GET', path: /^\/v1\/delegations$/, query: [] },
  { method: 'GET', path: /^\/v1\/tokens$/, query: ['tenant', 'agent', 'delegation', 'limit', 'after'] },
  { method: 'POST', path: /^\/v1\/delegations\/[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,199}\/(approve|deny)$/, query: [] },
];

export const FORWARD_BODY_LIMIT = 16 * 1024;
export const DEFAULT_FORWARD_TIMEOUT_MS = 5000;

export interface ForwardOptions {
  /** Identity authority base URL; undefined answers 503. */
  identityUrl?: string;
  timeoutMs?: number;
  /** Headers copied from the caller (W3C trace context). */
  passHeaders?: readonly string[];
}

function match(method: string, path: string): Allowed | undefined {
  return IDENTITY_ALLOWLIST.find((a) => a.method === method && a.path.test(path));
}

/** Mounts `GET|POST <prefix>/*` on `app` (prefix relative to the app, e.g. `/api/identity`). */
export function registerIdentityForwarder(app: Hono, prefix: string, opts: ForwardOptions): void {
  const base = opts.identityUrl?.replace(/\/+$/, '');
  const timeoutMs = opts.timeoutMs ?? DEFAULT_FORWARD_TIMEOUT_MS;
  // The operator's own credential travels on: the identity authority checks its scope (WRIT_API_AUTH).
  const pass = opts.passHeaders ?? ['traceparent', 'tracestate', 'authorization'];

  const handler = async (c: Context) => {
    const url = new URL(c.req.url);
    const path = url.pathname.slice(url.pathname.indexOf(prefix) + prefix.length);
    const rule = match(c.req.method, path);
    if (!rule) return c.json({ error: 'not found' }, 404);
    if (!base) return c.json({ error: 'no identity authority configured (AGENT_IDP_URL is unset)' }, 503);

    const qs = new URLSearchParams();
    for (const [k, v] of url.searchParams) {
      if (!rule.query.includes(k)) return c.json({ error: `query parameter ${JSON.stringify(k)} is not allowed here` }, 400);
      qs.append(k, v);
    }
    const headers: Record<string, string> = { accept: 'application/json' };
    for (const h of pass) {
      const v = c.req.header(h);
      if (v) headers[h] = v;
    }
    let body: string | undefined;
    if (rule.method === 'POST') {
      if (!isJson(c.req.header('content-type'))) {
        return c.json({ error: 'content-type must be application/json' }, 415);
      }
      body = await c.req.text();
      if (Buffer.byteLength(body) > FORWARD_BODY_LIMIT) return c.json({ error: `body too large: limit ${FORWARD_BODY_LIMIT} bytes` }, 413);
      headers['content-type'] = 'application/json';
    }
    const target = `${base}${path}${qs.size ? `?${qs}` : ''}`;
    try {
      const res = await fetch(target, { method: rule.method, headers, body, signal: AbortSignal.timeout(timeoutMs), redirect: 'manual' });
      const text = await res.text();
      return c.body(text, res.status as 200, { 'content-type': res.headers.get('content-type') ?? 'application/json', 'cache-control': 'no-store' });
    } catch (e) {
      const timedOut = (e as { name?: string }).name === 'TimeoutError';
      log.warn('identity authority call failed', { path, err: errMsg(e) });
      return timedOut ? c.json({ error: `identity authority timed out after ${timeoutMs} ms` }, 504) : c.json({ error: 'identity authority unreachable' }, 502);
    }
  };
  app.get(`${prefix}/*`, handler);
  app.post(`${prefix}/*`, handler);
}
