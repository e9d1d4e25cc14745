/**
 * The pod-side sidecar (SPEC 4.8): a loopback-only forwarder between the agent and the model
 * broker. The agent points its OpenAI client at http://127.0.0.1:8788/v1 and holds no
 * credential; per request the sidecar mints a fresh Membership VP (12 h TTL, fresh nonce,
 * audience = the egress audience) from the identity file and forwards the call to
 * REAL_BROKER_URL through the egress proxy EGRESS_PROXY_URL with the VP in
 * `Proxy-Authorization: Bearer`: an absolute-URI request for an http:// broker, CONNECT and
 * end-to-end TLS for an https:// one. Bodies stream both ways; either side hanging up ends the
 * other.
 *
 * Env: SIDECAR_ADDR (default 127.0.0.1:8788, loopback only), <BRAND>_IDENTITY_FILE,
 * REAL_BROKER_URL, EGRESS_PROXY_URL, AGENT_VP_AUDIENCE, SIDECAR_CA_FILE (extra CA for an https
 * broker), SIDECAR_TIMEOUT_MS, SIDECAR_RELOAD_MS (identity file re-check period).
 * SIDECAR_CREDENTIAL=token: an access token fetched and renewed from SIDECAR_TOKEN_URL for
 * SIDECAR_TOKEN_AUDIENCE (token.ts) is the agent's credential instead of a VP per request.
 */
import { readFileSync, unwatchFile, watchFile, type Stats } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { isIP, type Socket } from 'node:net';
import { pipeline } from 'node:stream';
import tls from 'node:tls';
import { H, envName } from '../runtime/lib/brand.js';
import { parseAddr, type Config } from '../runtime/lib/config.js';
import { DEFAULTS } from '../runtime/lib/settings.js';
import { close as closeServer, listen } from '../runtime/lib/http.js';
import { errMsg, logger } from '../runtime/lib/log.js';
import { loadIdentity, presentationFor, type LoadedIdentity } from '../runtime/identity/client.js';
import { AgentName } from '../runtime/identity/schemas.js';
import { createTokenSource, TokenUnavailable, type TokenSource } from './token.js';

const log = logger('sidecar');

/** SPEC 8: the sidecar's VP lifetime. */
export const VP_TTL_SECONDS = 12 * 60 * 60;
export const IDENTITY_FILE_VAR = envName('IDENTITY_FILE');

/** Hop-by-hop headers (RFC 9110 7.6.1) plus the credentials the sidecar itself sets. */
const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authorization',
  'proxy-authenticate',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  H.agentVp,
]);

export interface SidecarOptions {
  /** Its slice (loadConfig's); default: every default. */
  config?: Pick<Config, 'sidecar'>;
  /** Listen address; default SIDECAR_ADDR or 127.0.0.1:8788. Must be loopback. */
  addr?: string;
  /** Path of the identity file; default <BRAND>_IDENTITY_FILE. */
  identityFile?: string;
  /** Default REAL_BROKER_URL. */
  brokerUrl?: string;
  /** Default EGRESS_PROXY_URL. */
  proxyUrl?: string;
  /** VP audience; default AGENT_VP_AUDIENCE or the brand's egress audience. */
  audience?: string;
  /** Extra trusted CA (PEM) for an https:// broker; default SIDECAR_CA_FILE. */
  ca?: string | Buffer;
  /** Connect/response-head timeout toward the proxy (default 30 000 ms). */
  timeoutMs?: number;
  /** How often the identity file is checked for a new identity (default SIDECAR_RELOAD_MS or 5000 ms). */
  reloadMs?: number;
}

/** The token source of `SIDECAR_CREDENTIAL=token` (token.ts), or undefined for a VP per request; throws on a missing setting. */
function tokenSourceOf(c: Config['sidecar'], agent: () => { identity: LoadedIdentity; name?: string }, timeoutMs: number): TokenSource | undefined {
  if (c.credential !== 'token') return undefined;
  const tokenUrl = httpUrl(c.tokenUrl, 'SIDECAR_TOKEN_URL (SIDECAR_CREDENTIAL=token)');
  if (!c.tokenAudience)
    throw new Error('SIDECAR_TOKEN_AUDIENCE is not set (SIDECAR_CREDENTIAL=token): it names the registry entry the token is for (the broker)');
  return createTokenSource({ tokenUrl, audience: c.tokenAudience, agent, subjectFile: c.tokenSubjectFile, timeoutMs });
}

