/**
 * Restart without waiting for itself (issue 44 item 2), on PostgreSQL: a control plane with an
 * explicit AUDIT_CHAIN_ID and AUDIT_DURABILITY=sync is loaded, killed with SIGKILL and started
 * again under the same identity. The restart takes its chain back from its own dead predecessor
 * at once (it used to wait for the lease to lapse: at least 10 s of the 15 s time-to-live, since
 * the holder renews every 5 s), loses no acknowledged record and the chain verifies.
 */
import { performance } from 'node:perf_hooks';
import http from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { addPublicService, startEntry, type Child } from '../runtime/lib/entry-testing.js';
import { TEST_DATABASE_URL } from '../runtime/store/testing.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ANY = '127.0.0.1:0';
/**
 * A lease time-to-live far longer than any start on a loaded machine: the old restart waited for
 * it to lapse (at least two thirds of it, since the holder renews every third), the new one does
 * not wait at all. The bound sits between the two with wide slack on both sides.
 */
const LEASE_TTL_MS = 180_000;
const OLD_BEHAVIOUR_FLOOR_MS = (LEASE_TTL_MS * 2) / 3;

const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });

/** One /authz call tagged with `task`; resolves with the status (0: no answer). */
function decide(port: number, task: string): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/authz', agent, headers: { [H.service]: 'web', [H.task]: task } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', () => resolve(0));
    });
    req.on('error', () => resolve(0));
    req.end();
  });
}

/** Starts the control plane; resolves once `/authz` answered, with the time that took. */
async function startTimed(env: Record<string, string>): Promise<{ child: Child; ms: number }> {
  const t0 = performance.now();
  const child = await startEntry([process.execPath, '--import', 'tsx', join(ROOT, 'runtime/control-plane/main.ts')], env);
  while ((await decide(child.ports.decision!, 'probe')) === 0) await new Promise((r) => setTimeout(r, 10));
  return { child, ms: performance.now() - t0 };
}

describe('control plane restart under the same identity (PostgreSQL, explicit AUDIT_CHAIN_ID)', () => {
  it('kill -9 then restart: /authz answers without waiting for the lease, no acknowledged record lost, chain verifies', async (ctx) => {
    if (!TEST_DATABASE_URL) return ctx.skip('TEST_DATABASE_URL is unset: this restart test needs PostgreSQL (PGlite leases never wait)');
    const db = `restart_${Date.now().toString(36)}`;
    const admin = postgres(TEST_DATABASE_URL, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database ${db}`);
    const url = new URL(TEST_DATABASE_URL);
    url.pathname = `/${db}`;
    const env = {
      REGISTRY_DB_URL: url.toString(),
      AUDIT_CHAIN_ID: 'cp-restart',
      AUDIT_LEASE_TTL_MS: String(LEASE_TTL_MS),
      AUDIT_DURABILITY: 'sync',
      AUDIT_SPOOL_DIR: 'none',
      DECISION_ADDR: ANY,
      DECISION_GRPC_ADDR: ANY,
      MGMT_ADDR: ANY,
    };
    let second: Child | undefined;
    try {
      const first = await startTimed(env);
      await addPublicService(first.child.ports.mgmt!);
      // Load, then kill -9 while decisions are in flight.
      const answered: string[] = [];
      let running = true;
      let n = 0;
      const loops = Array.from({ length: 8 }, async () => {
        while (running) {
          const task = `t-${n++}`;
          const status = await decide(first.child.ports.decision!, task);
          if (status === 200) answered.push(task);
          else if (status === 0) return;
        }
      });
      while (answered.length < 200) await new Promise((r) => setTimeout(r, 20));
      first.child.signal('SIGKILL');
      await first.child.exited;
      running = false;
      await Promise.all(loops);

      const restart = await startTimed(env);
      second = restart.child;
      console.log(`restart: first start ${Math.round(first.ms)} ms to /authz, restart after kill -9 ${Math.round(restart.ms)} ms`);
      expect(second.lines.some((l) => l.includes("taken back from this process's own dead predecessor"))).toBe(true);
      expect(restart.ms).toBeLessThan(OLD_BEHAVIOUR_FLOOR_MS);

      // Every acknowledged decision has its stored record; the whole chain verifies.
      const sqlDb = postgres(url.toString(), { max: 1, onnotice: () => {} });
      try {
        // Anonymous ingress records carry no task: every allow answered before the kill (each
        // one decision, each one record) must be among the stored allows for `web`.
        const [row] = await sqlDb<{ n: string }[]>`select count(*) as n from audit_log where chain = 'cp-restart' and allow and service = 'web'`;
        expect(answered.length).toBeGreaterThanOrEqual(200);
        expect(Number(row!.n)).toBeGreaterThanOrEqual(answered.length);
      } finally {
        await sqlDb.end();
      }
      const verify = await fetch(`http://127.0.0.1:${second.ports.mgmt}/v1/audit/verify?from=1`);
      expect(await verify.json()).toMatchObject({ ok: true, brokenAtSeq: -1 });
    } finally {
      if (second) {
        second.signal('SIGTERM');
        await second.exited;
      }
      await admin.unsafe(`drop database if exists ${db} with (force)`);
      await admin.end();
    }
  }, 300_000);
});
