/**
 * Audit durability and proof costs (issue 16), each figure against a baseline measured in the
 * same run:
 *  1. /authz req/s with AUDIT_DURABILITY=sync (answer after the record is committed, group
 *     commit) vs async, interleaved rounds on one store (target sync >= 0.70x async), on the
 *     in-process PGlite and, when BENCH_DATABASE_URL or TEST_DATABASE_URL is set, PostgreSQL;
 *  2. whole-store verification rate (records/s, streamed from the store) vs hashing the same
 *     records in memory;
 *  3. store size per 100k records (audit_log with its indexes, plus checkpoints).
 *
 *   npx tsx bench/audit.bench.ts   (BENCH_SECONDS=5 BENCH_ROUNDS=2 BENCH_CONNECTIONS=50 BENCH_RECORDS=100000)
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { H } from '../runtime/lib/brand.js';
import { loadAutocannon } from './lib.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const RECORDS = Number(process.env.BENCH_RECORDS ?? 100_000);
const PG_URL = process.env.BENCH_DATABASE_URL || process.env.TEST_DATABASE_URL || undefined;

interface Ready {
  engine: string;
  async: number;
  sync: number;
}

/** Child: two control planes (async and sync chains) on one store of the given engine. */
async function serve(engine: 'pglite' | 'postgres'): Promise<void> {
  const { openStore } = await import('../runtime/store/factory.js');
  const { openTestPostgres } = await import('../runtime/store/testing.js');
  const { startControlPlane } = await import('../runtime/control-plane/server.js');
  const { setLogLevel } = await import('../runtime/lib/log.js');
  const { loadConfig } = await import('../runtime/lib/settings.js');
  setLogLevel('warn');
  const store = engine === 'pglite' ? await openStore({ backend: 'memory' }) : await openTestPostgres();
  const env = (d: string) => ({ AUDIT_DURABILITY: d, AUDIT_SPOOL_DIR: 'none', AUDIT_VERIFY_INTERVAL_MS: '0' });
  const a = await startControlPlane({ store, config: loadConfig(env('async')), decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
  const s = await startControlPlane({ store, config: loadConfig(env('sync')), decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
  const services = [
    { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent' as const, allowModels: ['gpt'], budget: { tokensPerHour: 1e12, callsPerHour: 1e12 } },
    { name: 'gpt', upstream: 'broker.default.svc:8080', kind: 'model' as const },
  ];
  for (const p of [a, s]) for (const svc of services) await p.plane.registry.upsert(svc).catch(() => {});
  process.send?.({ engine, async: a.decisionPort, sync: s.decisionPort } satisfies Ready);
  process.on('message', async () => {
    await a.close();
    await s.close();
    await store.close();
    process.exit(0);
  });
}

/** Child: fills a chain with RECORDS records, then times whole-store verification and the size. */
async function proofCosts(engine: 'pglite' | 'postgres'): Promise<void> {
  const { openStore, rowsOf } = await import('../runtime/store/factory.js');
  const { openTestPostgres } = await import('../runtime/store/testing.js');
  const { openAuditChain } = await import('../runtime/control-plane/audit/chain.js');
  const { hashRecord } = await import('../runtime/control-plane/audit/hash.js');
  const { readRange } = await import('../runtime/control-plane/audit/verify.js');
  const { sql } = await import('drizzle-orm');
  const { setLogLevel } = await import('../runtime/lib/log.js');
  setLogLevel('warn');
  const store = engine === 'pglite' ? await openStore({ backend: 'memory' }) : await openTestPostgres();
  const size = async () =>
    Number(
      (await rowsOf<{ n: string }>(store.db, sql`select (pg_total_relation_size('audit_log') + pg_total_relation_size('audit_checkpoints'))::text as n`))[0]!.n,
    );
  const before = await size();
  const chain = await openAuditChain(store, { chain: 'bench', proof: { verifyIntervalMs: 0 } });
  for (let i = 0; i < RECORDS; i++) {
    chain.append({
      action: 'egress',
      subject: 'alice@example.com',
      actor: 'bot',
      task: `task-${i % 1000}`,
      service: 'gpt',
      allow: i % 10 !== 0,
      reason: 'allowed by registry allowlist and budget',
      rule: 'inline',
    });
    if (i % 20_000 === 19_999) await chain.flush();
  }
  await chain.close();
  const bytes = (await size()) - before;
  // Baseline: hashing the same records already in memory (what verification cannot go below).
  const recs = [];
  for await (const page of readRange(store, 'bench', 1)) recs.push(...page);
  let t = performance.now();
  for (const r of recs) if (hashRecord(r) !== r.hash) throw new Error('hash mismatch');
  const hashRate = recs.length / ((performance.now() - t) / 1000);
  const again = await openAuditChain(store, { chain: 'bench', proof: { verifyIntervalMs: 0 } });
  t = performance.now();
  const v = await again.proof!.verify({ from: 1 });
  const verifyRate = v.checked / ((performance.now() - t) / 1000);
  await again.close();
  await store.close();
  if (!v.ok || v.checked !== RECORDS) throw new Error(`verification: ${JSON.stringify(v)}`);
  process.send?.({ engine, bytes, verifyRate, hashRate });
  process.exit(0);
}

function child<T>(args: string[]): { proc: ChildProcess; first: Promise<T> } {
  const proc = fork(fileURLToPath(import.meta.url), args, { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const first = new Promise<T>((resolve, reject) => {
    proc.once('message', (m) => resolve(m as T));
    proc.once('exit', (c) => reject(new Error(`bench child ${args.join(' ')} exited with ${c}`)));
  });
  return { proc, first };
}

async function drive(): Promise<void> {
  const autocannon = await loadAutocannon();
  const headers = { [H.actor]: 'bot', [H.service]: 'gpt', [H.onBehalfOf]: 'alice@example.com', [H.task]: 'bench' };
  const engines: ('pglite' | 'postgres')[] = PG_URL ? ['pglite', 'postgres'] : ['pglite'];
  console.log(`audit bench: /authz egress, ${CONNECTIONS} connections, ${ROUNDS} interleaved rounds of ${SECONDS} s per mode (target sync >= 0.70x async)`);
  for (const engine of engines) {
    const c = child<Ready>(['--serve', engine]);
    const ports = await c.first;
    const rps = { async: 0, sync: 0 };
    const p99 = { async: 0, sync: 0 };
    try {
      for (const mode of ['async', 'sync'] as const)
        await autocannon({ url: `http://127.0.0.1:${ports[mode]}/authz/v1/chat/completions`, connections: CONNECTIONS, headers, duration: 1 });
      for (let r = 0; r < ROUNDS; r++) {
        for (const mode of ['async', 'sync'] as const) {
          const res = await autocannon({
            url: `http://127.0.0.1:${ports[mode]}/authz/v1/chat/completions`,
            connections: CONNECTIONS,
            headers,
            duration: SECONDS,
          });
          if (res.errors || res.non2xx) throw new Error(`${engine} ${mode}: ${res.errors} errors, ${res.non2xx} non-2xx`);
          rps[mode] += res.requests.average / ROUNDS;
          p99[mode] = Math.max(p99[mode], res.latency.p99);
        }
      }
    } finally {
      c.proc.send('stop');
      await new Promise((r) => c.proc.once('exit', r));
    }
    console.log(
      `${engine.padEnd(8)} async ${rps.async.toFixed(0).padStart(6)} req/s (p99 ${p99.async} ms)  sync ${rps.sync.toFixed(0).padStart(6)} req/s (p99 ${p99.sync} ms)  ratio sync/async ${(rps.sync / rps.async).toFixed(2)}x`,
    );
  }
  for (const engine of engines) {
    const c = child<{ bytes: number; verifyRate: number; hashRate: number }>(['--proof', engine]);
    const r = await c.first;
    await new Promise((res) => c.proc.once('exit', res));
    console.log(
      `${engine.padEnd(8)} whole-store verify ${r.verifyRate.toFixed(0)} records/s (in-memory hashing ${r.hashRate.toFixed(0)}/s, ratio ${(r.verifyRate / r.hashRate).toFixed(2)}x); store ${(r.bytes / 1e6 / (RECORDS / 100_000)).toFixed(1)} MB per 100k records`,
    );
  }
}

const i = process.argv.indexOf('--serve');
const j = process.argv.indexOf('--proof');
if (i > 0) await serve(process.argv[i + 1] as 'pglite' | 'postgres');
else if (j > 0) await proofCosts(process.argv[j + 1] as 'pglite' | 'postgres');
else await drive();