/** An enforcement point's refusal that may be the token's (401/407, or 403 naming the access token): drop it. */
const tokenRefused = (status: number | undefined, reason: unknown) =>
  status === 401 || status === 407 || (status === 403 && typeof reason === 'string' && /access token/i.test(reason));

export interface RunningSidecar {
  port: number;
  server: http.Server;
  close(): Promise<void>;
}

/** True for 127.0.0.0/8, ::1 and localhost. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h === '::1') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (h.startsWith('::ffff:')) return h.slice(7).startsWith('127.');
  return false;
}

/** Reads and validates the identity file; every failure is one clear sentence. */
export function readIdentityFile(path: string | undefined): { identity: LoadedIdentity; name?: string } {
  if (!path) throw new Error(`${IDENTITY_FILE_VAR} is not set: it must name the agent's identity file (the provision response JSON)`);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new Error(`cannot read identity file ${path} (${IDENTITY_FILE_VAR}): ${errMsg(e)}`, { cause: e });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new Error(`identity file ${path} is not valid JSON`);
  }
  try {
    const identity = loadIdentity(raw);
    const name = (raw as { name?: unknown }).name;
    // Sent as the actor header on every call: an agent name as the identity authority allows it.
    if (name !== undefined && name !== null && name !== '' && !AgentName.safeParse(name).success) {
      throw new Error('name: not an agent name (letters, digits and . _ @ : - only, starting with a letter or digit)');
    }
    return { identity, name: typeof name === 'string' && name ? name : undefined };
  } catch (e) {
    const msg =
      e instanceof Error && 'issues' in e
        ? (e as { issues: { path: PropertyKey[]; message: string }[] }).issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')
        : errMsg(e);
    throw new Error(`identity file ${path} is not a valid agent identity (${msg})`, { cause: e });
  }
}

function httpUrl(v: string | undefined, name: string): URL {
  if (!v) throw new Error(`${name} is not set`);
  if (!URL.canParse(v)) throw new Error(`${name} is not a URL: ${JSON.stringify(v)}`);
  const u = new URL(v);
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`${name} must be an http:// or https:// URL`);
  return u;
}

function sendError(res: http.ServerResponse, status: number, code: string, message: string, extra: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const data = JSON.stringify({ error: { message, type: status === 504 ? 'timeout_error' : 'api_error', param: null, code } });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data), ...extra });
  res.end(data);
}

/** The client's end-to-end headers; the sidecar's own are added by the caller. */
function forwardHeaders(req: http.IncomingMessage): Record<string, string | string[]> {
  const drop = new Set(HOP);
  const conn = req.headers.connection;
  if (typeof conn === 'string') for (const t of conn.split(',')) drop.add(t.trim().toLowerCase());
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !drop.has(k)) out[k] = v;
  return out;
}

