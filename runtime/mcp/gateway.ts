/**
 * The MCP gateway (issue 42) on the broker listener: `/mcp/{service}` for each registry entry
 * with `kind: tool` and `protocol: mcp`. Streamable HTTP (MCP 2025-11-25) in and out: every POST
 * carries one JSON-RPC message, decided by the one `evaluate` (the egress layers, then the tool
 * layer, decision/tool.ts) with the agent's identity headers, and forwarded only when allowed;
 * the upstream's answer (JSON, or an SSE stream with the server's own requests such as sampling
 * and elicitation) is passed through as it comes, `tools/list` answers filtered to the tools this
 * agent may call. GET (the server's stream) and DELETE (end of session) pass for an agent that may
 * reach the service. A denial is a JSON-RPC error naming the reason and the audit record; the
 * upstream never sees that message. The agent's credentials (`Authorization`, its VP, every
 * `X-Writ-*` header) never go upstream: only the MCP headers do.
 */
import type http from 'node:http';
import { Agent, type Dispatcher } from 'undici';
import { H } from '../lib/brand.js';
import { BodyTooLarge, readBody } from '../lib/http.js';
import { errMsg, logger } from '../lib/log.js';
import { startDecisionSpan } from '../lib/tracing.js';
import { commit, denied, type Committed } from '../control-plane/decision/commit.js';
import { decide } from '../control-plane/decision/decide.js';
import type { DecisionEngine } from '../control-plane/decision/engine.js';
import { withHold } from '../control-plane/decision/engine.js';
import { factsFromHeaders } from '../control-plane/decision/facts.js';
import { askingWithin } from '../control-plane/decision/gather.js';
import { mayList, methodClass } from '../control-plane/decision/tool.js';
import { PRM_WELL_KNOWN, type Challenge } from '../lib/protected-resource.js';
import type { EgressFacts, Evaluation, HoldAnswer, HoldRequest, McpCall } from '../control-plane/decision/types.js';
import { callOf, readMessage, routableMismatch, type Message } from '../control-plane/decision/mcp-facts.js';
import { rpcError, RPC, type RpcId } from './jsonrpc.js';
import { filterListAnswer, filterListEvents, UnreadableList } from './list-filter.js';
import type { UpstreamSecrets } from '../lib/upstream-secrets.js';
import { upstreamAuthOf, upstreamTokensVia, type UpstreamTokens } from '../lib/upstream-tokens.js';
import { bearerToken } from '../control-plane/decision/credentials.js';
import type { Rule } from '../control-plane/types.js';
import { MCP_PREFIX, mcpChallenge, serveMetadata, type ResourceOptions } from './resource.js';

const log = logger('mcp');

export { MCP_PREFIX } from './resource.js';
/** The MCP endpoint's path on an upstream when its registry entry names none. */
export const DEFAULT_MCP_PATH = '/mcp';

export interface McpGatewayOptions extends ResourceOptions {
  engine: DecisionEngine;
  /** Holds a call for a human (the approval queue); absent: a call that needs one is denied. */
  hold?: (req: HoldRequest, signal: AbortSignal) => Promise<HoldAnswer>;
  /** Largest JSON-RPC message accepted (default 4 MiB). */
  maxBodyBytes?: number;
  /** Time to the upstream's response headers, and the longest silence within a non-streamed answer (default 30 s). */
  upstreamTimeoutMs?: number;
  /** Longest an upstream SSE stream (a POST's or the GET stream) is passed through (default 10 min); then it ends and the client reconnects. */
  streamMaxMs?: number;
  /** Largest `tools/list` answer read to be filtered (default 8 MiB). */
  maxListBytes?: number;
  /** Reads the credential an entry's `upstreamAuth` names (sent upstream instead of anything of the agent's). */
  upstreamSecrets?: UpstreamSecrets;
}

export interface McpGateway {
  /** Handles a request whose path `isGatewayPath` (resource.ts): `/mcp/{service}`, its RFC 9728 metadata, the root metadata. */
  handle(req: http.IncomingMessage, res: http.ServerResponse, path: string): void;
  close(): Promise<void>;
}

