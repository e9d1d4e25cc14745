/**
 * The budget gauges (`agent_budget_utilisation_ratio`, `budget_remaining`) show the fleet's
 * usage from the shared ledger at each scrape: a replica that serves none of an agent's calls
 * shows what the others used, a replica that served an agent an hour ago no longer shows that
 * hour, and a ledger that cannot be read leaves the series out rather than showing a stale view.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../lib/brand.js';
import type { Store } from '../../store/factory.js';
import { openTestPglite } from '../../store/testing.js';
import { HOUR_MS } from './policy.js';
import { registerBudgetMetrics } from './gauges.js';
import { createSharedBudgetMeter, type SharedBudgetMeter } from './meter.js';
import { createBudgetLedger, type BudgetLedger } from './ledger.js';
import { createMetrics } from '../metrics.js';
import type { Budget } from '../types.js';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 30);
const agents = [{ name: 'worker', kind: 'agent', budget: { callsPerHour: 100, tokensPerHour: 1000 } satisfies Budget }];
const budgetOf = (a: string) => agents.find((s) => s.name === a)?.budget;

/** The budget series of one replica's /metrics, as `name{dimension}` -> value. */
async function gauges(meter: SharedBudgetMeter, now: () => number): Promise<Record<string, number>> {
  const registry = { list: () => agents, get: (n: string) => agents.find((s) => s.name === n) };
  const m = createMetrics({ registry, budget: meter, now });
  registerBudgetMetrics(m.registry, { registry, budget: meter, now });
  const out: Record<string, number> = {};
  for (const line of (await m.text()).split('\n')) {
    const g = /^(\w+)\{agent="worker",dimension="(\w+)"\} (\S+)$/.exec(line);
    if (g) out[`${g[1]!.replace(metric(''), '')}{${g[2]}}`] = Number(g[3]);
  }
  return out;
}

describe('budget gauges read the fleet from the ledger', () => {
  let store: Store;
  let ledger: BudgetLedger;
  let now = T0;
  const clock = () => now;
  beforeAll(async () => {
    store = await openTestPglite();
    ledger = createBudgetLedger(store);
  }, 120_000);
  afterAll(async () => {
    await store?.close();
  });

  it('a replica serving none of the calls shows the others; the server of an idle agent stops showing a past hour', async () => {
    const a = createSharedBudgetMeter({ ledger, budgetOf, now: clock, syncMs: 60_000 });
    const b = createSharedBudgetMeter({ ledger, budgetOf, now: clock, syncMs: 60_000 });
    try {
      await a.refresh('worker');
      for (let i = 0; i < 10; i++) a.reserveCall('worker', now);
      await a.flush();
      // The ledger holds A's 10 calls and the lease A took ahead (2 calls: 2% of 100).
      const onB = await gauges(b, clock);
      expect(onB['agent_budget_utilisation_ratio{calls_per_hour}']).toBeCloseTo(0.12, 9);
      expect(onB['budget_remaining{calls_per_hour}']).toBe(88);
      expect(onB['agent_budget_utilisation_ratio{tokens_per_hour}']).toBe(0);
      expect(onB['budget_remaining{tokens_per_hour}']).toBe(1000);
      // An hour and a minute on, with no call since: the window is empty on every replica.
      now = T0 + HOUR_MS + 60_000;
      const onA = await gauges(a, clock);
      expect(onA['agent_budget_utilisation_ratio{calls_per_hour}']).toBe(0);
      expect(onA['budget_remaining{calls_per_hour}']).toBe(100);
    } finally {
      now = T0;
      await a.close();
      await b.close();
    }
  });

  it('a ledger that cannot be read leaves the budget series out', async () => {
    const down: BudgetLedger = { ...ledger, totals: () => Promise.reject(new Error('connection refused')) };
    const m = createSharedBudgetMeter({ ledger: down, budgetOf, now: clock, syncMs: 60_000 });
    try {
      expect(await gauges(m, clock)).toEqual({});
    } finally {
      await m.close();
    }
  });
});
