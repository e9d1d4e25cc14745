/**
 * Test helpers for the forward proxy's end-to-end tests (proxy-*.test.ts): a control plane with
 * the egress gateway on a test store, a real identity authority with three agents (bot, lonely and
 * the revoked gone), local upstreams (an echo server, TLS with a self-signed certificate, one that
 * hangs, one that resets, a refused port) in the registry, and the curl and management-route
 * helpers the tests drive it with.
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { expect } from 'vitest';
import { close as closeServer, listen } from '../../lib/http.js';
import { eventually } from '../../lib/poll-testing.js';
import type { Store } from '../../store/factory.js';
import type { TestBackend } from '../../store/testing.js';
import { createIdentityAuthority, type IdentityAuthority } from '../../identity/server.js';
import { startControlPlaneWithEgress, type RunningWithEgress } from '../egress-gateway.js';
import type { IdentityPort } from '../identity-port.js';
import type { AuditRecord } from '../types.js';
import type { EgressRequest } from '../approvals/record.js';
import { curl, inProcessIdentity, jtiOf, provisionAgent, selfSignedCert, type CurlResult } from './testkit.js';
import { loadConfig } from '../../lib/settings.js';

/** Upstream that reports what it received (method, url, headers, body size and hash). */
export function echoServer(): http.Server {
  return http.createServer((req, res) => {
    const url = req.url ?? '/';
    if (url.startsWith('/big')) {
      const n = Number(new URL(url, 'http://x').searchParams.get('n') ?? 0);
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(64 * 1024, 120);
      let left = n;
      const pump = () => {
        while (left > 0) {
          const c = chunk.subarray(0, Math.min(left, chunk.length));
          left -= c.length;
          if (!res.write(c)) return void res.once('drain', pump);
        }
        res.end();
      };
      return pump();
    }
    const h = createHash('sha256');
    let n = 0;
    req.on('data', (c: Buffer) => {
      h.update(c);
      n += c.length;
    });
    req.on('end', () => {
      const body = JSON.stringify({ method: req.method, url, headers: req.headers, bytes: n, sha: h.digest('hex') });
      res.writeHead(200, { 'content-type': 'application/json', connection: 'x-up-hop', 'x-up-hop': '1', 'x-kept': 'yes', 'proxy-authenticate': 'Basic' });
      res.end(body);
    });
  });
}

export const post = (url: string, body: unknown) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

export type UpstreamName = 'echo' | 'ext' | 'tls' | 'hang' | 'reset' | 'closed';

export interface ProxyPlane {
  store: Store;
  authority: IdentityAuthority;
  identity: IdentityPort;
  run: RunningWithEgress;
  /** The forward proxy's URL. */
  proxy: string;
  /** The management routes' base URL. */
  mgmt: string;
  /** VPs: bot (egressAllow lists every upstream and the regulated ledger), lonely (lists none), gone (revoked). */
  bot: string;
  lonely: string;
  gone: string;
  /** The TLS upstream's certificate (its folder also takes the tests' upload files). */
  certFile: string;
  /** Upstream ports; every one but `ext` is a registry service of that name. */
  ports: Record<UpstreamName, number>;
  /** curl through the proxy, with `vp` as the Proxy-Authorization bearer when given. */
  via(vp: string | undefined, args: string[]): Promise<CurlResult>;
  /** Waits for a pending egress request for `target`. */
  pending(target: string): Promise<EgressRequest>;
  /** An egress request by id, from the management routes. */
  get(id: string): Promise<EgressRequest | undefined>;
  /** The audit records, from the management routes. */
  audit(): Promise<AuditRecord[]>;
  /** Stops the plane, the upstreams (hung responses first), the authority and the store. */
  close(): Promise<void>;
}

