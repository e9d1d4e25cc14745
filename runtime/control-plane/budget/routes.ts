/**
 * Budget visibility (issue 14): `GET /v1/budgets/{agent}` on the management API (each dimension's
 * limit, use in its rolling window and what is left) and `POST /v1/budgets/{agent}/reservations`
 * (the broker's reserve, `reservations.ts`). The gauge is `gauges.ts`.
 */
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import { errMsg, logger } from '../../lib/log.js';
import { budgetStatus, retryAfterSeconds, type BudgetUsage } from './policy.js';
import type { Reservations } from './ports.js';
import type { ScrapedMeter } from './scrape.js';
import { BUDGET_STORE_UNAVAILABLE, mgmtHook } from '../mgmt-errors.js';
import { BUDGET_MODES, REGISTRY_NAME_MAX, type Budget } from '../types.js';
import { MAX_CALL_TOKENS, MAX_PRICE_PER_1K } from '../../lib/reservation-header.js';

export interface BudgetSources {
  registry: { get(name: string): { kind?: string; budget?: Budget } | undefined; list(): readonly { name: string; kind?: string; budget?: Budget }[] };
  budget: ScrapedMeter & { read?(agent: string): Promise<BudgetUsage> };
  /** The broker's reservations (POST /v1/budgets/{agent}/reservations); absent: no such route. */
  reservations?: Reservations;
  now: () => number;
}

const log = logger('budget');

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
const ReserveBody = z
  .object({
    promptTokens: z.number().int().min(0).max(MAX_CALL_TOKENS).openapi({ description: 'Upper bound of the prompt tokens.' }),
    outputTokens: z.number().int().min(1).max(MAX_CALL_TOKENS).openapi({ description: 'Output tokens wanted: max_tokens, or the model output cap.' }),
    priceInputPer1k: z.number().nonnegative().max(MAX_PRICE_PER_1K),
    priceOutputPer1k: z.number().nonnegative().max(MAX_PRICE_PER_1K),
    partial: z.boolean().optional().openapi({ description: 'Accept a smaller output allowance (a stream the broker cuts at it).' }),
    ttlMs: z
      .number()
      .int()
      .min(1000)
      .max(86_400_000)
      .optional()
      .openapi({ description: 'Settlement deadline; past it the reservation expires with its worst case charged.' }),
  })
  .strict()
  .openapi('ReservationRequest');
const Reserved = z.object({ id: z.string().nullable(), outputTokens: z.number().int() }).openapi('Reservation');
const Refused = z
  .object({
    error: z.string(),
    dimension: z.enum(['tokensPerHour', 'costUsdPerDay']),
    limit: z.number(),
    used: z.number(),
    need: z.number(),
    freesAt: z.string().nullable(),
    retryAfterSeconds: z
      .number()
      .int()
      .nullable()
      .openapi({ description: 'null (and no retry-after) when the call needs more than the whole budget: it never fits.' }),
  })
  .openapi('ReservationRefused');

const statusRoute = createRoute({
  method: 'get',
  path: '/v1/budgets/{agent}',
  request: { params: z.object({ agent: z.string().min(1).max(REGISTRY_NAME_MAX) }) },
  responses: {
    200: { content: { 'application/json': { schema: BudgetView } }, description: 'The agent budget now, per dimension.' },
    404: { content: { 'application/json': { schema: Err } }, description: 'No registry entry of kind agent by that name.' },
  },
});

const reserveRoute = createRoute({
  method: 'post',
  path: '/v1/budgets/{agent}/reservations',
  request: {
    params: z.object({ agent: z.string().min(1).max(REGISTRY_NAME_MAX) }),
    body: { content: { 'application/json': { schema: ReserveBody } }, required: true },
  },
  responses: {
    200: {
      content: { 'application/json': { schema: Reserved } },
      description: 'Reserved (id null: no token or cost ceiling to reserve against); outputTokens is the allowance.',
    },
    400: { content: { 'application/json': { schema: Err } }, description: 'Malformed request.' },
    404: { content: { 'application/json': { schema: Err } }, description: 'No registry entry of kind agent by that name.' },
    429: { content: { 'application/json': { schema: Refused } }, description: 'The worst case does not fit the budget: nothing reserved.' },
    503: { content: { 'application/json': { schema: Err } }, description: 'The budget ledger is unavailable (refused: fail closed).' },
  },
});

export function budgetRoutes(src: BudgetSources): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: mgmtHook });
  app.openapi(statusRoute, async (c) => {
    const { agent } = c.req.valid('param');
    const s = src.registry.get(agent);
    if (!s || s.kind !== 'agent') return c.json({ error: `agent ${JSON.stringify(agent)} not found` }, 404);
    // Fresh from the shared ledger (every replica's use); this replica's belief if it is down.
    const u = src.budget.read ? await src.budget.read(agent).catch(() => src.budget.usage(agent, src.now())) : src.budget.usage(agent, src.now());
    const dimensions = budgetStatus(s.budget, u);
    return c.json({ agent, mode: s.budget?.mode ?? 'enforce', dimensions }, 200);
  });
  const reservations = src.reservations;
  if (reservations) {
    app.openapi(reserveRoute, async (c) => {
      const { agent } = c.req.valid('param');
      const s = src.registry.get(agent);
      if (!s || s.kind !== 'agent') return c.json({ error: `agent ${JSON.stringify(agent)} not found` }, 404);
      let a;
      try {
        a = await reservations.reserve({ agent, ...c.req.valid('json') });
      } catch (e) {
        // The detail is the store's (a database message): logged here, never shown to the caller.
        log.error('reservation failed', { agent, err: errMsg(e) });
        return c.json({ error: BUDGET_STORE_UNAVAILABLE }, 503);
      }
      if (a.ok) return c.json({ id: a.id, outputTokens: a.outputTokens }, 200);
      const retry = retryAfterSeconds(a, src.now());
      return c.json(
        {
          error: a.message,
          dimension: a.dimension,
          limit: a.limit,
          used: a.used,
          need: a.need,
          freesAt: a.freesAt ? new Date(a.freesAt).toISOString() : null,
          retryAfterSeconds: retry ?? null,
        },
        429,
        retry === undefined ? {} : { 'retry-after': String(retry) },
      );
    });
  }
  return app;
}
