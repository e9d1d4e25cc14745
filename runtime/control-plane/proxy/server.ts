/**
 * The egress forward proxy (SPEC 4.2, EGRESS_PROXY_ADDR, default `:9092`): a node:http server
 * for absolute-URI plain HTTP requests plus its 'connect' event for CONNECT tunnels over raw
 * net sockets. TLS is never terminated: after `200 Connection Established` the proxy copies
 * bytes. Each request runs `decideProxy` (the /authz egress decision, audited `egress.proxy`).
 *
 * Responses: 407 + Proxy-Authenticate without usable credentials; 403 + X-Writ-Deny-Reason on a
 * deny; held requests wait for the approval queue (approved -> forward, denied/expired -> 403);
 * 400 for a malformed target or missing Host; 502 when the upstream fails, 504 when it times
 * out. Bodies stream both ways through pipe() (backpressure), never buffered whole.
 *
 * Limits (ProxyLimits): header timeout (slowloris -> 408), max header size (-> 431), upstream
 * connect timeout, idle timeout on both legs. Held requests are exempt from the idle timeout.
 */
import http from 'node:http';
import net from 'node:net';
import { Agent as UndiciAgent, type Dispatcher } from 'undici';
import { Gauge, Counter, type Registry as PromRegistry } from 'prom-client';
import { metric } from '../../lib/brand.js';
import { hasBody } from '../../lib/http.js';
import { holdForHuman } from '../approvals/hold.js';
import { errMsg, logger } from '../../lib/log.js';
import type { ApprovalQueue } from '../approvals/queue.js';
import type { DecisionEngine } from '../decision/engine.js';
import type { HoldAnswer, HoldRequest } from '../decision/types.js';
import { H } from '../../lib/brand.js';
import { decideProxy, type ProxyDecider, type ProxyVerdict, type UpstreamChoice, type VerdictOutcome } from './decide.js';
import type { Evaluation } from '../decision/types.js';
import { rewriteRequestHeaders, rewriteResponseHeaders, withoutAgentTokens } from './headers.js';
import type { UpstreamSecrets } from '../../lib/upstream-secrets.js';
import { upstreamAuthOf, upstreamTokensVia } from '../../lib/upstream-tokens.js';
import { bearerToken } from '../decision/credentials.js';
import { DENY_REASON, REALM, denyBody, denyHeaders, rawReply, sendJson, upstreamError } from './responses.js';
import { DEFAULTS } from '../../lib/settings.js';
import { parseAbsoluteTarget, type ProxyTarget } from './target.js';
import { guardedLookup } from './dial-guard.js';
import { createTunnels } from './tunnel.js';

const log = logger('egress-proxy');

export interface ProxyLimits {
  /** Time a client has to send the whole request head (slowloris guard; 408 after). */
  headersTimeoutMs: number;
  /** Largest request head (431 past it). VPs in Proxy-Authorization are a few KiB. */
  maxHeaderBytes: number;
  /** Time to establish the upstream TCP connection (504 after). */
  connectTimeoutMs: number;
  /** Inactivity allowed on either leg of an exchange or tunnel (504 before a response, then a reset). */
  idleTimeoutMs: number;
  /** Idle time a client keep-alive connection is kept between requests. */
  keepAliveTimeoutMs: number;
  /** Bytes a CONNECT client may send ahead while its tunnel is decided or held (then reading pauses). */
  maxEarlyBytes: number;
  /** How often an open tunnel's decision is asked again (revoked, suspended or unlisted: closed). */
  tunnelRecheckMs: number;
}

/** The EGRESS_PROXY_* settings' defaults (runtime/lib/settings.ts) and the fixed limits. */
export const DEFAULT_LIMITS: ProxyLimits = {
  ...DEFAULTS.proxy.limits,
  maxEarlyBytes: 64 * 1024,
  tunnelRecheckMs: 1000,
};

