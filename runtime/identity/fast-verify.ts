/**
 * `POST /v1/agents/verify-presentation` answered on node:http directly: the egress hot path
 * (every VP a control plane has not cached comes here). Going through Hono costs each request a
 * web Request, a web-stream body read and the middleware chain, about twice the verification
 * itself. Only a plainly well-formed request takes this path: `Content-Type: application/json`
 * (optionally `; charset=utf-8`), a JSON object with a compact-JWS `vp`
 * and optional printable `audience`/`nonce` (nothing else), a Content-Length within the limit,
 * the issuer key loaded, no `traceparent`. It answers exactly what the Hono route answers for it
 * (same `verifyPresentation`, same JSON), with the same tracing span when tracing is on. Anything
 * else (and any error) goes to the Hono app, the buffered body replayed, so every error shape,
 * limit and check stays in one place.
 */
import type http from 'node:http';
import { BRAND } from '../lib/brand.js';
import { withSpan } from '../lib/tracing.js';
import { MAX_JWT_CHARS } from '../lib/jws.js';
import { verifyPresentation } from './routes-agents.js';
import type { IdentityAuthority } from './server.js';

const PATH = '/v1/agents/verify-presentation';
/** The body of a 64 KiB VP with an audience and a nonce, JSON-quoted. */
const MAX_BODY = MAX_JWT_CHARS + 4096;
const JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
const PRINTABLE = /^[\x20-\x7e]{1,1024}$/;
/**
 * The only Content-Types this path takes: `application/json`, alone or with a UTF-8 charset.
 * Anything else (other parameters, a malformed list such as `application/json; ;;;==`, another
 * charset) goes to the app, so it answers exactly what the routed API answers (415 for those).
 */
const PLAIN_JSON = /^application\/json\s*(;\s*charset\s*=\s*("utf-8"|utf-8)\s*)?$/i;
/** The verify-presentation span's attributes (also the in-process path's, in-process.ts). */
export const VERIFY_SPAN_ATTRS = { 'http.request.method': 'POST', 'http.route': PATH, 'http.response.status_code': 200, [`${BRAND}.operation`]: 'vp.verify' };

interface Plain {
  vp: string;
  audience?: string;
  nonce?: string;
}

/** The request body when it is one this path answers, else undefined. */
export function plainVerifyRequest(body: Buffer): Plain | undefined {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) return undefined;
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (k !== 'vp' && k !== 'audience' && k !== 'nonce') return undefined;
  if (typeof o.vp !== 'string' || o.vp.length > MAX_JWT_CHARS || !JWS.test(o.vp)) return undefined;
  for (const k of ['audience', 'nonce'] as const) if (o[k] !== undefined && (typeof o[k] !== 'string' || !PRINTABLE.test(o[k]))) return undefined;
  return o as unknown as Plain;
}

/** Writes a web Response to a node response. */
async function send(r: Response, res: http.ServerResponse): Promise<void> {
  const body = Buffer.from(await r.arrayBuffer());
  const headers: Record<string, string> = {};
  r.headers.forEach((value, name) => (headers[name] = value));
  res.writeHead(r.status, { ...headers, 'content-length': body.length });
  res.end(body);
}

/** A request listener: the fast path for plain verify-presentation requests, `fallback` for every other request. */
export function withFastVerify(authority: IdentityAuthority, fallback: http.RequestListener): http.RequestListener {
  const ctx = authority.context;
  // A request whose body was read here but is not plain goes to the app with that body.
  const replay = (req: http.IncomingMessage, res: http.ServerResponse, body: Buffer) => {
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined) headers.set(k, Array.isArray(v) ? v.join(', ') : v);
    const url = `http://${req.headers.host ?? 'localhost'}${req.url}`;
    Promise.resolve(authority.app.fetch(new Request(url, { method: 'POST', headers, body })))
      .then((r) => send(r, res))
      .catch(() => res.destroy());
  };
  return (req, res) => {
    const h = req.headers;
    const len = Number(h['content-length']);
    if (
      req.method !== 'POST' ||
      req.url !== PATH ||
      !authority.ready() ||
      h.traceparent !== undefined ||
      // What a browser sends: the app's cross-origin write refusal decides (writeRefusal).
      h.origin !== undefined ||
      h['sec-fetch-site'] !== undefined ||
      h['transfer-encoding'] !== undefined ||
      !(len > 0 && len <= MAX_BODY) ||
      !PLAIN_JSON.test(h['content-type'] ?? '')
    ) {
      return fallback(req, res);
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', () => res.destroy());
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const plain = body.length === len ? plainVerifyRequest(body) : undefined;
      if (!plain) return replay(req, res, body);
      const answer = () =>
        withSpan('vp.verify', VERIFY_SPAN_ATTRS, () => verifyPresentation(ctx, plain.vp, plain.audience, plain.nonce)).then(
          (a) => {
            const out = JSON.stringify(a);
            res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
            res.end(out);
          },
          () => replay(req, res, body),
        );
      // With WRIT_API_AUTH=keys the caller needs identity:verify; otherwise the app answers the 401/403.
      authority.authorized(h.authorization, 'identity:verify').then(
        (ok) => (ok ? answer() : replay(req, res, body)),
        () => replay(req, res, body),
      );
    });
  };
}
