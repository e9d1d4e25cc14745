/**
 * Reservations served from a token lease and written behind (issue 14, broker hot path): a
 * reservation that fits the lease costs no ledger round trip, the lease never passes the ceiling,
 * a settlement of a row not yet written waits for it, and an idle agent's lease goes back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { rowsOf, type Store } from '../../store/factory.js';
import { openTestPglite, testBackends } from '../../store/testing.js';
import { settleStatement } from './reservation-rows.js';
import { createReservations, UnknownReservation } from './reservations.js';
import { createSharedBudgetMeter } from './meter.js';
import { createBudgetLedger, type BudgetLedger } from './ledger.js';
import type { Budget } from '../types.js';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 30);
const ask = { promptTokens: 100, outputTokens: 400, priceInputPer1k: 0, priceOutputPer1k: 0 };

describe('budget reservations (PGlite)', () => {
  let store: Store;
  beforeAll(async () => {
    store = await openTestPglite();
  }, 120_000);
  afterAll(async () => store?.close());

  function setup(budget: Budget, agent: string) {
    const inner = createBudgetLedger(store);
    let takes = 0;
    const ledger: BudgetLedger = { ...inner, take: (r) => (takes++, inner.take(r)) };
    let now = T0;
    const meter = createSharedBudgetMeter({ ledger, budgetOf: (a) => (a === agent ? budget : undefined), now: () => now, syncMs: 60_000, leaseShare: 0.02 });
    const res = createReservations({ store, meter, budgetOf: (a) => (a === agent ? budget : undefined), now: () => now, ttlMs: 60_000, sweepMs: 0 });
    return { ledger: inner, meter, res, takes: () => takes, advance: (ms: number) => (now += ms), now: () => now };
  }

  it('reservations within the lease take nothing from the ledger per call and never pass the ceiling', async () => {
    // A lease is 2% of 100k tokens: 2,000, four reservations of 500.
    const s = setup({ tokensPerHour: 100_000 }, 'leased');
    const first = await s.res.reserve({ agent: 'leased', ...ask });
    expect(first).toMatchObject({ ok: true, outputTokens: 400 });
    const after = s.takes();
    for (let i = 0; i < 3; i++) expect((await s.res.reserve({ agent: 'leased', ...ask })).ok).toBe(true);
    // Served from the lease (a background top-up may start at half a lease, not one per call).
    expect(s.takes() - after).toBeLessThanOrEqual(1);
    // The ceiling holds whatever the lease: 200 reservations of 500 fit, the 201st does not.
    let ok = 4;
    for (;;) {
      const r = await s.res.reserve({ agent: 'leased', ...ask });
      if (!r.ok) {
        expect(r.message).toMatch(/tokensPerHour budget of agent leased/);
        break;
      }
      ok++;
    }
    expect(ok).toBe(200);
    await s.meter.flush();
    expect(await s.ledger.read('leased', 'tokens', s.now())).toBeLessThanOrEqual(100_000);
    await s.res.close();
    await s.meter.close();
  });

  it('a settlement that comes before its row is written waits for it and applies once', async () => {
    const s = setup({ tokensPerHour: 1_000_000 }, 'quick');
    const r = await s.res.reserve({ agent: 'quick', ...ask });
    if (!r.ok || !r.id) throw new Error('expected a reservation');
    // Same tick: the row is still on its way to the store.
    const [settled, again] = [await s.res.settle(r.id, 'quick', 120, 0), await s.res.settle(r.id, 'quick', 120, 0)];
    expect([settled, again]).toEqual([true, false]);
    const [row] = await rowsOf<{ state: string; settled_tokens: number }>(
      store.db,
      sql`select state, settled_tokens from budget_reservations where id = ${r.id}`,
    );
    expect(row).toEqual({ state: 'settled', settled_tokens: 120 });
    expect(s.meter.usage('quick', s.now()).tokensLastHour).toBe(120);
    await s.res.close();
    await s.meter.close();
  });

  it('settlements asked together go out as one batch: each applies once, a second of the same id gets false, a wrong agent or id is refused as unknown', async () => {
    const s = setup({ tokensPerHour: 1_000_000 }, 'many');
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const r = await s.res.reserve({ agent: 'many', ...ask });
      if (!r.ok || !r.id) throw new Error('expected a reservation');
      ids.push(r.id);
    }
    // All asked in one tick, one id twice and one under another agent's name.
    const unknown = (p: Promise<boolean>) => p.catch((e: unknown) => (e instanceof UnknownReservation ? 'unknown' : Promise.reject(e)));
    const answers = await Promise.all([
      ...ids.map((id) => s.res.settle(id, 'many', 100, 0)),
      s.res.settle(ids[0]!, 'many', 100, 0),
      unknown(s.res.settle(ids[1]!, 'someone-else', 1, 0)),
      unknown(s.res.settle('00000000-0000-4000-8000-000000000000', 'many', 1, 0)),
    ]);
    // A repeat is false (nothing to do); another agent's reservation or none at all is unknown to this agent.
    expect(answers).toEqual([...ids.map(() => true), false, 'unknown', 'unknown']);
    const rows = await rowsOf<{ n: number | string; t: number | string }>(
      store.db,
      sql`select count(*) as n, sum(settled_tokens) as t from budget_reservations where agent = 'many' and state = 'settled'`,
    );
    expect(rows.map((r) => [Number(r.n), Number(r.t)])).toEqual([[20, 2000]]);
    // Each worst case (500) settled to 100: 20 x 100 used.
    expect(s.meter.usage('many', s.now()).tokensLastHour).toBe(2000);
    await s.res.close();
    await s.meter.close();
  });

  it("an idle agent's token lease goes back to the ledger", async () => {
    const s = setup({ tokensPerHour: 100_000 }, 'idler');
    expect((await s.res.reserve({ agent: 'idler', ...ask })).ok).toBe(true);
    await s.meter.flush();
    // Charged: the reservation and a lease held ahead.
    expect(await s.ledger.read('idler', 'tokens', s.now())).toBeGreaterThan(500);
    s.advance(61_000);
    await s.meter.flush();
    expect(await s.ledger.read('idler', 'tokens', s.now())).toBe(500);
    await s.res.close();
    await s.meter.close();
  });
});

describe.each(testBackends())('settlement statement ($name)', ({ open }) => {
  let store: Store;
  beforeAll(async () => {
    store = await open();
  }, 120_000);
  afterAll(async () => store?.close());

  it('finds its rows through the primary key, not a scan of every row kept', async () => {
    // Two days of reservations kept: 10k rows, none analyzed yet.
    await store.db.execute(sql`insert into budget_reservations (id, agent, tokens, cost_usd, hour_bucket, day_bucket, state, created_at, expires_at)
      select 'r-' || g, 'bot', 500, 0, 1, 1, 'settled', now(), now() from generate_series(1, 10000) g`);
    const batch = Array.from({ length: 14 }, (_, i) => ({ id: `r-${i * 700 + 1}`, agent: 'bot', tokens: 100, cost: 0 }));
    const plan = (await rowsOf<{ 'QUERY PLAN': string }>(store.db, sql`explain ${settleStatement(batch)}`)).map((r) => r['QUERY PLAN']).join('\n');
    expect(plan).toMatch(/budget_reservations_pkey/);
    expect(plan).not.toMatch(/Seq Scan on budget_reservations/);
    // And it settles: open rows once, an already settled row never again.
    await store.db.execute(sql`update budget_reservations set state = 'open' where id in ('r-1', 'r-701')`);
    const settled = await rowsOf<{ id: string }>(store.db, settleStatement(batch));
    expect(settled.map((r) => r.id).sort()).toEqual(['r-1', 'r-701']);
  });
});