export interface ForwardProxyOptions {
  /** The control plane's decision engine (the same one /authz runs); or `decide`. */
  engine?: DecisionEngine;
  /** How requests are decided instead of the engine (the egress gateway asks /authz). */
  decide?: ProxyDecider;
  /** The approval queue, or a getter for it; absent: requests that need approval are denied. */
  queue?: ApprovalQueue | (() => ApprovalQueue | undefined);
  limits?: Partial<ProxyLimits>;
  /** Registers the proxy's own gauges and counters here (the control plane's metrics registry). */
  metricsRegistry?: PromRegistry;
  /** Answers `GET /readyz` on the proxy listener (the egress gateway); absent: 400 like any origin-form request. */
  readyz?: () => [number, object];
  /** Reads the credential a registry target's `upstreamAuth` names (plain HTTP only: a CONNECT tunnel is the agent's TLS). */
  upstreamSecrets?: UpstreamSecrets;
}

export interface ProxyStats {
  /** Client connections open on the proxy listener (keep-alive, held, and tunnel client legs). */
  clients: number;
  /** Upstream sockets in use: tunnel legs plus pooled sockets carrying a request. */
  upstreams: number;
  /** Idle keep-alive sockets in the upstream pool (closed by the upstream, the idle timeout, or close()). */
  pooled: number;
  /** Open CONNECT tunnels. */
  tunnels: number;
  /** Requests waiting for a human decision. */
  held: number;
}

export interface ForwardProxy {
  server: http.Server;
  stats(): ProxyStats;
  /** Stops accepting connections and closes idle keep-alive ones (held requests keep waiting). */
  stopAccepting(): void;
  /**
   * Stops accepting, aborts remaining holds, gives in-flight exchanges `graceMs` (default 5 s) to
   * finish, then destroys every socket. Every decision's audit row is appended before it resolves.
   */
  close(graceMs?: number): Promise<void>;
}

function ignore(): void {}

