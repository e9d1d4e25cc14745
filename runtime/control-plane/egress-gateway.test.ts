/**
 * The egress gateway composition: routes mounted before the queue exists, disabled without an
 * identity authority (503), settings validated, and a close that expires held requests and
 * keeps their audit rows (read back from the store by a restarted plane).
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { close as closeServer, listen } from '../lib/http.js';
import type { Store } from '../store/factory.js';
import { testBackends } from '../store/testing.js';
import { connectPortsFromEnv, proxyLimitsFromEnv, startControlPlaneWithEgress } from './egress-gateway.js';
import type { IdentityPort } from './identity-port.js';
import { curl } from './proxy/testkit.js';

/** The proxy's identity is not under test here: one fixed VP proves agent "bot". */
const identity: IdentityPort = {
  verifyPresentation: async (vp) =>
    vp === 'vp-bot' ? { ok: true, agentName: 'bot', agentDid: 'did:key:zBot', reason: 'ok' } : { ok: false, reason: 'bad signature' },
  checkDelegation: async () => ({ ok: false, reason: 'no approved delegation' }),
};

const addrs = { decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0', proxyAddr: '127.0.0.1:0' };

describe('egress gateway settings', () => {
  it('parses and rejects EGRESS_* values', () => {
    expect(connectPortsFromEnv({})).toEqual([443]);
    expect(connectPortsFromEnv({ EGRESS_CONNECT_PORTS: '443, 8443' })).toEqual([443, 8443]);
    expect(() => connectPortsFromEnv({ EGRESS_CONNECT_PORTS: '443,abc' })).toThrow(/EGRESS_CONNECT_PORTS/);
    expect(() => connectPortsFromEnv({ EGRESS_CONNECT_PORTS: '70000' })).toThrow(/EGRESS_CONNECT_PORTS/);
    expect(proxyLimitsFromEnv({ EGRESS_PROXY_IDLE_TIMEOUT_MS: '2500' }).idleTimeoutMs).toBe(2500);
    expect(() => proxyLimitsFromEnv({ EGRESS_PROXY_IDLE_TIMEOUT_MS: '0' })).toThrow(/positive/);
  });
});

describe.each(testBackends())('egress gateway on $name', (b) => {
  let store: Store;
  let upstream: http.Server;
  let upPort: number;
  beforeAll(async () => {
    store = await b.open();
    upstream = http.createServer((_req, res) => res.end('ok'));
    upPort = await listen(upstream, '127.0.0.1:0');
  });
  afterAll(async () => {
    await closeServer(upstream);
    await store.close();
  });

  it('without an identity authority: no proxy, the egress-request routes answer 503', async () => {
    const run = await startControlPlaneWithEgress({ store, env: {}, ...addrs });
    try {
      expect(run.gateway.enabled).toBe(false);
      expect(run.gateway.port).toBeUndefined();
      const mgmt = `http://127.0.0.1:${run.cp.mgmtPort}`;
      expect((await fetch(`${mgmt}/v1/egress/requests`)).status).toBe(503);
      const a = await fetch(`${mgmt}/v1/egress/requests/x/approve`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"approver":"a"}',
      });
      expect(a.status).toBe(503);
      expect(((await a.json()) as { error: string }).error).toMatch(/disabled/);
    } finally {
      await run.close();
    }
  });

  it('a bad setting fails the start and leaves nothing listening', async () => {
    await expect(startControlPlaneWithEgress({ store, env: { EGRESS_CONNECT_PORTS: 'ssh' }, identity, ...addrs })).rejects.toThrow(/EGRESS_CONNECT_PORTS/);
  });

  it('close expires a held request, answers 403, and its audit row reaches the store', async () => {
    const env = { AUDIT_CHAIN_ID: `gw-${b.name}` };
    const run = await startControlPlaneWithEgress({ store, env, identity, ...addrs, queue: { timeoutMs: 60_000, replicaId: `gw-${b.name}` } });
    await run.cp.plane.registry.upsert({ name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', egressAllow: [] });
    const mgmt = `http://127.0.0.1:${run.cp.mgmtPort}`;
    const res = curl(['-x', `http://127.0.0.1:${run.gateway.port}`, '--proxy-header', 'Proxy-Authorization: Bearer vp-bot', `http://127.0.0.1:${upPort}/x`]);
    // Held: the proxy counts the hold, then the queue stores its request; wait for both.
    const until = Date.now() + 10_000;
    let pending: { id: string } | undefined;
    while (run.gateway.proxy!.stats().held === 0 || !pending) {
      if (Date.now() > until) throw new Error('request never held');
      await new Promise((r) => setTimeout(r, 20));
      [pending] = (await (await fetch(`${mgmt}/v1/egress/requests?status=pending`)).json()) as { id: string }[];
    }
    await run.close();
    const r = await res;
    expect(r.status).toBe(403);
    expect(r.headers).toContain('expired: proxy shutting down');
    expect(run.gateway.proxy!.stats()).toMatchObject({ clients: 0, upstreams: 0, tunnels: 0, held: 0 });

    // A restarted plane reads the chain back from the store: the expiry was audited durably.
    const again = await startControlPlaneWithEgress({ store, env, identity, ...addrs, queue: { replicaId: `gw-${b.name}` } });
    try {
      const row = again.cp.plane.audit.recent(1000).find((x) => x.action === 'egress.proxy' && x.reason.includes(pending!.id));
      expect(row).toMatchObject({ allow: false, actor: 'bot', service: 'external', rule: 'delegation' });
      expect((await again.gateway.queue!.get(pending!.id))?.status).toBe('expired');
    } finally {
      await again.close();
    }
  });
});