/** Starts the plane on a store of backend `b`; on a failure what was started is closed again. */
export async function startProxyPlane(b: TestBackend): Promise<ProxyPlane> {
  let store: Store | undefined;
  let authority: IdentityAuthority | undefined;
  let run: RunningWithEgress | undefined;
  const servers: http.Server[] = [];
  const hung: http.ServerResponse[] = [];
  const close = async () => {
    for (const r of hung) r.destroy();
    await run?.close();
    for (const s of servers) await closeServer(s);
    await authority?.close();
    await store?.close();
  };
  try {
    store = await b.open();
    authority = createIdentityAuthority({ store, config: loadConfig({ IDP_ISSUER_HOST: 'idp.test' }) });
    const identity = inProcessIdentity(authority);
    const bot = (await provisionAgent(authority, 'bot')).vp;
    const lonely = (await provisionAgent(authority, 'lonely')).vp;
    const g = await provisionAgent(authority, 'gone');
    const gone = g.vp;
    const rv = await authority.app.request('/v1/revoke', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ vcJti: jtiOf(g.identity.membershipVc) }),
    });
    expect(rv.status).toBe(200);

    const tlsCert = selfSignedCert();
    const certFile = tlsCert.certFile;
    const echo = echoServer();
    const ext = echoServer();
    const tls = https.createServer({ key: tlsCert.key, cert: tlsCert.cert }, (req, res) => {
      req.resume();
      req.on('end', () => res.end(`tls hello ${req.url}`));
    });
    const hang = http.createServer((_req, res) => void hung.push(res));
    const reset = http.createServer((req) => req.socket.destroy());
    servers.push(echo, ext, tls, hang, reset);
    const ports: Record<UpstreamName, number> = { echo: 0, ext: 0, tls: 0, hang: 0, reset: 0, closed: 0 };
    ports.echo = await listen(echo, '127.0.0.1:0');
    ports.ext = await listen(ext, '127.0.0.1:0');
    ports.tls = await listen(tls, '127.0.0.1:0');
    ports.hang = await listen(hang, '127.0.0.1:0');
    ports.reset = await listen(reset, '127.0.0.1:0');
    // Refused: a privileged port, below the ephemeral range, so no other test can be handed it and
    // listen there (a port freed after listen(0) could be: CI once saw 200 from it).
    ports.closed = 1;

    run = await startControlPlaneWithEgress({
      store,
      identity,
      decisionAddr: '127.0.0.1:0',
      mgmtAddr: '127.0.0.1:0',
      proxyAddr: '127.0.0.1:0',
      queue: { timeoutMs: 60_000, replicaId: `proxy-test-${b.name}` },
      limits: { headersTimeoutMs: 400, idleTimeoutMs: 1500, connectTimeoutMs: 2000, tunnelRecheckMs: 100 },
      // The TLS server's port is open to CONNECT for external names too (localhost:<tls> is not a registry upstream).
      connectPorts: [443, ports.tls],
    });
    const proxy = `http://127.0.0.1:${run.gateway.port}`;
    const mgmt = `http://127.0.0.1:${run.cp.mgmtPort}`;
    const reg = run.cp.plane.registry;
    for (const [name, port] of Object.entries(ports)) if (name !== 'ext') await reg.upsert({ name, upstream: `127.0.0.1:${port}`, kind: 'service' });
    // A regulated service on the echo server, reached under another host name.
    await reg.upsert({ name: 'ledger', upstream: `localhost:${ports.echo}`, kind: 'service', dataClass: 'regulated' });
    await reg.upsert({ name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', egressAllow: ['echo', 'tls', 'hang', 'reset', 'closed', 'ledger'] });
    await reg.upsert({ name: 'lonely', upstream: 'lonely.agents.svc:8080', kind: 'agent', egressAllow: [] });
    await reg.upsert({ name: 'gone', upstream: 'gone.agents.svc:8080', kind: 'agent', egressAllow: ['echo'] });

    return {
      store,
      authority,
      identity,
      run,
      proxy,
      mgmt,
      bot,
      lonely,
      gone,
      certFile,
      ports,
      via: (vp, args) => curl(['-x', proxy, ...(vp ? ['--proxy-header', `Proxy-Authorization: Bearer ${vp}`] : []), ...args]),
      pending: async (target) =>
        eventually(async () => {
          const list = (await (await fetch(`${mgmt}/v1/egress/requests?status=pending`)).json()) as EgressRequest[];
          return list.find((r) => r.target === target);
        }, `a pending request for ${target}`),
      get: async (id) => ((await (await fetch(`${mgmt}/v1/egress/requests`)).json()) as EgressRequest[]).find((r) => r.id === id),
      audit: async () => (await (await fetch(`${mgmt}/v1/audit?limit=1000`)).json()) as AuditRecord[],
      close,
    };
  } catch (e) {
    await close().catch(() => {});
    throw e;
  }
}
