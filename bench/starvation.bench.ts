/**
 * One request must not starve the others (issue 15 item 1): `/authz` latency on an unrelated
 * request while a BENCH_SYNC_USERS (default 100k) SCIM sync runs on the identity authority of the
 * same all-in-one process, as `npm start` runs it (PGlite data folder on this thread, durable
 * audit, the examples loaded). The sync is sent by curl, another process, as an IdP connector would.
 *
 * Baseline: the same `/authz` probe with no sync running, in windows interleaved with the sync
 * windows (BENCH_ROUNDS, default 2; each round syncs a new tenant, so each is a first import).
 * Printed: p50, p99 and the longest wait during the syncs, each beside the idle figure and as a
 * ratio of it. Target: p99 during the sync < 50 ms.
 *
 *   npx tsx bench/starvation.bench.ts     (BENCH_SYNC_USERS=100000 BENCH_ROUNDS=2)
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import { allInOneEnv, codeUnderTest } from './lib.js';

const USERS = Number(process.env.BENCH_SYNC_USERS ?? 100_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const code = codeUnderTest();

const { startWrit } = (await import(code.from('main'))) as typeof import('../runtime/main.js');
const { setLogLevel } = (await import(code.from('lib/log'))) as typeof import('../runtime/lib/log.js');
const { syntheticSnapshot } = (await import(
  code.from('identity/enterprise/directory/fixtures')
)) as typeof import('../runtime/identity/enterprise/directory/fixtures.js');
setLogLevel('error');

const dir = mkdtempSync(join(tmpdir(), 'writ-starve-'));
const writ = await startWrit(allInOneEnv(join(dir, 'data'), { BROKER_ENABLED: 'false' }));
const agent = new Agent({ connections: 1 });

/** Probes `/authz` (an ingress decision for the example `web` service) until `until` resolves; the latencies. */
async function probe(until: Promise<unknown>): Promise<number[]> {
  let running = true;
  void until.finally(() => (running = false));
  const out: number[] = [];
  while (running) {
    const t = performance.now();
    const r = await request(`http://127.0.0.1:${writ.ports.decision}/authz`, {
      dispatcher: agent,
      headers: { host: 'web.default.svc:8080', 'x-writ-direction': 'ingress' },
    });
    await r.body.text();
    out.push(performance.now() - t);
    await new Promise((res) => setTimeout(res, 5));
  }
  return out;
}

function sync(tenant: string): Promise<number> {
  const file = join(dir, `${tenant}.json`);
  writeFileSync(file, JSON.stringify({ tenantId: tenant, idp: 'idp_a', ...syntheticSnapshot(USERS, tenant) }));
  const t0 = performance.now();
  return new Promise((resolve, reject) =>
    execFile(
      'curl',
      [
        '-s',
        '-o',
        '/dev/null',
        '-w',
        '%{http_code}',
        '-H',
        'content-type: application/json',
        '--data-binary',
        `@${file}`,
        `http://127.0.0.1:${writ.ports.identity}/v1/directory/sync`,
      ],
      (e, out) => (e ? reject(e) : out.trim() === '200' ? resolve(performance.now() - t0) : reject(new Error(`sync answered ${out}`))),
    ),
  );
}

const q = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
};

const idle: number[] = [];
const busy: number[] = [];
const syncMs: number[] = [];
try {
  for (let r = 0; r < ROUNDS; r++) {
    idle.push(...(await probe(new Promise((res) => setTimeout(res, 3000)))));
    const s = sync(`starve-${r}`);
    busy.push(...(await probe(s)));
    syncMs.push(await s);
  }
  const f = (x: number) => `${x.toFixed(1)} ms`;
  console.log(`code: ${code.label}; ${ROUNDS} rounds of a ${USERS}-user first sync (median ${Math.round(q(syncMs, 0.5))} ms), interleaved with idle windows`);
  console.log(`/authz p50 during sync   ${f(q(busy, 0.5))}  idle ${f(q(idle, 0.5))}  ${(q(busy, 0.5) / q(idle, 0.5)).toFixed(1)}x`);
  console.log(`/authz p99 during sync   ${f(q(busy, 0.99))}  idle ${f(q(idle, 0.99))}  ${(q(busy, 0.99) / q(idle, 0.99)).toFixed(1)}x  (target < 50 ms)`);
  console.log(`/authz longest wait      ${f(Math.max(...busy))}  idle ${f(Math.max(...idle))}  (${busy.length} probes during the syncs)`);
} finally {
  await agent.close();
  await writ.close();
  rmSync(dir, { recursive: true, force: true });
}
