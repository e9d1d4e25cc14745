/**
 * Directory sync benchmark: a first SCIM snapshot sync of N users (manager tree, team groups, an
 * all-hands group) and the unchanged re-sync of the same snapshot, on PGlite and on PostgreSQL
 * (TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test; skipped with a message when
 * unreachable). Figures: seconds for each, and the ratio re-sync / first sync (target <= 0.3).
 * Targets: 100k first sync < 60 s on Postgres.
 *
 * The unchanged re-sync runs RESYNCS times (env BENCH_DIR_RESYNCS, default 3) and the median is
 * the figure (one run on a shared box swings with GC and neighbours). Then one user's title is
 * changed and the re-sync must report exactly that user as updated and rewrite nothing else: an
 * unchanged re-sync that skipped the comparison would fail this check.
 *
 * Bounds: PGlite (single-threaded WASM) runs 10k always and 100k only with BENCH_PGLITE_100K=1,
 * because 100k there alone takes longer than this benchmark's 90 s budget on a shared 2-core box.
 */
import { onPostgresSchema } from './lib.js';
import { openStore, type Store } from '../runtime/store/factory.js';
import { syntheticSnapshot } from '../runtime/identity/enterprise/directory/fixtures.js';
import { syncDirectory } from '../runtime/identity/enterprise/directory/sync.js';
import { directoryRepo } from '../runtime/identity/enterprise/directory/repo.js';
import { setLogLevel } from '../runtime/lib/log.js';

setLogLevel('warn');

const RESYNCS = Math.max(1, Number(process.env.BENCH_DIR_RESYNCS) || 3);

async function run(label: string, store: Store, n: number): Promise<void> {
  const snap = syntheticSnapshot(n, `b${n}`);
  const tenantId = `bench${n}`;
  const deps = { db: store.db, now: () => Date.now() };
  const sync = () => syncDirectory(deps, { tenantId, idp: 'idp_a', mode: 'snapshot', ...snap });
  const t0 = performance.now();
  const first = await sync();
  const firstS = (performance.now() - t0) / 1000;
  if (first.counts.users_created !== n) throw new Error(`unexpected first-sync counts: ${JSON.stringify(first.counts)}`);
  const again: number[] = [];
  for (let r = 0; r < RESYNCS; r++) {
    const t = performance.now();
    const res = await sync();
    again.push((performance.now() - t) / 1000);
    if (res.counts.users_unchanged !== n || res.counts.users_updated !== 0 || res.counts.groups_unchanged !== snap.groups.length) {
      throw new Error(`unexpected re-sync counts: ${JSON.stringify(res.counts)}`);
    }
  }
  const sorted = [...again].sort((a, b) => a - b);
  const againS = sorted[sorted.length >> 1]!;
  // One changed user among n: detected, written, and nothing else rewritten.
  const changed = snap.users[n >> 1] as Record<string, unknown>;
  changed.title = 'Principal Engineer';
  const t3 = performance.now();
  const one = await sync();
  const oneS = (performance.now() - t3) / 1000;
  const stored = await directoryRepo(store.db, tenantId).getEmployee(`idp_a:${tenantId}:${String(changed.externalId)}`);
  if (one.counts.users_updated !== 1 || one.counts.users_unchanged !== n - 1 || stored?.title !== 'Principal Engineer') {
    throw new Error(`one changed user not detected: ${JSON.stringify(one.counts)}, stored title ${stored?.title}`);
  }
  console.log(
    `${label.padEnd(8)} ${String(n).padStart(6)} users, ${snap.groups.length} groups: first sync ${firstS.toFixed(2)} s ` +
      `(${Math.round(n / firstS)} users/s), unchanged re-sync ${againS.toFixed(2)} s ` +
      `(median of ${again.map((s) => s.toFixed(2)).join('/')}), ratio re-sync/first = ${(againS / firstS).toFixed(3)}; ` +
      `one changed user: ${oneS.toFixed(2)} s, detected (1 updated, ${n - 1} unchanged)`,
  );
}

async function main(): Promise<void> {
  const lite = await openStore({ backend: 'memory' });
  try {
    await run('pglite', lite, 10_000);
    if (process.env.BENCH_PGLITE_100K === '1') await run('pglite', lite, 100_000);
    else console.log('pglite  100000 users: skipped (set BENCH_PGLITE_100K=1; exceeds the 90 s budget on PGlite)');
  } finally {
    await lite.close();
  }
  await onPostgresSchema(
    'bench_dir',
    (url, schema) => openStore({ url, schema }),
    async (pg) => {
      await run('postgres', pg, 10_000);
      await run('postgres', pg, 100_000);
    },
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
