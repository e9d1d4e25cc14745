/**
 * The egress gateway composition: routes mounted before the queue exists, disabled without an
 * identity authority (503), settings validated, and a restart that a held request survives: the
 * closing proxy answers its connection (audited durably), the restarted plane still lists it, and
 * an approval then releases the agent's retry, once.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { close as closeServer, listen } from '../lib/http.js';
import type { Store } from '../store/factory.js';
import { testBackends } from '../store/testing.js';
import { loadConfig } from '../lib/settings.js';
import { startControlPlaneWithEgress } from './egress-gateway.js';

const connectPortsOf = (env: Record<string, string>) => loadConfig(env).proxy.connectPorts;
const proxyLimitsOf = (env: Record<string, string>) => loadConfig(env).proxy.limits;
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
    expect(connectPortsOf({})).toEqual([443]);
    expect(connectPortsOf({ EGRESS_CONNECT_PORTS: '443, 8443' })).toEqual([443, 8443]);
    expect(() => connectPortsOf({ EGRESS_CONNECT_PORTS: '443,abc' })).toThrow(/EGRESS_CONNECT_PORTS/);
    expect(() => connectPortsOf({ EGRESS_CONNECT_PORTS: '70000' })).toThrow(/EGRESS_CONNECT_PORTS/);
    expect(proxyLimitsOf({ EGRESS_PROXY_IDLE_TIMEOUT_MS: '2500' }).idleTimeoutMs).toBe(2500);
    expect(() => proxyLimitsOf({ EGRESS_PROXY_IDLE_TIMEOUT_MS: '0' })).toThrow(/positive/);
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
    const run = await startControlPlaneWithEgress({ store, ...addrs });
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
    await expect(
      (async () => startControlPlaneWithEgress({ store, config: loadConfig({ EGRESS_CONNECT_PORTS: 'ssh' }), identity, ...addrs }))(),
    ).rejects.toThrow(/EGRESS_CONNECT_PORTS/);
  });

  it("a held request survives a restart: close answers 403 and keeps it pending, an approval after the restart releases the agent's retry, once", async () => {
    const env = { AUDIT_CHAIN_ID: `gw-${b.name}` };
    const run = await startControlPlaneWithEgress({
      store,
      config: loadConfig(env),
      identity,
      ...addrs,
      queue: { timeoutMs: 60_000, replicaId: `gw-${b.name}` },
    });
    await run.cp.plane.registry.upsert({ name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', egressAllow: [] });
    const viaProxy = (port: number) =>
      curl(['-x', `http://127.0.0.1:${port}`, '--proxy-header', 'Proxy-Authorization: Bearer vp-bot', `http://127.0.0.1:${upPort}/x`]);
    const pendingOn = async (mgmt: string, gateway: { proxy?: { stats(): { held: number } } }) => {
      const until = Date.now() + 10_000;
      for (;;) {
        const [p] = (await (await fetch(`${mgmt}/v1/egress/requests?status=pending`)).json()) as { id: string; digest: string; held: boolean }[];
        if (p && gateway.proxy!.stats().held > 0) return p;
        if (Date.now() > until) throw new Error('request never held');
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const res = viaProxy(run.gateway.port!);
    const pending = await pendingOn(`http://127.0.0.1:${run.cp.mgmtPort}`, run.gateway);
    await run.close();
    const r = await res;
    expect(r.status).toBe(403);
    expect(r.headers).toContain(`egress request ${pending.id} stays pending`);
    expect(run.gateway.proxy!.stats()).toMatchObject({ clients: 0, upstreams: 0, tunnels: 0, held: 0 });

    // The restarted plane: the connection's denial was audited durably, the request is still there.
    const again = await startControlPlaneWithEgress({
      store,
      config: loadConfig(env),
      identity,
      ...addrs,
      queue: { timeoutMs: 1500, replicaId: `gw-${b.name}` },
    });
    try {
      const mgmt = `http://127.0.0.1:${again.cp.mgmtPort}`;
      const row = again.cp.plane.audit.recent(1000).find((x) => x.action === 'egress.proxy' && x.reason.includes(pending.id));
      expect(row).toMatchObject({ allow: false, actor: 'bot', service: 'external', rule: 'delegation' });
      expect(await again.gateway.queue!.get(pending.id)).toMatchObject({ status: 'pending', held: false });
      const ok = await fetch(`${mgmt}/v1/egress/requests/${pending.id}/approve`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ approver: 'alice', digest: pending.digest }),
      });
      expect(await ok.json()).toMatchObject({ status: 'approved', held: false, usedAt: null });
      // The agent's retry takes the approval and is forwarded.
      const retry = await viaProxy(again.gateway.port!);
      expect([retry.status, retry.body]).toEqual([200, 'ok']);
      expect(again.cp.plane.audit.recent(10)).toContainEqual(
        expect.objectContaining({ action: 'egress.proxy', allow: true, reason: expect.stringContaining(`egress request ${pending.id} approved by alice`) }),
      );
      // Once: the next retry is a new request, held until its (short) deadline.
      const third = await viaProxy(again.gateway.port!);
      expect(third.status).toBe(403);
      expect(third.headers).not.toContain(pending.id);
      expect(third.headers).toContain('expired');
    } finally {
      await again.close();
    }
  });
});
