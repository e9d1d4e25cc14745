/**
 * CONNECT tunnels of the egress forward proxy (its server's 'connect' event). The authority-form
 * target is decided like a plain request (held while a human decides; the client's early bytes
 * are kept, and reading pauses past `maxEarlyBytes`), then a raw net socket to the upstream is
 * spliced to the client's with pipe(). TLS is never terminated. Refusals and upstream failures
 * before the tunnel opens (400, 403, 407, 502, 504) are written straight on the socket.
 * Every `tunnelRecheckMs` each open tunnel's decision is asked again (`ProxyVerdict.recheck`): a
 * tunnel whose agent was revoked, suspended or taken off the registry or its allow list is closed,
 * and the audit log says why.
 */
import type http from 'node:http';
import net from 'node:net';
import type { Counter } from 'prom-client';
import { errMsg, logger } from '../../lib/log.js';
import type { HoldAnswer, HoldRequest } from '../decision/types.js';
import type { ProxyDecider, ProxyVerdict } from './decide.js';
import { guardedLookup } from './dial-guard.js';
import { DENY_REASON, REALM, UpstreamTimeout, denyBody, denyHeaders, rawReply, upstreamError } from './responses.js';
import type { ProxyLimits } from './server.js';
import { parseConnectTarget, type ProxyTarget } from './target.js';

const log = logger('egress-proxy');

export interface TunnelDeps {
  decide: ProxyDecider;
  limits: ProxyLimits;
  /** The proxy's upstream sockets: a tunnel's upstream leg is in it until it closes. */
  upstreamSockets: Set<net.Socket>;
  /** The proxy's upstream error counter (label `via: connect` here). */
  upstreamErrors: Counter<'via' | 'status'>;
  /** The proxy's hold: waits for the approval queue; `onGone` wires the abort to the client going away. */
  hold(input: HoldRequest, onGone: (abort: () => void) => () => void): Promise<HoldAnswer>;
}

export interface Tunnels {
  /** The server's 'connect' listener. */
  onConnect(req: http.IncomingMessage, socket: net.Socket, head: Buffer): void;
  /** Tunnels open now. */
  open(): number;
}

interface Live {
  target: string;
  recheck: NonNullable<ProxyVerdict['recheck']>;
  kill(): void;
  checking?: boolean;
}