/** The request headers that go upstream: MCP's own and the trace context, nothing that identifies the agent to Writ. */
const FORWARDED = ['content-type', 'accept', 'mcp-session-id', 'mcp-protocol-version', 'last-event-id', 'mcp-method', 'mcp-name', 'traceparent', 'tracestate'];
/**
 * The upstream's response headers that come back. Never its `WWW-Authenticate`: the client's
 * authorization server is Writ's, and the upstream's challenge is about the gateway's credential.
 */
const RETURNED = ['content-type', 'mcp-session-id', 'mcp-protocol-version', 'cache-control', 'retry-after'];
const JSON_TYPE = 'application/json';

interface Settings {
  maxBodyBytes: number;
  upstreamTimeoutMs: number;
  streamMaxMs: number;
  maxListBytes: number;
}

export function createMcpGateway(o: McpGatewayOptions): McpGateway {
  const s: Settings = {
    maxBodyBytes: o.maxBodyBytes ?? 4 * 1024 * 1024,
    upstreamTimeoutMs: o.upstreamTimeoutMs ?? 30_000,
    streamMaxMs: o.streamMaxMs ?? 600_000,
    maxListBytes: o.maxListBytes ?? 8 * 1024 * 1024,
  };
  for (const [k, v] of Object.entries(s)) if (!(Number.isSafeInteger(v) && v > 0)) throw new Error(`mcp gateway: ${k} must be a positive integer`);
  const upstream = new Agent({ keepAliveTimeout: 30_000, connect: { timeout: Math.min(s.upstreamTimeoutMs, 10_000) } });
  const open = new Set<AbortController>();
  // Tokens exchanged for upstreams (`upstreamAuth: {exchange: true}`) at the authority the decisions follow.
  const tokens = upstreamTokensVia(() => o.engine.ports.identity);
  return {
    handle(req, res, path) {
      if (path.startsWith(PRM_WELL_KNOWN)) return serveMetadata(req, res, path, o, (name) => o.engine.policy.current().registry.get(name));
      const service = decodeService(path);
      if (service === undefined) {
        req.resume();
        return sendRpc(res, 404, null, RPC.invalidRequest, `no MCP service at ${path}: use ${MCP_PREFIX}{service}`);
      }
      const ac = new AbortController();
      open.add(ac);
      res.on('close', () => {
        // Only a client that left before its answer ended aborts the upstream call (an abort
        // builds a DOMException with its stack: not for every answered request).
        if (!res.writableFinished) ac.abort();
        open.delete(ac);
      });
      exchange({ req, res, service, signal: ac.signal }, o, s, upstream, tokens).catch((e: unknown) => {
        log.error('mcp exchange failed', { service, err: errMsg(e) });
        if (!res.headersSent) sendRpc(res, 502, null, RPC.upstream, 'internal gateway error');
        else res.destroy();
      });
    },
    async close() {
      for (const ac of open) ac.abort();
      await upstream.close();
    },
  };
}

/** `/mcp/{service}` -> the registry name (one segment), or undefined. */
function decodeService(path: string): string | undefined {
  const rest = path.slice(MCP_PREFIX.length);
  if (!rest || rest.includes('/')) return undefined;
  try {
    return decodeURIComponent(rest);
  } catch {
    return undefined;
  }
}

