/**
 * The `/authz` decision listener (SPEC 4.1, DECISION_ADDR, default `:9191`). Bare node:http:
 * this is the hot path. Envoy's ext_authz HTTP mode appends the original path to the prefix,
 * so `/authz`, `/authz/<anything>` and `/authz?<query>` are all the endpoint, for every method.
 * Request bodies are drained (up to a limit) and ignored. `GET /healthz` answers liveness;
 * anything else is 404. A decision never answers 500: the core fails closed to a deny.
 */
import http from 'node:http';
import { H } from '../lib/brand.js';
import { requestDeadline } from '../lib/http.js';
import { errMsg, logger } from '../lib/log.js';
import { startDecisionSpan } from '../lib/tracing.js';
import { answerHeaders, type Committed } from './decision/commit.js';
import { authorize, type DecisionEngine } from './decision/engine.js';
import { factsFromHeaders, MAX_HEADER_BYTES } from './decision/facts.js';
import { askingWithin } from './decision/gather.js';

const log = logger('authz');

export interface AuthzServerOptions {
  /** Largest request body drained before answering 413 (default 1 MiB). */
  maxBodyBytes?: number;
  /** Largest request header block (default 64 KiB: VPs in headers are a few KiB). */
  maxHeaderBytes?: number;
  /**
   * Longest time to receive a whole request, head and body (default 66 s, also the header
   * deadline): a client that never finishes its body gets 408 and loses the connection, instead of
   * holding it for node's default 300 s. Envoy gives an ext_authz call 200 ms by default.
   */
  requestTimeoutMs?: number;
}

/** Header values node would refuse (control characters) are dropped rather than crash a reply. */
const SAFE_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const JSON_TYPE = 'application/json';

function isAuthzPath(url: string): { ok: boolean; path: string; rest: string } {
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  if (path === '/authz') return { ok: true, path, rest: '/' };
  if (path.startsWith('/authz/')) return { ok: true, path, rest: path.slice(6) };
  return { ok: false, path, rest: '' };
}

/**
 * Resolves with the body when it was drained (kept only when it may be an MCP message: JSON from
 * an agent, Envoy's `with_request_body`), false when it exceeded the limit.
 */
function drain(req: http.IncomingMessage, limit: number): Promise<string | undefined | false> | true {
  const declared = req.headers['content-length'];
  if (!req.headers['transfer-encoding'] && (declared === undefined || declared === '0')) {
    req.resume();
    return true;
  }
  if (declared !== undefined && Number(declared) > limit) return Promise.resolve(false);
  const keep = req.headers[H.actor] !== undefined && /json/i.test(String(req.headers['content-type'] ?? ''));
  return new Promise((resolve) => {
    let n = 0;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      n += c.length;
      if (n > limit) resolve(false);
      else if (keep) chunks.push(c);
    });
    req.on('end', () => resolve(keep ? Buffer.concat(chunks).toString('utf8') : undefined));
    req.on('error', () => resolve(false));
    req.resume();
  });
}

function send(req: http.IncomingMessage, res: http.ServerResponse, status: number, body: object, headers: Record<string, string> = {}): void {
  const data = JSON.stringify(body);
  const out: Record<string, string | number> = { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(data) };
  for (const [k, v] of Object.entries(headers)) if (SAFE_VALUE.test(v)) out[k] = v;
  res.writeHead(status, out);
  res.end(req.method === 'HEAD' ? undefined : data);
}

function render(req: http.IncomingMessage, res: http.ServerResponse, c: Committed): void {
  const d = c.decision;
  send(req, res, d.status, { allow: d.allow, reason: d.reason, rule: d.rule }, answerHeaders(c));
}

function failed(req: http.IncomingMessage, res: http.ServerResponse, e: unknown): void {
  // The pipeline neither throws nor rejects; this is a last line of defence, still a deny.
  log.error('decision failed', { err: errMsg(e) });
  send(req, res, 403, { allow: false, reason: 'internal decision error', rule: 'inline' });
}

/** Decides and answers; a decision that waited on nothing is answered in this tick. */
function decide(req: http.IncomingMessage, res: http.ServerResponse, rest: string, engine: DecisionEngine, body?: string): void {
  // Continues the gateway's trace; a shared no-op unless spans are exported.
  const span = startDecisionSpan('authz', req.headers.traceparent, req.headers.tracestate);
  let decided: Committed | Promise<Committed>;
  try {
    const facts = factsFromHeaders(req.headers, {
      method: req.method,
      path: rest,
      trustedPeer: engine.trustedPeer(req.socket.remoteAddress),
      rawHeaders: req.rawHeaders,
      body,
    });
    decided = authorize(engine, facts, askingWithin(engine.gather, span));
  } catch (e) {
    span.end({ allow: false, status: 403 });
    return failed(req, res, e);
  }
  const done = (c: Committed) => {
    span.end({ rule: c.decision.rule, allow: c.decision.allow, status: c.decision.status });
    render(req, res, c);
  };
  if (!(decided instanceof Promise)) return done(decided);
  decided.then(done, (e: unknown) => {
    span.end({ allow: false, status: 403 });
    failed(req, res, e);
  });
}

export function createAuthzHandler(deps: DecisionEngine, opts: AuthzServerOptions = {}): http.RequestListener {
  const maxBody = opts.maxBodyBytes ?? 1024 * 1024;
  return (req, res) => {
    const url = req.url ?? '/';
    const route = isAuthzPath(url);
    if (!route.ok) {
      req.resume();
      if (route.path === '/healthz' && (req.method === 'GET' || req.method === 'HEAD')) return send(req, res, 200, { ok: true });
      return send(req, res, 404, { error: 'not found' });
    }
    const drained = drain(req, maxBody);
    if (drained === true) return decide(req, res, route.rest, deps);
    // With a body, decide only once it is drained: an oversized request gets 413 and no audit row.
    void drained.then((ok) => {
      if (ok !== false) return decide(req, res, route.rest, deps, ok);
      res.setHeader('connection', 'close');
      send(req, res, 413, { allow: false, reason: `request body exceeds ${maxBody} bytes`, rule: 'inline' });
    });
  };
}

export function createAuthzServer(deps: DecisionEngine, opts: AuthzServerOptions = {}): http.Server {
  const requestMs = opts.requestTimeoutMs ?? 66_000;
  return http.createServer(
    {
      maxHeaderSize: opts.maxHeaderBytes ?? MAX_HEADER_BYTES,
      // Envoy and nginx keep connection pools open; let idle sockets live a little longer than theirs.
      keepAliveTimeout: 65_000,
      ...requestDeadline(requestMs),
    },
    createAuthzHandler(deps, opts),
  );
}
