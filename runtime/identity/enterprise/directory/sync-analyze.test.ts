import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { rowsOf, type Store } from '../../../store/factory.js';
import { testBackends } from '../../../store/testing.js';
import { syntheticSnapshot } from './fixtures.js';
import { syncDirectory } from './sync.js';

/**
 * A sync that wrote many rows refreshes the planner statistics of what it wrote (sync.ts
 * `analyzeWritten`); a small one leaves that to autovacuum. `last_analyze` is set only by an
 * explicit ANALYZE (autovacuum sets `last_autoanalyze`), so neither side depends on its timing.
 */
describe.each(testBackends())('directory sync planner statistics on $name', (b) => {
  let store: Store;
  beforeEach(async () => {
    store = await b.open();
  });
  afterEach(async () => {
    await store.close();
  });

  const analyzed = async (table: string) => {
    const [row] = await rowsOf<{ at: string | null }>(store.db, sql`select last_analyze as at from pg_stat_user_tables where relid = to_regclass(${table})`);
    return row?.at != null;
  };
  const sync = (n: number, analyzeAfterRows: number) =>
    syncDirectory(
      { db: store.db, now: () => Date.now(), analyzeAfterRows },
      { tenantId: 'acme', idp: 'idp_a', mode: 'snapshot', ...syntheticSnapshot(n, 'st') },
    );

  it('analyzes the employees table after a sync that wrote at least the threshold', async () => {
    expect(await analyzed('directory_employees')).toBe(false);
    const r = await sync(120, 100);
    expect(r.counts.users_created).toBe(120);
    expect(await analyzed('directory_employees')).toBe(true);
    const [stats] = await rowsOf<{ n: number }>(store.db, sql`select reltuples::int as n from pg_class where oid = to_regclass('directory_employees')`);
    expect(stats?.n).toBe(120);
    // Fewer than the threshold of groups were written: left to autovacuum.
    expect(await analyzed('directory_groups')).toBe(false);
  });

  it('leaves a sync below the threshold to autovacuum', async () => {
    const r = await sync(50, 100);
    expect(r.counts.users_created).toBe(50);
    expect(await analyzed('directory_employees')).toBe(false);
  });
});
