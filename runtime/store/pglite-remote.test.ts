import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { isStoreError } from '../lib/errors.js';
import { rowsOf } from './factory.js';
import { RemotePglite } from './pglite-remote.js';
import { openTestPglite } from './testing.js';

/** How late a 5 ms timer fires, repeatedly, while `work` runs: the longest delay (ms). */
async function longestStall(work: Promise<unknown>): Promise<number> {
  let worst = 0;
  let running = true;
  const done = work.finally(() => (running = false));
  while (running) {
    const t = performance.now();
    await new Promise((r) => setTimeout(r, 5));
    worst = Math.max(worst, performance.now() - t - 5);
  }
  await done;
  return worst;
}

describe('PGlite on its engine thread', () => {
  it('a long statement does not stall this event loop (issue 15 item 1)', async () => {
    const store = await openTestPglite();
    try {
      // ~1 s of engine work (here) in one statement; in-process this held the loop for all of it.
      const heavy = rowsOf<{ n: string }>(store.db, sql`select count(*)::text as n from generate_series(1, 3000000) g, lateral (select md5(g::text)) m`);
      const started = performance.now();
      const stall = await longestStall(heavy);
      expect((await heavy)[0]?.n).toBe('3000000');
      expect(performance.now() - started).toBeGreaterThan(400); // the statement was long enough to matter
      expect(stall).toBeLessThan(100);
    } finally {
      await store.close();
    }
  });

  it('errors keep their SQLSTATE, transactions commit or roll back, and rows come back typed', async () => {
    const store = await openTestPglite();
    try {
      await store.db.execute(sql`create table t (k text primary key, n int, at timestamptz, j jsonb)`);
      await store.db.transaction(async (tx) => {
        await tx.execute(sql`insert into t values ('a', 1, '2026-01-01T00:00:00Z', '{"x":[1,2]}')`);
      });
      await expect(
        store.db.transaction(async (tx) => {
          await tx.execute(sql`insert into t values ('b', 2, now(), null)`);
          await tx.execute(sql`insert into t values ('a', 3, now(), null)`);
        }),
      ).rejects.toSatisfy((e: unknown) => (e as { cause?: { code?: string } }).cause?.code === '23505' && isStoreError(e));
      const rows = await rowsOf<{ k: string; n: number; at: string; j: unknown }>(store.db, sql`select * from t order by k`);
      expect(rows).toEqual([{ k: 'a', n: 1, at: expect.stringMatching(/^2026-01-01/), j: { x: [1, 2] } }]);
      // An explicit rollback of drizzle's transaction leaves nothing behind either.
      await store.db
        .transaction(async (tx) => {
          await tx.execute(sql`insert into t values ('c', 4, now(), null)`);
          tx.rollback();
        })
        .catch(() => {});
      expect(await rowsOf(store.db, sql`select k from t where k = 'c'`)).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it("delivers a committed NOTIFY before the writing statement's answer, as in-process PGlite does", async () => {
    const store = await openTestPglite();
    try {
      const seen: string[] = [];
      const stop = await store.listen('remote_order', (p) => seen.push(p));
      await store.db.transaction(async (tx) => {
        await tx.execute(sql`select pg_notify('remote_order', 'one')`);
        expect(seen).toEqual([]); // not before COMMIT
      });
      expect(seen).toEqual(['one']);
      await stop();
      await store.notify('remote_order', 'two');
      expect(seen).toEqual(['one']);
    } finally {
      await store.close();
    }
  });

  it('refuses a result parser it cannot run on the other thread; a closed database is a store error', async () => {
    const pg = await RemotePglite.open({});
    try {
      expect(() => pg.query('select 1', [], { parsers: { 23: (v) => Number(v) * 2 } })).toThrow(/not the identity/);
      expect((await pg.query<{ n: number }>('select 1 as n')).rows).toEqual([{ n: 1 }]);
    } finally {
      await pg.close();
    }
    const closed = await pg.query('select 1').catch((e: unknown) => e);
    expect(closed).toBeInstanceOf(Error);
    expect(isStoreError(closed)).toBe(true);
  });
});