export async function startSidecar(opts: SidecarOptions = {}): Promise<RunningSidecar> {
  const c = (opts.config ?? DEFAULTS).sidecar;
  // Everything is checked before the port opens: a sidecar that cannot prove who it is never listens.
  const addr = opts.addr ?? c.addr;
  const { host } = parseAddr(addr);
  if (!isLoopback(host))
    throw new Error(
      `SIDECAR_ADDR must be a loopback address (127.0.0.1 or ::1), got ${JSON.stringify(addr)}: the sidecar mints credentials for whoever reaches it`,
    );
  const identityPath = opts.identityFile ?? c.identityFile;
  let { identity, name } = readIdentityFile(identityPath);
  const broker = httpUrl(opts.brokerUrl ?? c.brokerUrl, 'REAL_BROKER_URL');
  const proxy = httpUrl(opts.proxyUrl ?? c.proxyUrl, 'EGRESS_PROXY_URL');
  if (proxy.protocol !== 'http:') throw new Error('EGRESS_PROXY_URL must be an http:// URL (the proxy speaks plain HTTP; TLS to the broker stays end to end)');
  const audience = opts.audience ?? c.audience;
  const caFile = c.caFile;
  const ca = opts.ca ?? (caFile ? readFileSync(caFile) : undefined);
  const timeoutMs = opts.timeoutMs ?? c.timeoutMs;
  const reloadMs = opts.reloadMs ?? c.reloadMs;
  // A mint proves the key works before the port opens.
  await presentationFor(identity, { audience, ttlSeconds: VP_TTL_SECONDS });
  const tokens = tokenSourceOf(c, () => ({ identity, name }), timeoutMs);
  // The first token is fetched now (a failure is each call's clear error until one is had).
  void tokens?.current().catch((e: unknown) => log.warn('no access token yet', { err: errMsg(e) }));

  const proxyHost = proxy.hostname.replace(/^\[|\]$/g, '');
  const proxyPort = Number(proxy.port || 80);
  const brokerTls = broker.protocol === 'https:';
  const brokerHost = broker.hostname.replace(/^\[|\]$/g, '');
  const brokerPort = Number(broker.port || (brokerTls ? 443 : 80));
  const brokerAuthority = broker.host;
  const prefix = broker.pathname.replace(/\/+$/, '');
  // Absolute-URI requests carry their own Proxy-Authorization, so their connections may be reused.
  const proxyAgent = new http.Agent({ keepAlive: true, keepAliveMsecs: 30_000 });

  const handler: http.RequestListener = (req, res) => {
    const url = req.url ?? '/';
    if (!url.startsWith('/')) {
      // The sidecar is not an open proxy: only origin-form paths are forwarded to the broker.
      req.resume();
      return sendError(res, 400, 'invalid_request', 'the sidecar forwards origin-form paths (/v1/...) to the broker only');
    }
    void (async () => {
      let vp: string;
      try {
        vp = tokens ? await tokens.current() : await presentationFor(identity, { audience, ttlSeconds: VP_TTL_SECONDS });
      } catch (e) {
        req.resume();
        if (e instanceof TokenUnavailable) {
          log.error('no access token: call refused (fail closed)', { err: errMsg(e) });
          return sendError(res, 503, 'token_unavailable', `the sidecar has no access token for its agent: ${e.message}`);
        }
        log.error('cannot mint VP', { err: errMsg(e) });
        return sendError(res, 500, 'vp_mint_failed', 'the sidecar could not mint a presentation');
      }
      const headers = forwardHeaders(req);
      headers.host = brokerAuthority;
      // The VP (or the access token) is also the agent token (SPEC 4.1 egress: `Authorization:
      // Bearer`), so the broker's own /authz decision can verify the caller (required in vc mode);
      // the agent's dummy key is replaced.
      headers.authorization = `Bearer ${vp}`;
      if (!tokens) headers[H.agentVp] = vp;
      if (name) headers[H.actor] = name;
      const path = prefix + url;
      const proxyAuth = `Bearer ${vp}`;
      const onUpstream = (up: http.IncomingMessage) => {
        if (tokens && tokenRefused(up.statusCode, up.headers[H.denyReason])) tokens.invalidate(vp);
        const out: Record<string, string | string[]> = {};
        for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !HOP.has(k)) out[k] = v;
        res.writeHead(up.statusCode ?? 502, up.statusMessage, out);
        res.flushHeaders();
        pipeline(up, res, (err) => {
          if (err) res.destroy();
        });
      };
      const onFail = (e: unknown, upReq?: http.ClientRequest) => {
        upReq?.destroy();
        if (res.writableEnded || res.destroyed) return;
        const timedOut = (e as { code?: string }).code === 'ETIMEDOUT';
        log.warn('forward failed', { err: errMsg(e) });
        sendError(res, timedOut ? 504 : 502, timedOut ? 'proxy_timeout' : 'proxy_unreachable', `the egress proxy could not be used (${errMsg(e)})`);
      };
      const send = (upReq: http.ClientRequest) => {
        upReq.setTimeout(timeoutMs, () => upReq.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })));
        upReq.on('response', (up) => {
          upReq.setTimeout(0);
          onUpstream(up);
        });
        upReq.on('error', (e) => onFail(e, upReq));
        res.on('close', () => {
          if (!res.writableFinished) upReq.destroy();
        });
        pipeline(req, upReq, (err) => {
          if (err) upReq.destroy();
        });
      };

      if (!brokerTls) {
        send(
          http.request({
            host: proxyHost,
            port: proxyPort,
            method: req.method,
            path: `http://${brokerAuthority}${path}`,
            headers: { ...headers, 'proxy-authorization': proxyAuth },
            agent: proxyAgent,
          }),
        );
        return;
      }

      // https: one CONNECT tunnel per request (each carries its own fresh VP), TLS inside it.
      const connect = http.request({
        host: proxyHost,
        port: proxyPort,
        method: 'CONNECT',
        path: `${brokerHost.includes(':') ? `[${brokerHost}]` : brokerHost}:${brokerPort}`,
        headers: { host: `${brokerHost}:${brokerPort}`, 'proxy-authorization': proxyAuth },
        agent: false,
      });
      connect.setTimeout(timeoutMs, () => connect.destroy(Object.assign(new Error(`CONNECT not answered within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })));
      connect.on('error', (e) => onFail(e));
      connect.on('connect', (r, socket: Socket, head) => {
        connect.setTimeout(0);
        if (r.statusCode !== 200) {
          // The proxy refused the tunnel (407 no credential, 403 deny): its status and reason go back.
          socket.destroy();
          req.resume();
          if (tokens && tokenRefused(r.statusCode, r.headers[H.denyReason])) tokens.invalidate(vp);
          const rh = r.headers[H.denyReason];
          const reason = typeof rh === 'string' ? rh : '';
          const status = r.statusCode && r.statusCode >= 400 && r.statusCode < 600 ? r.statusCode : 502;
          return sendError(
            res,
            status,
            'egress_denied',
            `the egress proxy refused the tunnel (${r.statusCode ?? 'no status'})${reason ? `: ${reason}` : ''}`,
            reason ? { [H.denyReason]: reason } : {},
          );
        }
        if (head.length) socket.unshift(head);
        send(
          https.request({
            host: brokerHost,
            port: brokerPort,
            method: req.method,
            path,
            headers,
            // No agent: the request must ride this tunnel, never a fresh direct connection.
            agent: undefined,
            createConnection: () =>
              tls.connect({ socket, host: brokerHost, servername: isIP(brokerHost) ? undefined : brokerHost, ca, ALPNProtocols: ['http/1.1'] }),
          }),
        );
      });
      res.on('close', () => {
        if (!res.writableFinished) connect.destroy();
      });
      connect.end();
    })().catch((e: unknown) => {
      // Never an unhandled rejection (it would end the process): the call fails, the sidecar stays.
      log.error('forward failed', { err: errMsg(e) });
      req.resume();
      if (!res.headersSent) sendError(res, 502, 'sidecar_error', 'the sidecar could not forward the call');
      else res.destroy();
    });
  };

  // A re-provisioned identity (a rotated secret) is picked up without a restart; a file that
  // becomes unreadable or invalid keeps the last good identity and is reported.
  const onChange = (cur: Stats) => {
    if (cur.mtimeMs === 0) return log.error('identity file disappeared; keeping the current identity', { file: identityPath });
    try {
      const next = readIdentityFile(identityPath);
      identity = next.identity;
      name = next.name;
      log.info('identity reloaded', { agent: name ?? identity.did });
    } catch (e) {
      log.error('identity file change rejected; keeping the current identity', { err: errMsg(e) });
    }
  };
  if (identityPath) watchFile(identityPath, { interval: reloadMs, persistent: false }, onChange);

  const server = http.createServer({ keepAliveTimeout: 65_000 }, handler);
  let port: number;
  try {
    port = await listen(server, addr);
  } catch (e) {
    if (identityPath) unwatchFile(identityPath, onChange);
    throw e;
  }
  log.info('sidecar listening', {
    port,
    agent: name ?? identity.did,
    broker: broker.origin,
    proxy: proxy.origin,
    via: brokerTls ? 'CONNECT' : 'absolute-URI',
    credential: tokens ? 'access token' : 'VP per request',
  });
  return {
    port,
    server,
    async close() {
      tokens?.close();
      if (identityPath) unwatchFile(identityPath, onChange);
      await closeServer(server);
      proxyAgent.destroy();
    },
  };
}
