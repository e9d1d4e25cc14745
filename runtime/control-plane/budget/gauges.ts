/**
 * The `budget_remaining{agent,dimension}` gauge on the plane's metrics registry (next to
 * `agent_budget_utilisation_ratio`, which metrics.ts exports as a share; this one is in the
 * dimension's own unit), read at scrape time from the fleet's window totals (`scrape.ts`).
 */
import { Gauge, type Registry as PromRegistry } from 'prom-client';
import { metric } from '../../lib/brand.js';
import { BUDGET_DIMENSIONS } from '../metrics.js';
import { budgetStatus } from './policy.js';
import type { BudgetSources } from './routes.js';
import { scrapedUsage } from './scrape.js';

/** `budget_remaining{agent,dimension}`: read at scrape time, only dimensions with a ceiling. */
export function registerBudgetMetrics(registry: PromRegistry, src: BudgetSources): void {
  const g: Gauge<'agent' | 'dimension'> = new Gauge({
    name: metric('budget_remaining'),
    help: 'What is left of an agent budget in its rolling window (tokens, calls or USD), by agent and dimension; only dimensions with a ceiling.',
    labelNames: ['agent', 'dimension'] as const,
    registers: [registry],
    async collect() {
      g.reset();
      const usage = await scrapedUsage(src.budget, src.now());
      if (!usage) return;
      for (const s of src.registry.list()) {
        if (s.kind !== 'agent' || !s.budget) continue;
        const st = budgetStatus(s.budget, usage(s.name));
        for (const [dimension, field] of BUDGET_DIMENSIONS) {
          const r = st[field].remaining;
          if (r !== null) g.set({ agent: s.name, dimension }, r);
        }
      }
    },
  });
}
