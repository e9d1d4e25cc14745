/**
 * Budget visibility (issue 14): `GET /v1/budgets/{agent}` on the management API (each dimension's
 * limit, use in its rolling window and what is left) and the `budget_remaining` gauge per agent
 * and dimension on the plane's metrics registry (next to `agent_budget_utilisation_ratio`, which
 * metrics.ts exports as a share; this one is in the dimension's own unit).
 */
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import { Gauge, type Registry as PromRegistry } from 'prom-client';
import { metric } from '../lib/brand.js';
import { budgetStatus, type BudgetUsage } from './budget.js';
import { BUDGET_DIMENSIONS } from './metrics.js';
import { mgmtHook } from './mgmt-errors.js';
import { BUDGET_MODES, type Budget } from './types.js';

export interface BudgetSources {
  registry: { get(name: string): { kind?: string; budget?: Budget } | undefined; list(): readonly { name: string; kind?: string; budget?: Budget }[] };
  budget: { usage(agent: string, now: number): BudgetUsage };
  now: () => number;
}

const Dimension = z
  .object({
    limit: z.number().openapi({ description: 'The ceiling; 0 means no limit.' }),
    used: z.number().openapi({ description: 'Use in the rolling window, reservations in flight included.' }),
    remaining: z.number().nullable().openapi({ description: 'What is left (0 when over); null when there is no limit.' }),
    windowSeconds: z.number().int(),
  })
  .openapi('BudgetDimension');
const BudgetView = z
  .object({
    agent: z.string(),
    mode: z.enum(BUDGET_MODES),
    dimensions: z.object({ tokensPerHour: Dimension, callsPerHour: Dimension, costUsdPerDay: Dimension }),
  })
  .openapi('BudgetStatus');
const Err = z.object({ error: z.string() });

export function budgetRoutes(src: BudgetSources): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: mgmtHook });
  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/budgets/{agent}',
      request: { params: z.object({ agent: z.string().min(1).max(253) }) },
      responses: {
        200: { content: { 'application/json': { schema: BudgetView } }, description: 'The agent budget now, per dimension.' },
        404: { content: { 'application/json': { schema: Err } }, description: 'No registry entry of kind agent by that name.' },
      },
    }),
    (c) => {
      const { agent } = c.req.valid('param');
      const s = src.registry.get(agent);
      if (!s || s.kind !== 'agent') return c.json({ error: `agent ${JSON.stringify(agent)} not found` }, 404);
      const dimensions = budgetStatus(s.budget, src.budget.usage(agent, src.now()));
      return c.json({ agent, mode: s.budget?.mode ?? 'enforce', dimensions }, 200);
    },
  );
  return app;
}

/** `budget_remaining{agent,dimension}`: read at scrape time, only dimensions with a ceiling. */
export function registerBudgetMetrics(registry: PromRegistry, src: BudgetSources): void {
  const g: Gauge<'agent' | 'dimension'> = new Gauge({
    name: metric('budget_remaining'),
    help: 'What is left of an agent budget in its rolling window (tokens, calls or USD), by agent and dimension; only dimensions with a ceiling.',
    labelNames: ['agent', 'dimension'] as const,
    registers: [registry],
    collect() {
      g.reset();
      const t = src.now();
      for (const s of src.registry.list()) {
        if (s.kind !== 'agent' || !s.budget) continue;
        const st = budgetStatus(s.budget, src.budget.usage(s.name, t));
        for (const [dimension, field] of BUDGET_DIMENSIONS) {
          const r = st[field].remaining;
          if (r !== null) g.set({ agent: s.name, dimension }, r);
        }
      }
    },
  });
}
