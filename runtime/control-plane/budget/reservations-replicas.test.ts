/**
 * A reservation settled on another replica (issue 14): replicas share one store (one PGlite, or
 * one PostgreSQL schema when TEST_DATABASE_URL is set), each with its own meter and reservation
 * writer. The reserving replica's row write is held back (its store "slow") so the settlement
 * comes before the row, deterministically: it waits for the row, or claims the id once its wait
 * is over and the row takes the claim over when it lands; either way the call is charged once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type SQL } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import { rowsOf, type Db, type Store } from '../../store/factory.js';
import { openTestPglite, openTestPostgres, testSchema, TEST_DATABASE_URL } from '../../store/testing.js';
import { createReservations, UnknownReservation } from './reservations.js';
import { createSharedBudgetMeter } from './meter.js';
import { createBudgetLedger } from './ledger.js';
import type { Budget } from '../types.js';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 30);
const ask = { promptTokens: 100, outputTokens: 900, priceInputPer1k: 0, priceOutputPer1k: 0 };
const budget: Budget = { tokensPerHour: 1_000_000 };
const dialect = new PgDialect();

/** A store handle whose statements can be held back (matched by their text) and counted. */
function watched(db: Db) {
  const holds: { re: RegExp; open: Promise<void>; asked: () => void }[] = [];
  const seen: string[] = [];
  const proxy = new Proxy(db, {
    get(t, k, r) {
      if (k !== 'execute') return Reflect.get(t, k, r) as unknown;
      return async (q: SQL) => {
        const text = dialect.sqlToQuery(q).sql.replace(/\s+/g, ' ').trim();
        seen.push(text);
        const h = holds.find((x) => x.re.test(text));
        if (h) {
          h.asked();
          await h.open;
        }
        return t.execute(q);
      };
    },
  });
  return {
    db: proxy,
    count: (re: RegExp) => seen.filter((s) => re.test(s)).length,
    /** Holds every statement matching `re` until released; `asked` resolves when the first one comes. */
    hold(re: RegExp) {
      let release!: () => void;
      let asked!: () => void;
      const h = { re, open: new Promise<void>((r) => (release = r)), asked: () => {} };
      const first = new Promise<void>((r) => (asked = r));
      h.asked = asked;
      holds.push(h);
      return {
        asked: first,
        release: () => {
          holds.splice(holds.indexOf(h), 1);
          release();
        },
      };
    },
  };
}

const INSERT = /^insert into budget_reservations .* 'open'/;
const LOOKUP = /^select id, agent/;

const backends: { name: string; open: (schema: string) => Promise<Store>; drop: (schema: string) => Promise<void> }[] = [];
{
  let shared: Store | undefined;
  backends.push({
    name: 'PGlite, one store',
    open: async () => (shared ??= await openTestPglite()),
    drop: async () => {
      await shared?.close();
      shared = undefined;
    },
  });
  if (TEST_DATABASE_URL)
    backends.push({
      name: 'PostgreSQL, a store per replica on one schema',
      open: (schema) => openTestPostgres({ schema, keepSchema: true, poolSize: 2 }),
      drop: async (schema) => (await openTestPostgres({ schema })).close(),
    });
}

