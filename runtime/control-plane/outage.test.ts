/**
 * The control plane through a PostgreSQL outage (issue 15 item 10, the control-plane side), for
 * real: a cluster of the test's own is stopped under a running control plane (registry, durable
 * audit, budgets on that database) and started again.
 *
 * - It stays up and keeps deciding from its in-memory snapshot, promptly: what was allowed is
 *   allowed, what was denied is denied (never an allow that should deny). Decisions need no
 *   database: the audit records wait in memory for the shipper.
 * - Writes answer a clear 503 within seconds (no hang, no 500) and do not take effect later.
 * - When the database is back it catches up: writes work again, and every audit record of the
 *   outage is stored, the chain unbroken.
 *
 * Skips where no PostgreSQL server binaries are installed.
 */
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { setLogLevel } from '../lib/log.js';
import { openStore, type Store } from '../store/factory.js';
import { pgBinaries, startPgCluster, type PgCluster } from '../store/pg-cluster.testing.js';
import { startControlPlane, type RunningControlPlane } from './server.js';

setLogLevel('error');
const BIN = pgBinaries();
if (!BIN) console.warn('control-plane outage.test.ts skipped: no PostgreSQL server binaries under /usr/lib/postgresql (initdb, pg_ctl)');

const until = async (cond: () => Promise<boolean> | boolean, ms: number, what: string) => {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

describe.skipIf(!BIN)('control plane through a PostgreSQL outage', () => {
  let pg: PgCluster;
  let store: Store;
  let cp: RunningControlPlane;
  let mgmt: string;
  let authz: string;

  const decide = async (headers: Record<string, string>) => {
    const t0 = Date.now();
    const res = await fetch(`${authz}/authz/x`, { headers, signal: AbortSignal.timeout(10_000) });
    await res.arrayBuffer();
    return { status: res.status, ms: Date.now() - t0 };
  };
  const put = async (svc: Record<string, unknown>) => {
    const t0 = Date.now();
    const res = await fetch(`${mgmt}/v1/registry/services`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(svc),
      signal: AbortSignal.timeout(30_000),
    });
    return { status: res.status, body: await res.text(), ms: Date.now() - t0 };
  };
  const ingress = { [H.service]: 'web' };
  const allowed = { [H.actor]: 'bot', [H.service]: 'orders', [H.onBehalfOf]: 'alice@example.com' };
  const denied = { [H.actor]: 'bot', [H.service]: 'payroll', [H.onBehalfOf]: 'alice@example.com' };

  beforeAll(async () => {
    pg = await startPgCluster();
    store = await openStore({ url: pg.url, queryTimeoutMs: 1500, transactionTimeoutMs: 3000 });
    cp = await startControlPlane({ store, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    mgmt = `http://127.0.0.1:${cp.mgmtPort}`;
    authz = `http://127.0.0.1:${cp.decisionPort}`;
    for (const s of [
      { name: 'web', upstream: 'web.svc:80', public: true },
      { name: 'orders', upstream: 'orders.svc:8080' },
      { name: 'payroll', upstream: 'payroll.svc:8080' },
      { name: 'bot', upstream: 'bot.svc:8080', kind: 'agent', egressAllow: ['orders'] },
    ]) {
      const r = await put(s);
      expect(r.status, r.body).toBeLessThan(300);
    }
  }, 120_000);
  afterAll(async () => {
    await cp?.close();
    await store?.close();
    await pg?.destroy();
  });

  it('decides from memory during the outage, refuses writes with 503, and catches up afterwards', async () => {
    expect((await decide(ingress)).status).toBe(200);
    expect((await decide(allowed)).status).toBe(200);
    expect((await decide(denied)).status).toBe(403);
    const before = cp.plane.audit.stats().lastSeq;

    await pg.stop('immediate');
    const during: { status: number; ms: number }[] = [];
    for (let i = 0; i < 10; i++) {
      const [a, b, c] = [await decide(ingress), await decide(allowed), await decide(denied)];
      expect([a.status, b.status, c.status], `round ${i} during the outage`).toEqual([200, 200, 403]);
      during.push(a, b, c);
    }
    // Promptly: no decision waited on the dead database.
    expect(Math.max(...during.map((d) => d.ms))).toBeLessThan(1000);
    const w = await put({ name: 'late', upstream: 'late.svc:80', public: true });
    expect(w.status, w.body).toBe(503);
    expect(w.ms).toBeLessThan(10_000);
    expect(w.body).toMatch(/error/);

    await pg.start();
    // Writes work again once the pool reconnects; the refused one never took effect meanwhile.
    await until(async () => (await put({ name: 'after', upstream: 'after.svc:80', public: true })).status < 300, 30_000, 'a registry write after the restart');
    const admin = postgres(pg.url, { max: 1, onnotice: () => {} });
    try {
      const rows = await admin.unsafe(`select name from registry_services where name in ('late', 'after') order by name`);
      expect(rows.map((r) => r.name)).toEqual(['after']);
      // Every audit record of the outage reaches the store, in order.
      const last = cp.plane.audit.stats().lastSeq;
      expect(last).toBeGreaterThanOrEqual(before + 30);
      await until(() => cp.plane.audit.stats().shippedSeq >= last, 30_000, 'the outage audit records shipped');
      const v = await fetch(`${mgmt}/v1/audit/verify`);
      const text = await v.text();
      expect(v.status, text).toBe(200);
      expect(text).not.toMatch(/"ok":\s*false/);
    } finally {
      await admin.end();
    }
  }, 120_000);
});