export function createTunnels(deps: TunnelDeps): Tunnels {
  const { decide, limits, upstreamSockets, upstreamErrors, hold } = deps;
  let tunnels = 0;
  const live = new Set<Live>();
  let timer: NodeJS.Timeout | undefined;

  function recheckAll(): void {
    for (const l of live) {
      if (l.checking) continue;
      l.checking = true;
      l.recheck().then(
        (denied) => {
          l.checking = false;
          if (!denied || !live.has(l)) return;
          log.info('tunnel closed: its decision is now deny', { target: l.target, reason: denied.decision.reason });
          l.kill();
        },
        (e: unknown) => {
          l.checking = false;
          log.error('tunnel recheck failed; closing it (fail closed)', { target: l.target, err: errMsg(e) });
          l.kill();
        },
      );
    }
  }

  function track(l: Live): () => void {
    live.add(l);
    timer ??= setInterval(recheckAll, limits.tunnelRecheckMs).unref();
    return () => {
      live.delete(l);
      if (live.size === 0 && timer) {
        clearInterval(timer);
        timer = undefined;
      }
    };
  }

  function openTunnel(socket: net.Socket, t: ProxyTarget, early: Buffer[], onData: (c: Buffer) => void, recheck?: ProxyVerdict['recheck']): void {
    if (socket.destroyed) return;
    const up = net.connect({ host: t.connectHost, port: t.port, lookup: guardedLookup });
    upstreamSockets.add(up);
    let established = false;
    const connectTimer = setTimeout(() => up.destroy(new UpstreamTimeout(`no connection within ${limits.connectTimeoutMs} ms`)), limits.connectTimeoutMs);
    const kill = () => {
      socket.destroy();
      up.destroy();
    };
    let untrack: (() => void) | undefined;
    up.once('close', () => {
      clearTimeout(connectTimer);
      untrack?.();
      upstreamSockets.delete(up);
      if (established) tunnels--;
      // A clean upstream close was already forwarded by pipe (end); give the client leg its
      // idle timeout to finish, and cut it at once after an error.
      if (!socket.destroyed && !socket.writableEnded) socket.end();
    });
    up.on('error', (e) => {
      if (!established) {
        const f = upstreamError(t, e);
        upstreamErrors.inc({ via: 'connect', status: String(f.status) });
        log.warn('tunnel upstream failed', { target: t.hostPort, status: f.status, err: errMsg(e) });
        socket.off('data', onData);
        socket.resume();
        rawReply(socket, f.status, {}, { error: f.message });
      } else {
        kill();
      }
    });
    up.once('connect', () => {
      clearTimeout(connectTimer);
      if (socket.destroyed) return void up.destroy();
      established = true;
      tunnels++;
      if (recheck) untrack = track({ target: t.hostPort, recheck, kill });
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      socket.off('data', onData);
      for (const c of early) up.write(c);
      early.length = 0;
      socket.setTimeout(limits.idleTimeoutMs, kill);
      up.setTimeout(limits.idleTimeoutMs, kill);
      socket.pipe(up);
      up.pipe(socket);
    });
    socket.once('close', () => {
      if (!established) return void up.destroy();
      if (!up.destroyed && !up.writableEnded) up.end();
    });
  }

  function onConnect(req: http.IncomingMessage, socket: net.Socket, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    // No bytes move while the tunnel is decided or held; the tunnel sets its own idle timeout.
    socket.setTimeout(0);
    const early: Buffer[] = head.length ? [head] : [];
    let earlyBytes = head.length;
    const onData = (c: Buffer) => {
      early.push(c);
      earlyBytes += c.length;
      if (earlyBytes > limits.maxEarlyBytes) socket.pause();
    };
    // Reading while deciding is how a client that goes away is noticed (FIN/RST).
    socket.on('data', onData);
    const p = parseConnectTarget(req.url);
    const refuse = (status: number, headers: Record<string, string>, body: object) => {
      socket.off('data', onData);
      early.length = 0;
      socket.resume();
      rawReply(socket, status, headers, body);
    };
    if (!p.ok) return refuse(400, {}, { error: p.error });
    const t = p.target;
    const reply = (v: ProxyVerdict, requestId?: string) => {
      if (v.kind === 'allow') return openTunnel(socket, t, early, onData, v.recheck);
      if (v.kind === 'challenge') return refuse(407, { 'Proxy-Authenticate': `Bearer realm="${REALM}"`, ...denyHeaders(v.outcome) }, denyBody(v.outcome));
      if (v.kind === 'deny') return refuse(403, denyHeaders(v.outcome, requestId), denyBody(v.outcome, requestId));
    };
    // A client that goes away half-closes first: the server's sockets allow half-open, so its FIN
    // is an 'end' long before any 'close'.
    const holdTunnel = (input: HoldRequest) =>
      hold(input, (abort) => {
        if (socket.destroyed || socket.readableEnded) abort();
        else socket.once('end', abort).once('close', abort);
        return () => socket.off('end', abort).off('close', abort);
      });
    decide({ via: 'connect', method: 'CONNECT', target: t, headers: req.headers, rawHeaders: req.rawHeaders }, holdTunnel).then(
      (v) => reply(v, v.requestId),
      (e: unknown) => {
        log.error('proxy decision failed', { err: errMsg(e) });
        refuse(403, { [DENY_REASON]: 'internal decision error' }, { allow: false, reason: 'internal decision error', rule: 'inline' });
      },
    );
  }

  return { onConnect, open: () => tunnels };
}
