/**
 * PGlite has no autovacuum: the engine thread vacuums and analyzes as it would
 * (pglite-maintenance.ts), so a table whose rows come and go stops growing.
 */
import { describe, expect, it } from 'vitest';
import { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import { eventually } from '../lib/poll-testing.js';
import { rowsOf, type Store } from './factory.js';
import { maintain, maintenanceOf } from './pglite-maintenance.js';
import { openTestPglite } from './testing.js';

/** Rows inserted, updated once and deleted a round later, as budget reservations are. */
async function churn(store: Store, round: number): Promise<void> {
  await store.db.execute(sql`insert into churned select ${round} || '-' || g, ${round}, 'open' from generate_series(1, 1000) g`);
  await store.db.execute(sql`update churned set state = 'settled' where round = ${round}`);
  await store.db.execute(sql`delete from churned where round < ${round}`);
}

const stats = async (store: Store) =>
  (
    await rowsOf<{ size: number | string; vacuums: number | string; analyzes: number | string }>(
      store.db,
      sql`select pg_relation_size('churned') as size, vacuum_count as vacuums, analyze_count as analyzes
        from pg_stat_user_tables where relname = 'churned'`,
    )
  ).map((r) => ({ size: Number(r.size), vacuums: Number(r.vacuums), analyzes: Number(r.analyzes) }))[0]!;

async function churnedTable(maintenanceMs: number, rounds: number): Promise<{ sizes: number[]; vacuums: number; analyzes: number }> {
  const store = await openTestPglite({ maintenanceMs });
  try {
    await store.exec('create table churned (id text primary key, round int, state text)');
    const sizes: number[] = [];
    for (let round = 1; round <= rounds; round++) {
      const before = (await stats(store)).vacuums;
      await churn(store, round);
      // With maintenance on, the pass that follows the round vacuums it.
      if (maintenanceMs > 0) await eventually(async () => (await stats(store)).vacuums > before, `a vacuum after round ${round}`);
      sizes.push((await stats(store)).size);
    }
    return { sizes, ...(await stats(store)) };
  } finally {
    await store.close();
  }
}

describe('PGlite maintenance (autovacuum for the embedded store)', () => {
  it('vacuums and analyzes a churned table: it stops growing; without the passes it grows every round', async () => {
    const kept = await churnedTable(20, 8);
    expect(kept.analyzes).toBeGreaterThan(0);
    // The space of the rounds deleted is used again: the table holds at most two rounds' worth.
    expect(Math.max(...kept.sizes)).toBeLessThanOrEqual(2 * kept.sizes[0]!);
    const unkept = await churnedTable(0, 8);
    expect(unkept.vacuums).toBe(0);
    // Measured: 104 KB a round, 816 KB after eight, with 1000 rows live.
    unkept.sizes.slice(1).forEach((size, i) => expect(size).toBeGreaterThan(unkept.sizes[i]!));
    expect(unkept.sizes[7]).toBeGreaterThan(6 * unkept.sizes[0]!);
    expect(kept.sizes[7]).toBeLessThan(unkept.sizes[7]! / 3);
  }, 60_000);

  it("runs what autovacuum's default thresholds call for, one statement a table", async () => {
    const pg = new PGlite();
    // Statistics reach the views at most once a second unless a flush is asked for.
    const run = async (statements: string) => void (await pg.exec(`${statements}; select pg_stat_force_next_flush()`));
    try {
      await run('create table t (id int primary key); insert into t select generate_series(1, 1000)');
      // 1000 rows inserted: statistics due (> 50 + 10%), a vacuum not yet (<= 1000 + 20%).
      expect(await maintain(pg)).toEqual(['analyze public.t']);
      expect(await maintain(pg)).toEqual([]);
      // 100 dead of 900: under both thresholds (50 + 20% for the dead, 50 + 10% for changes).
      await run('delete from t where id <= 100');
      expect(await maintain(pg)).toEqual([]);
      // 300 dead of 700: both due.
      await run('delete from t where id <= 300');
      expect(await maintain(pg)).toEqual(['vacuum (analyze) public.t']);
      expect(await maintain(pg)).toEqual([]);
    } finally {
      await pg.close();
    }
    expect(maintenanceOf({ name: '"odd name".t', vacuum: true, analyze: false })).toBe('vacuum "odd name".t');
  });
});