export function createForwardProxy(opts: ForwardProxyOptions): ForwardProxy {
  const engine = opts.engine;
  if (!engine && !opts.decide) throw new Error('a forward proxy needs a decision engine or a decide function');
  const decide: ProxyDecider = opts.decide ?? ((r, h) => decideProxy(r, engine!, h));
  // Tokens exchanged for upstreams (`upstreamAuth: {exchange: true}`) at the authority the decisions follow.
  const tokens = upstreamTokensVia(() => engine?.ports.identity);
  const limits: ProxyLimits = { ...DEFAULT_LIMITS, ...opts.limits };
  const queueOf = (): ApprovalQueue | undefined => (typeof opts.queue === 'function' ? opts.queue() : opts.queue);

  const clients = new Set<net.Socket>();
  const upstreamSockets = new Set<net.Socket>();
  const holds = new Set<AbortController>();
  let closing = false;
  let drained: (() => void) | undefined;

  // Upstream leg of plain HTTP: undici's pooled keep-alive client (a per-origin pool). Its
  // headers/body timeouts are the idle timeout of the exchange; connect has its own.
  const upstream = new UndiciAgent({
    keepAliveTimeout: 30_000,
    connect: { timeout: limits.connectTimeoutMs, lookup: guardedLookup },
    headersTimeout: limits.idleTimeoutMs,
    bodyTimeout: limits.idleTimeoutMs,
  });

  const registers = opts.metricsRegistry ? [opts.metricsRegistry] : [];
  // One proxy per metrics registry; a re-created proxy (tests) replaces the previous series.
  for (const n of [metric('egress_proxy_upstream_errors_total'), metric('egress_proxy_open')]) opts.metricsRegistry?.removeSingleMetric(n);
  const upstreamErrors = new Counter({
    name: metric('egress_proxy_upstream_errors_total'),
    help: 'Forward proxy exchanges that failed upstream, by transport and answered status (502 or 504).',
    labelNames: ['via', 'status'] as const,
    registers,
  });
  new Gauge({
    name: metric('egress_proxy_open'),
    help: 'Forward proxy connections open now: client connections, upstream sockets, tunnels, held requests.',
    labelNames: ['kind'] as const,
    registers,
    collect() {
      const s = stats();
      for (const k of ['clients', 'upstreams', 'pooled', 'tunnels', 'held'] as const) this.set({ kind: k }, s[k]);
    },
  });

  function stats(): ProxyStats {
    let busy = 0;
    let pooled = 0;
    for (const st of Object.values(upstream.stats) as { connected?: number; free?: number }[]) {
      const connected = st.connected ?? 0;
      const free = st.free ?? 0;
      busy += connected - free;
      pooled += free;
    }
    return { clients: clients.size, upstreams: upstreamSockets.size + busy, pooled, tunnels: tunnels.open(), held: holds.size };
  }

  const server = http.createServer({
    maxHeaderSize: limits.maxHeaderBytes,
    requireHostHeader: false,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    headersTimeout: limits.headersTimeoutMs,
    // Held requests may legitimately take minutes; the idle timeout bounds everything else.
    requestTimeout: 0,
    connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4))),
  });
  // No socket timeout on client connections: headersTimeout bounds a request head,
  // keepAliveTimeout an idle keep-alive connection, and the upstream leg's idle timeout an
  // exchange in both directions (a client that stops reading stalls the upstream leg too).
  server.timeout = 0;

  server.on('connection', (s: net.Socket) => {
    clients.add(s);
    s.once('close', () => {
      clients.delete(s);
      if (clients.size === 0) drained?.();
    });
  });

  /** Holds a request in the approval queue until a human decides or it expires; never rejects. */
  async function hold(input: HoldRequest, onGone: (abort: () => void) => () => void): Promise<HoldAnswer> {
    const queue = queueOf();
    if (!queue) return { result: 'unavailable', detail: 'the egress approval queue is disabled' };
    if (closing) return { result: 'unavailable', detail: 'proxy shutting down' };
    const ac = new AbortController();
    holds.add(ac);
    const release = onGone(() => ac.abort());
    try {
      return await holdForHuman(queue, input, ac.signal);
    } finally {
      release();
      holds.delete(ac);
    }
  }

  // ---- plain HTTP (absolute-form request target) -------------------------------------------

  /**
   * One plain-HTTP exchange: undici's dispatch handler, as a class (no per-request closures on
   * the hot path). Streams the upstream answer to `res` with backpressure.
   */
  class Exchange {
    abort: ((e?: Error) => void) | undefined;
    finished = false;
    resume: (() => void) | undefined;
    draining = false;
    constructor(
      readonly req: http.IncomingMessage,
      readonly res: http.ServerResponse,
      readonly t: ProxyTarget,
      readonly body: http.IncomingMessage | null,
    ) {}

    /** res 'close': a client that goes away before the answer is complete aborts the upstream leg. */
    onResClose(): void {
      if (!this.res.writableFinished && !this.finished) this.abort?.(new Error('client went away'));
    }

    onConnect(a: (e?: Error) => void): void {
      this.abort = a;
      if (this.res.destroyed) a(new Error('client went away'));
    }

    onHeaders(status: number, rawHeaders: Buffer[], resume: () => void, statusText: string): boolean {
      const res = this.res;
      if (res.destroyed) return false;
      this.resume = resume;
      res.writeHead(status, statusText, rewriteResponseHeaders(rawHeaders) as unknown as http.OutgoingHttpHeaders);
      return true;
    }

    onData(chunk: Buffer): boolean {
      const ok = this.res.write(chunk);
      if (!ok && !this.draining && this.resume) {
        this.draining = true;
        this.res.on('drain', this.resume);
      }
      return ok;
    }

    onComplete(): void {
      this.finished = true;
      this.res.end();
    }

    onError(e: Error): void {
      this.finished = true;
      const res = this.res;
      if (this.body) this.req.unpipe();
      if (res.destroyed) return; // the client went away: nothing to answer, not an upstream failure
      if (!res.headersSent) {
        const f = upstreamError(this.t, e);
        upstreamErrors.inc({ via: 'http', status: String(f.status) });
        log.warn('upstream failed', { target: this.t.hostPort, status: f.status, err: errMsg(e) });
        // The request body may be half read: close the client connection after the answer.
        sendJson(res, f.status, { error: f.message }, {}, true);
      } else {
        res.destroy();
      }
    }
  }

  /**
   * What goes upstream for an allowed request (`upstreamAuthOf`: the entry's Secret or a token
   * exchanged for it), or why nothing can: the deny it becomes (the Secret's: registry, 502; the
   * agent token's: identity, 403).
   */
  async function upstreamChoice(req: http.IncomingMessage, t: ProxyTarget, token: VerdictOutcome['token'], ticketed: boolean): Promise<UpstreamChoice> {
    // A ticketed hop is Writ's broker, the next enforcement point: it gets the agent's credential, not the upstream's.
    if (ticketed) return {};
    const entry = engine?.policy.current().registry.findByUpstream(t.hostPort);
    const raw = bearerToken(req.headers['proxy-authorization']);
    const agent = token && raw ? { raw, jti: token.jti, exp: token.exp } : undefined;
    const c = await upstreamAuthOf(entry, { secrets: opts.upstreamSecrets, tokens }, agent);
    if (c && 'failed' in c)
      return c.why === 'secret' ? { refused: c.failed, rule: 'registry', status: 502 } : { refused: c.failed, rule: 'identity', status: 403 };
    return c ? { credential: c } : {};
  }

  /** The call with what goes upstream: settled in the decision (in plane), or here after an /authz answer (the egress gateway). */
  async function forwardHttp(req: http.IncomingMessage, res: http.ServerResponse, t: ProxyTarget, outcome: VerdictOutcome): Promise<void> {
    const choice = outcome.upstream ?? (await upstreamChoice(req, t, outcome.token, !!outcome.ticket));
    if ('refused' in choice) return refuseUpstream(req, res, choice);
    dispatchHttp(req, res, t, outcome, choice.credential);
  }

  function refuseUpstream(req: http.IncomingMessage, res: http.ServerResponse, r: { refused: string; status: number }): void {
    req.resume();
    sendJson(res, r.status, { error: r.refused }, {}, hasBody(req.headers));
  }

  function dispatchHttp(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    t: ProxyTarget,
    outcome: VerdictOutcome,
    cred: { header: string; value: string } | undefined,
  ): void {
    if (res.destroyed || req.socket.destroyed) return;
    // The call ticket tells the next hop (the broker's /authz) this call is already counted.
    const add = outcome.ticket ? { ...outcome.decision.headers, [H.callTicket]: outcome.ticket } : outcome.decision.headers;
    const rewritten = rewriteRequestHeaders(req.rawHeaders, req.headers.connection, add, t.port === 80 ? t.host : t.hostPort);
    // A ticketed hop is Writ's broker (the upstream serves a registry model): the next enforcement
    // point, which decides again on the agent's credential and strips it before its provider.
    const raw = outcome.ticket ? rewritten : withoutAgentTokens(rewritten, cred);
    if (closing) res.setHeader('connection', 'close');
    // Transfer-Encoding is hop-by-hop: undici re-frames a streamed body without a length as chunked.
    const body = hasBody(req.headers) ? req : null;
    if (!body) req.resume();
    const x = new Exchange(req, res, t, body);
    res.once('close', () => x.onResClose());
    upstream.dispatch(
      { origin: `http://${t.hostPort}`, path: t.path, method: (req.method ?? 'GET') as Dispatcher.HttpMethod, headers: raw, body },
      x as unknown as Dispatcher.DispatchHandler,
    );
  }

  function onRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = req.url ?? '';
    if (url.startsWith('/')) {
      if (url === '/healthz' && (req.method === 'GET' || req.method === 'HEAD')) return sendJson(res, closing ? 503 : 200, { ok: !closing });
      if (url === '/readyz' && opts.readyz && (req.method === 'GET' || req.method === 'HEAD')) return sendJson(res, ...opts.readyz());
      return sendJson(res, 400, { error: 'a proxy request needs an absolute URI (http://host/path), or CONNECT host:port for TLS' }, {}, hasBody(req.headers));
    }
    const p = parseAbsoluteTarget(url);
    if (!p.ok) return sendJson(res, 400, { error: p.error }, {}, hasBody(req.headers));
    if (req.headers.host === undefined) return sendJson(res, 400, { error: 'missing Host header (required by HTTP/1.1)' }, {}, hasBody(req.headers));
    const t = p.target;
    // The body stream may be destroyed with an error (client reset, upstream failure mid-upload):
    // the exchange's own handlers answer or cut the connection; the error must not crash the process.
    req.on('error', ignore);
    // Do not read the body before the decision: a denied upload is never accepted.
    req.pause();
    void decidePlain(req, res, t);
  }

  function replyPlain(req: http.IncomingMessage, res: http.ServerResponse, t: ProxyTarget, v: ProxyVerdict, requestId?: string): void {
    const settled = v.outcome.upstream;
    if (settled && 'refused' in settled) return refuseUpstream(req, res, settled);
    if (v.kind === 'allow') {
      forwardHttp(req, res, t, v.outcome).catch((e: unknown) => {
        log.error('forwarding failed', { target: t.hostPort, err: errMsg(e) });
        res.destroy();
      });
      return;
    }
    if (v.kind === 'challenge') {
      return sendJson(res, 407, denyBody(v.outcome), { 'proxy-authenticate': `Bearer realm="${REALM}"`, ...denyHeaders(v.outcome) }, hasBody(req.headers));
    }
    if (v.kind === 'deny') return sendJson(res, 403, denyBody(v.outcome, requestId), denyHeaders(v.outcome, requestId), hasBody(req.headers));
  }

  /** Decides a plain request (holding it if a human must decide), then forwards or answers. Never rejects. */
  async function decidePlain(req: http.IncomingMessage, res: http.ServerResponse, t: ProxyTarget): Promise<void> {
    let v: ProxyVerdict;
    try {
      const upstreamFor = (ev: Evaluation) => upstreamChoice(req, t, ev.token, !!ev.effects.ticket);
      v = await decide({ via: 'http', method: req.method ?? 'GET', target: t, headers: req.headers, rawHeaders: req.rawHeaders, upstreamFor }, (input) =>
        hold(input, (abort) => {
          const onClose = () => {
            if (!res.writableFinished) abort();
          };
          if (res.destroyed) abort();
          else res.once('close', onClose);
          return () => res.off('close', onClose);
        }),
      );
    } catch (e) {
      log.error('proxy decision failed', { err: errMsg(e) });
      return sendJson(res, 403, { allow: false, reason: 'internal decision error', rule: 'inline' }, { [DENY_REASON]: 'internal decision error' }, true);
    }
    replyPlain(req, res, t, v, v.requestId);
  }

  // ---- CONNECT tunnels (tunnel.ts) ---------------------------------------------------------

  const tunnels = createTunnels({ decide, limits, upstreamSockets, upstreamErrors, hold });

  server.on('request', onRequest);
  server.on('connect', tunnels.onConnect);
  server.on('upgrade', (_req: http.IncomingMessage, socket: net.Socket) => {
    socket.on('error', () => socket.destroy());
    rawReply(socket, 501, {}, { error: 'protocol upgrade through the proxy is not supported; use CONNECT host:port' });
  });

  const stopAccepting = () => {
    closing = true;
    if (server.listening) server.close();
    server.closeIdleConnections();
  };

  return {
    server,
    stats,
    stopAccepting,
    async close(graceMs = 5000) {
      stopAccepting();
      for (const ac of holds) ac.abort();
      if (clients.size > 0) {
        await new Promise<void>((resolve) => {
          drained = resolve;
          const t = setTimeout(resolve, graceMs);
          t.unref();
        });
      }
      for (const s of clients) s.destroy();
      for (const s of upstreamSockets) s.destroy();
      await upstream.destroy().catch(() => {});
      drained = undefined;
    },
  };
}