function sendRpc(
  res: http.ServerResponse,
  status: number,
  id: RpcId,
  code: number,
  message: string,
  data?: Record<string, unknown>,
  extra: Record<string, string> = {},
): void {
  const body = rpcError(id, code, message, data);
  res.writeHead(status, { ...extra, 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

interface Exchange {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  service: string;
  signal: AbortSignal;
}

/** One HTTP exchange: read and check the message, decide it, forward it or answer the denial. */
async function exchange(x: Exchange, o: McpGatewayOptions, s: Settings, upstream: Dispatcher, tokens: UpstreamTokens): Promise<void> {
  const { req, res } = x;
  const method = req.method ?? 'GET';
  const session = one(req.headers['mcp-session-id']);
  let message: Message | undefined;
  let call: McpCall;
  let body: Buffer | undefined;
  if (method === 'POST') {
    const read = await readMessageOf(req, res, s);
    if (!read) return;
    ({ message, body } = read);
    const c = callOf(message, session);
    const id = message.kind === 'notification' ? null : message.id;
    if (typeof c === 'string') return sendRpc(res, 400, id, RPC.invalidParams, c);
    const mismatch = routableMismatch(req.headers, c, message);
    if (mismatch) return sendRpc(res, 400, id, RPC.headerMismatch, mismatch);
    call = c;
  } else if (method === 'GET' || method === 'DELETE') {
    req.resume();
    call = { method: method === 'GET' ? 'stream' : 'end', ...(session ? { session } : {}) };
  } else {
    req.resume();
    res.setHeader('allow', 'GET, POST, DELETE');
    return sendRpc(res, 405, null, RPC.invalidRequest, `method ${method} is not allowed on an MCP endpoint`);
  }
  const verdict = await decideMessage(x, call, o, (ev) => upstreamAuthFor(x, ev, o, tokens));
  const id = message && message.kind !== 'notification' ? message.id : null;
  const credential = verdict.upstream;
  if (credential && 'failed' in credential) return refuseUpstream(res, id, credential, verdict.seq);
  if (!verdict.decision.allow) return answerDenial(res, verdict, call, id, message, mcpChallenge(req, o, x.service, verdict.decision, claimedBy(o)));
  const target = o.engine.policy.current().registry.get(x.service);
  if (!target) return sendRpc(res, 503, id, RPC.upstream, `${x.service} left the registry during the decision`);
  await forward(
    x,
    { origin: `http://${target.upstream}`, path: target.path ?? DEFAULT_MCP_PATH, method, body, call, id, actor: verdict.actor, credential },
    o,
    s,
    upstream,
  );
}

const one = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);

/** Whether a bearer token is one Writ's authorization server issued (the token follower the decisions use). */
const claimedBy = (o: McpGatewayOptions) => (token: string) => o.engine.ports.identity?.tokens?.().claimed(token) ?? false;

type Credential = { header: string; value: string };
/**
 * Why nothing can be sent upstream: its HTTP status, JSON-RPC code, the challenge of a missing
 * credential, and the rule the audit record names (the entry's Secret: registry; the agent's token: identity).
 */
type NoCredential = { failed: string; status: number; code: number; rule: Rule; challenge?: Challenge };
type UpstreamAuth = Credential | NoCredential | undefined;

/** What goes upstream for an allowed message (`upstreamAuthOf`); a refusal as the client gets it. */
async function upstreamAuthFor(x: Exchange, ev: Evaluation, o: McpGatewayOptions, tokens: UpstreamTokens): Promise<UpstreamAuth> {
  const target = o.engine.policy.current().registry.get(x.service);
  if (!target) return undefined; // gone from the registry: answered 503 once the decision is committed
  const raw = bearerToken(one(x.req.headers.authorization));
  const agent = ev.token && raw ? { raw, jti: ev.token.jti, exp: ev.token.exp } : undefined;
  const c = await upstreamAuthOf(target, { secrets: o.upstreamSecrets, tokens }, agent);
  if (!c || !('failed' in c)) return c;
  if (c.why === 'secret') return { failed: c.failed, status: 502, code: RPC.upstream, rule: 'registry' };
  if (c.why === 'exchange') return { failed: c.failed, status: 403, code: RPC.denied, rule: 'identity' };
  // No Writ token: 401 with the challenge that sends an OAuth client for one.
  const reason = `${c.failed} (Authorization: Bearer)`;
  const challenge = mcpChallenge(x.req, o, x.service, { status: 401, rule: 'identity', reason }, claimedBy(o));
  return { failed: reason, status: 401, code: RPC.denied, rule: 'identity', ...(challenge ? { challenge } : {}) };
}

function refuseUpstream(res: http.ServerResponse, id: RpcId, n: NoCredential, seq: number | undefined): void {
  const ref = seq === undefined ? '' : ` (audit record ${seq})`;
  const data = seq === undefined ? undefined : { rule: n.rule, reason: n.failed, auditSeq: seq };
  sendRpc(res, n.challenge?.status ?? n.status, id, n.code, `${n.failed}${ref}`, data, n.challenge ? { 'www-authenticate': n.challenge.header } : {});
}

/** The POST body as one JSON-RPC message; answers the client itself (and returns undefined) when it is not one. */
async function readMessageOf(req: http.IncomingMessage, res: http.ServerResponse, s: Settings): Promise<{ message: Message; body: Buffer } | undefined> {
  let body: Buffer;
  try {
    body = await readBody(req, s.maxBodyBytes);
  } catch (e) {
    if (e instanceof BodyTooLarge) {
      res.setHeader('connection', 'close');
      sendRpc(res, 413, null, RPC.invalidRequest, `message larger than ${s.maxBodyBytes} bytes`);
    } else req.destroy();
    return undefined;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    sendRpc(res, 400, null, RPC.parseError, 'the body is not JSON');
    return undefined;
  }
  const message = readMessage(parsed);
  if (typeof message === 'string') {
    const id = (parsed as { id?: unknown } | null)?.id;
    sendRpc(res, 400, typeof id === 'string' || typeof id === 'number' ? id : null, RPC.invalidRequest, message);
    return undefined;
  }
  return { message, body };
}

interface Verdict extends Committed {
  /** The audit record's seq, when the chain returned one. */
  seq?: number;
  /** The agent the decision allowed (its allowTools filter a `tools/list` answer). */
  actor?: string;
  /** What goes upstream for an allowed message, or why nothing can (then the committed decision is that deny). */
  upstream?: UpstreamAuth;
}

/** The MCP message as egress facts: the agent's identity headers, the service from the path, the message itself. */
export function mcpFacts(headers: http.IncomingHttpHeaders, rawHeaders: readonly string[] | undefined, service: string, call: McpCall): EgressFacts {
  const f = factsFromHeaders(headers, { rawHeaders });
  const e: EgressFacts = f.kind === 'egress' ? f : { kind: 'egress', via: 'authz', authorization: one(headers.authorization), vp: one(headers[H.agentVp]) };
  // The call is the action and resource (as the proxy's request is): not what a header declares.
  e.target = service;
  e.targetKind = 'tool';
  e.action = call.method;
  e.resource = call.name === undefined ? service : `${service}/${call.name}`;
  delete e.ticket;
  delete e.reserve;
  delete e.mcpError;
  e.mcp = call;
  return e;
}

/**
 * Decides one message, resolves what goes upstream for an allow (a Secret, a token exchanged for
 * the entry), and commits: a call nothing can be sent for is recorded as the deny it is, never as
 * an allow. The audit record's seq rides along for the denial's text.
 */
async function decideMessage(x: Exchange, call: McpCall, o: McpGatewayOptions, upstreamFor: (ev: Evaluation) => Promise<UpstreamAuth>): Promise<Verdict> {
  const { engine } = o;
  const facts = mcpFacts(x.req.headers, x.req.rawHeaders, x.service, call);
  let seq: number | undefined;
  const audit = engine.sinks.audit;
  const sinks = {
    ...engine.sinks,
    audit: {
      append: (entry: Parameters<typeof audit.append>[0]) => {
        const rec = audit.append(entry);
        const n = (rec as { seq?: unknown } | undefined)?.seq;
        if (typeof n === 'number') seq = n;
        return rec;
      },
      ...(audit.durable ? { durable: (rec: unknown) => audit.durable!(rec) } : {}),
    },
  };
  const hold = o.hold;
  const gather = hold ? withHold(engine, (r) => hold(r, x.signal)) : engine.gather;
  const span = startDecisionSpan('mcp', x.req.headers.traceparent, x.req.headers.tracestate);
  const startedAt = performance.now();
  const ev = await decide(facts, engine.policy.current, askingWithin(gather, span), engine.now);
  // Settling it may not throw past the commit: every decided message keeps its audit record.
  const upstream = ev.decision.allow
    ? await upstreamFor(ev).catch((e: unknown): UpstreamAuth => ({
        failed: `upstream credential: ${errMsg(e)}`,
        status: 502,
        code: RPC.upstream,
        rule: 'registry',
      }))
    : undefined;
  const refused = upstream && 'failed' in upstream ? upstream : undefined;
  const final = refused ? denied(ev, refused.failed, { rule: refused.rule, status: refused.status === 401 ? 401 : 403 }) : ev;
  const done = await commit(final, sinks, startedAt);
  const d = done.decision;
  span.end({ rule: d.rule, allow: d.allow, status: d.status, service: x.service });
  return { ...done, seq, actor: d.headers[H.actor], ...(upstream ? { upstream } : {}) };
}

function answerDenial(res: http.ServerResponse, v: Verdict, call: McpCall, id: RpcId, message: Message | undefined, challenge?: Challenge): void {
  const d = v.decision;
  const ref = v.seq === undefined ? '' : ` (audit record ${v.seq})`;
  const data: Record<string, unknown> = { rule: d.rule, reason: d.reason };
  if (v.seq !== undefined) data.auditSeq = v.seq;
  if (d.needsApproval) data.needsApproval = true;
  const code = methodClass(call.method) === 'unknown' ? RPC.methodNotFound : RPC.denied;
  if (d.insufficientScope) data.scope = d.insufficientScope.join(' ');
  // A credential's refusal is the HTTP challenge (RFC 6750 3, for the client's OAuth discovery); else
  // a request gets its JSON-RPC answer; a notification, a client's response, GET and DELETE an HTTP refusal.
  const status = challenge ? challenge.status : message?.kind === 'request' ? 200 : 403;
  const headers: Record<string, string> = challenge ? { 'www-authenticate': challenge.header } : {};
  sendRpc(res, status, id, code, `denied by policy: ${d.reason}${ref}`, data, headers);
}

interface Upstreamed {
  origin: string;
  path: string;
  method: string;
  body: Buffer | undefined;
  call: McpCall;
  id: RpcId;
  actor: string | undefined;
  /** The upstream's own credential (`upstreamAuth`), the one credential that goes upstream. */
  credential: Credential | undefined;
}

function upstreamHeaders(req: http.IncomingMessage, credential: Upstreamed['credential']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of FORWARDED) {
    const v = one(req.headers[k]);
    if (v !== undefined) out[k] = v;
  }
  if (credential) out[credential.header] = credential.value;
  return out;
}

function returnedHeaders(h: Dispatcher.ResponseData['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of RETURNED) {
    const v = h[k];
    if (typeof v === 'string') out[k] = v;
  }
  return out;
}

/**
 * The MCP server refused what the gateway sent it (its `upstreamAuth`, or none): a configuration
 * fault on Writ's side, not something the client's credential can fix, so a 502 and never the
 * server's challenge, which would send the client's OAuth discovery to another authorization server.
 */
async function upstreamRefused(x: Exchange, r: Dispatcher.ResponseData, u: Upstreamed): Promise<void> {
  await r.body.dump().catch(() => {});
  log.warn('mcp upstream refused the gateway', { service: x.service, status: r.statusCode });
  sendRpc(x.res, 502, u.id, RPC.upstream, `the MCP server of ${x.service} refused the gateway's credential (HTTP ${r.statusCode})`);
}

const TIMEOUTS = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']);

/** Sends the allowed message upstream and passes its answer back. */
async function forward(x: Exchange, u: Upstreamed, o: McpGatewayOptions, s: Settings, upstream: Dispatcher): Promise<void> {
  const { res } = x;
  const streamed = u.method === 'GET';
  let r: Dispatcher.ResponseData;
  try {
    r = await upstream.request({
      origin: u.origin,
      path: u.path,
      method: u.method as Dispatcher.HttpMethod,
      headers: upstreamHeaders(x.req, u.credential),
      body: u.body,
      signal: x.signal,
      headersTimeout: s.upstreamTimeoutMs,
      // A stream may be quiet for long (the GET stream, a long tool's SSE answer): bounded by streamMaxMs instead.
      bodyTimeout: 0,
    });
  } catch (e) {
    if (x.signal.aborted) return;
    const code = (e as { code?: string }).code ?? '';
    const timeout = TIMEOUTS.has(code);
    const why = timeout ? `the MCP server did not answer within ${s.upstreamTimeoutMs} ms` : `the MCP server is unreachable (${code || errMsg(e)})`;
    log.warn('mcp upstream failed', { service: x.service, err: why });
    return sendRpc(res, timeout ? 504 : 502, u.id, RPC.upstream, why);
  }
  if (r.statusCode === 401 || r.statusCode === 403) return upstreamRefused(x, r, u);
  const headers = returnedHeaders(r.headers);
  if (u.call.method === 'tools/list' && r.statusCode === 200 && u.actor) {
    return answerFiltered(x, r, headers, u, o, s);
  }
  res.writeHead(r.statusCode, headers);
  const limit = setTimeout(
    () => r.body.destroy(new Error(`stream passed ${s.streamMaxMs} ms`)),
    streamed || isStream(headers) ? s.streamMaxMs : s.upstreamTimeoutMs,
  );
  try {
    for await (const chunk of r.body) {
      if (!res.write(chunk as Buffer)) await drained(res, x.signal);
    }
    res.end();
  } catch {
    // The client left, the upstream broke off or the stream reached its limit: end what was sent.
    res.destroy();
  } finally {
    clearTimeout(limit);
  }
}

const isStream = (h: Record<string, string>) => (h['content-type'] ?? '').startsWith('text/event-stream');

function drained(res: http.ServerResponse, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new Error('client gone'));
    const done = () => {
      res.off('drain', done);
      signal.removeEventListener('abort', gone);
      resolve();
    };
    const gone = () => {
      res.off('drain', done);
      reject(new Error('client gone'));
    };
    res.on('drain', done);
    signal.addEventListener('abort', gone, { once: true });
  });
}