describe.each(backends)('reservations settled on another replica ($name)', ({ open, drop }) => {
  const schema = testSchema();
  const stores: Store[] = [];
  let ledgerStore: Store;
  beforeAll(async () => {
    ledgerStore = await open(schema);
  }, 120_000);
  afterAll(async () => {
    for (const s of new Set(stores)) if (s !== ledgerStore) await s.close().catch(() => {});
    if (TEST_DATABASE_URL && ledgerStore.kind === 'postgres') await ledgerStore.close();
    await drop(schema);
  });

  async function replica(agent: string, unstoredWaitMs = 5000) {
    const store = await open(schema);
    stores.push(store);
    const w = watched(store.db);
    const meter = createSharedBudgetMeter({
      ledger: createBudgetLedger(store),
      budgetOf: (a) => (a === agent ? budget : undefined),
      now: () => T0,
      syncMs: 60_000,
    });
    const res = createReservations({
      store: { db: w.db },
      meter,
      budgetOf: (a) => (a === agent ? budget : undefined),
      now: () => T0,
      ttlMs: 60_000,
      sweepMs: 0,
      unstoredWaitMs,
    });
    return { w, meter, res };
  }
  type Replica = Awaited<ReturnType<typeof replica>>;

  /** What the ledger holds for `agent` once every replica gave its lease back, and the row. */
  async function outcome(agent: string, id: string, replicas: Replica[]) {
    for (const r of replicas) {
      await r.res.close();
      await r.meter.close();
    }
    const [row] = await rowsOf<{ state: string; settled_tokens: number }>(
      ledgerStore.db,
      sql`select state, settled_tokens from budget_reservations where id = ${id}`,
    );
    return { charged: await createBudgetLedger(ledgerStore).read(agent, 'tokens', T0), row };
  }

  async function reserve(r: Replica, agent: string): Promise<string> {
    const a = await r.res.reserve({ agent, ...ask });
    if (!a.ok || !a.id) throw new Error('expected a reservation');
    return a.id;
  }

  it('a settlement of a row the reserving replica has not written yet waits for it and settles it once', async () => {
    const [r1, r3] = [await replica('rc'), await replica('rc')];
    const slow = r1.w.hold(INSERT);
    const id = await reserve(r1, 'rc');
    await slow.asked;
    const settled = r3.res.settle(id, 'rc', 10, 0);
    // It looked, found no row, and looks again (before the fix: refused as unknown at once).
    await expect.poll(() => r3.w.count(LOOKUP), { timeout: 10_000 }).toBeGreaterThanOrEqual(2);
    slow.release();
    expect(await settled).toBe(true);
    expect(await r1.res.settle(id, 'rc', 10, 0)).toBe(false);
    expect(await outcome('rc', id, [r1, r3])).toEqual({ charged: 10, row: { state: 'settled', settled_tokens: 10 } });
  });

  it('a row written after the other replica stopped waiting takes its claim over: charged once, never the worst case as well', async () => {
    const [r1, r3] = [await replica('late'), await replica('late', 100)];
    const slow = r1.w.hold(INSERT);
    const id = await reserve(r1, 'late');
    await slow.asked;
    // No row within the wait: the id is claimed and the caller charges the usage as unreserved (server.ts).
    await expect(r3.res.settle(id, 'late', 10, 0)).rejects.toBeInstanceOf(UnknownReservation);
    r3.meter.recordUsage('late', 10, 0, T0);
    // A repeat of the report changes nothing.
    expect(await r3.res.settle(id, 'late', 10, 0)).toBe(false);
    slow.release();
    // The row lands, takes the claim over and gives its worst case (1000) back; nothing expires.
    expect(await r1.res.expire()).toBe(0);
    expect(await r1.res.settle(id, 'late', 10, 0)).toBe(false);
    expect(await outcome('late', id, [r1, r3])).toEqual({ charged: 10, row: { state: 'settled', settled_tokens: 10 } });
  });

  it('a row that lands between the settlement update and its look-up is settled, not taken for a repeat', async () => {
    const [r1, r3] = [await replica('gap'), await replica('gap')];
    const slow = r1.w.hold(INSERT);
    const id = await reserve(r1, 'gap');
    await slow.asked;
    const look = r3.w.hold(LOOKUP);
    const settled = r3.res.settle(id, 'gap', 10, 0);
    await look.asked; // its update found no row
    slow.release();
    await r1.res.expire(); // the row is written (flush), and still open
    look.release();
    expect(await settled).toBe(true);
    expect(await outcome('gap', id, [r1, r3])).toEqual({ charged: 10, row: { state: 'settled', settled_tokens: 10 } });
  });

  it('replicas settling the same id while its row is on its way apply it once', async () => {
    const rs = [await replica('many'), await replica('many'), await replica('many', 100)];
    const slow = rs[0]!.w.hold(INSERT);
    const id = await reserve(rs[0]!, 'many');
    await slow.asked;
    const answers = rs.map((r) => r.res.settle(id, 'many', 10, 0).catch((e: unknown) => (e instanceof UnknownReservation ? 'claimed' : Promise.reject(e))));
    // The last replica waits 100 ms only: it claims the id, unless the row wins the race to the
    // store (then the claim conflicts and it settles the row). Either way one answer applies it.
    await expect.poll(() => rs[2]!.w.count(/^insert into budget_reservations .* 'unreserved'/), { timeout: 10_000 }).toBe(1);
    slow.release();
    const got = await Promise.all(answers);
    expect(got.filter((a) => a !== false)).toHaveLength(1);
    // A claim is charged as unreserved by its caller (server.ts).
    if (got.includes('claimed')) rs[2]!.meter.recordUsage('many', 10, 0, T0);
    expect(await outcome('many', id, rs)).toEqual({ charged: 10, row: { state: 'settled', settled_tokens: 10 } });
  });
});