/** A `tools/list` answer (JSON or SSE), read whole within its bounds, with only the tools this agent may call. */
async function answerFiltered(x: Exchange, r: Dispatcher.ResponseData, headers: Record<string, string>, u: Upstreamed, o: McpGatewayOptions, s: Settings) {
  const chunks: Buffer[] = [];
  let size = 0;
  const limit = setTimeout(() => r.body.destroy(new Error('timeout')), s.upstreamTimeoutMs);
  try {
    for await (const c of r.body) {
      size += (c as Buffer).length;
      if (size > s.maxListBytes) throw new Error(`tools/list answer larger than ${s.maxListBytes} bytes`);
      chunks.push(c as Buffer);
    }
  } catch (e) {
    r.body.destroy();
    if (x.signal.aborted) return;
    return sendRpc(x.res, 502, u.id, RPC.upstream, `the MCP server's tools/list answer could not be read: ${errMsg(e)}`);
  } finally {
    clearTimeout(limit);
  }
  const may = mayList(o.engine.policy.current().registry.get(u.actor ?? ''), x.service);
  let out: Buffer;
  try {
    const body = Buffer.concat(chunks);
    out = isStream(headers) ? Buffer.from(filterListEvents(body.toString('utf8'), may)) : filterListAnswer(body, may);
  } catch (e) {
    if (!(e instanceof UnreadableList)) throw e;
    log.warn('mcp tools/list answer refused', { service: x.service, err: e.message });
    return sendRpc(x.res, 502, u.id, RPC.upstream, `the MCP server's tools/list answer could not be filtered: ${e.message}`);
  }
  delete headers['content-length'];
  x.res.writeHead(200, { ...headers, 'content-length': String(out.length) });
  x.res.end(out);
}
