/**
 * Control-plane management listener (SPEC 4.3, `:8181`): health, registry (with apply and the
 * version), usage, audit, dry-run decisions, budgets, egress approvals, metrics, and
 * `/openapi.json` generated from the same zod schemas that validate the requests (every
 * management route is in it), with Swagger UI on `/docs` as on the identity authority. Each area
 * is a sub-app composed here with `app.route('/', ...)`; the tests serve exactly this app.
 *
 * Error shapes (the control plane's, not the identity authority's; see mgmt-errors.ts):
 * `{error: string}` with a message naming the offending field; validation errors add `detail`.
 * - malformed JSON, wrong types, unknown fields -> 400
 * - POST /v1/usage with any bad body -> 400 `{error: 'invalid body'}` exactly (SPEC 4.3, 7)
 * - request bodies over 1 MiB (MGMT_BODY_LIMIT) -> 413 `{error: 'body too large: limit 1048576 bytes'}`
 * - unknown route -> 404 `{error: 'not found'}`; store unreachable -> 503; never a 500 for bad input.
 * - POST /v1/usage whose settlements cannot be written -> 503 `{error: 'budget store unavailable', unsettled: [index]}`
 */
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import { swaggerUI } from '@hono/swagger-ui';
import type { Context, Hono, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { allowedMethods, rejectBadInput, writeRefusal } from '../lib/api.js';
import { BRAND_TITLE } from '../lib/brand.js';
import { readyzAnswer, type Readiness } from '../lib/readiness.js';
import { auditRoutes, type AuditRoutesReader } from './audit/routes.js';
import { errMsg, logger } from '../lib/log.js';
import { BUDGET_STORE_UNAVAILABLE, MGMT_BODY_LIMIT, mgmtHook, mgmtOnError, USAGE_PATH } from './mgmt-errors.js';
import type { Registry } from './registry/registry.js';
import { registryRoutes } from './registry/routes.js';
import { UsageBodySchema, USAGE_BATCH_MAX, type UsageReport } from './types.js';

export { MGMT_BODY_LIMIT } from './mgmt-errors.js';
/** Prometheus text exposition format 0.0.4. */
export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';
const log = logger('mgmt');

export interface MgmtDeps {
  registry: Pick<Registry, 'list' | 'get' | 'upsert' | 'apply' | 'remove' | 'snapshot'>;
  audit: AuditRoutesReader;
  /** Feeds budget meters and counters; telemetry only, no audit row. */
  /** May return a promise (a settlement), awaited before the answer. */
  usage: (r: UsageReport) => unknown;
  metricsText: () => Promise<string>;
  /** What `/readyz` answers: 200 once every gate is done and no watch fails, else 503 with the reasons. */
  readiness: Readiness;
  /** Detail added to a ready /readyz answer (the audit chain's state); the status stays readiness's. */
  readyDetail?: () => Record<string, unknown>;
  /** More sub-apps (decision dry-run, budgets, egress approvals, portal), composed at the root. */
  routes?: Hono<any, any, any>[];
  /** Who registry writes are attributed to in the audit log (default `mgmt-api`). */
  actor?: (c: Context) => string;
  /** Authentication and scopes of every route (lib/api-auth.ts `apiAuth`), mounted first. */
  guard?: MiddlewareHandler;
}

const json = <T extends z.ZodType>(schema: T, description: string) => ({ content: { 'application/json': { schema } }, description });

/**
 * A batch whose settlements could not be written (the budget store unavailable): every other
 * report of it was recorded; `unsettled` lists the indexes (in the batch) to post again.
 */
export class UsageNotSettled extends Error {
  constructor(
    readonly unsettled: number[],
    cause: unknown,
  ) {
    super(`${unsettled.length} reservation settlement(s) not written: ${errMsg(cause)}`, { cause });
    this.name = 'UsageNotSettled';
  }
}

/**
 * Records a batch of usage reports as `POST /v1/usage` does (the broker in the same process calls
 * it directly, broker/usage-local.ts). Plain reports need no store: recorded at once. Settlements
 * are written before it resolves; when some cannot be (the store unavailable) it rejects with
 * UsageNotSettled naming them, and the reporter posts only those again (settling is idempotent,
 * an additive report is not: it must never be posted twice).
 */
export async function recordUsageBatch(usage: MgmtDeps['usage'], reports: readonly UsageReport[]): Promise<void> {
  for (const r of reports) if (!r.reservation) await usage(r);
  const settled = await Promise.allSettled(reports.map((r) => (r.reservation ? usage(r) : undefined)));
  const unsettled = settled.flatMap((s, i) => (s.status === 'rejected' ? [i] : []));
  if (unsettled.length) throw new UsageNotSettled(unsettled, (settled[unsettled[0]!] as PromiseRejectedResult).reason);
}

function usageRoutes(usage: MgmtDeps['usage']): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: mgmtHook });
  app.openapi(
    createRoute({
      method: 'post',
      path: USAGE_PATH,
      request: {
        body: {
          content: {
            'application/json': {
              schema: UsageBodySchema.openapi('UsageReportOrBatch', { description: `One usage report, or up to ${USAGE_BATCH_MAX} of them in an array.` }),
            },
          },
          required: true,
        },
      },
      responses: {
        200: json(z.object({ ok: z.literal(true) }), 'Recorded (telemetry only, no audit row).'),
        400: json(z.object({ error: z.literal('invalid body') }), 'Malformed body (any report of a batch: none is recorded).'),
        503: json(
          z.object({ error: z.string(), unsettled: z.array(z.number().int()) }),
          'The budget store is unavailable: the reports at the `unsettled` indexes (settlements) were not recorded, post them again; every other report was.',
        ),
      },
    }),
    async (c) => {
      const body = c.req.valid('json');
      try {
        await recordUsageBatch(usage, Array.isArray(body) ? body : [body]);
      } catch (e) {
        if (!(e instanceof UsageNotSettled)) throw e;
        // The detail is the store's (a database message): logged, never answered.
        log.warn('usage settlements not written: the reporter posts them again', { err: errMsg(e), unsettled: e.unsettled.length });
        return c.json({ error: BUDGET_STORE_UNAVAILABLE, unsettled: e.unsettled }, 503);
      }
      return c.json({ ok: true as const }, 200);
    },
  );
  return app;
}

const Ready = z.object({
  ready: z.boolean(),
  audit: z.any().optional().openapi({ description: "The audit chain's state (when ready)." }),
  error: z.string().optional(),
  reasons: z.array(z.string()).optional().openapi({ description: 'Why not ready (starting, a gate not passed, a watch failing).' }),
});

/** Liveness, readiness and the Prometheus exposition. */
function healthRoutes(deps: Pick<MgmtDeps, 'readiness' | 'readyDetail' | 'metricsText'>): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: mgmtHook });
  app.openapi(createRoute({ method: 'get', path: '/healthz', responses: { 200: json(z.object({ ok: z.literal(true) }), 'Alive.') } }), (c) =>
    c.json({ ok: true as const }, 200),
  );
  app.openapi(
    createRoute({
      method: 'get',
      path: '/readyz',
      responses: { 200: json(Ready, 'Ready to serve: `{ready: true, audit}`.'), 503: json(Ready, 'Not ready: `{ready: false, error, reasons}`.') },
    }),
    (c) => {
      const [status, body] = readyzAnswer(deps.readiness, deps.readyDetail);
      return status === 200 ? c.json(body as z.infer<typeof Ready>, 200) : c.json(body as z.infer<typeof Ready>, 503);
    },
  );
  app.openapi(
    createRoute({
      method: 'get',
      path: '/metrics',
      responses: { 200: { content: { [METRICS_CONTENT_TYPE]: { schema: z.string() } }, description: 'Prometheus text exposition format 0.0.4.' } },
    }),
    async (c) => c.text(await deps.metricsText(), 200, { 'content-type': METRICS_CONTENT_TYPE }),
  );
  return app;
}

export function createMgmtApp(deps: MgmtDeps): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: mgmtHook });
  // WRIT_API_AUTH (lib/api-auth.ts): before anything reads the request.
  if (deps.guard) app.use('*', deps.guard);

  app.use(
    '*',
    bodyLimit({
      maxSize: MGMT_BODY_LIMIT,
      // The rest of the body is never read, so the connection cannot be reused: say so.
      onError: (c) => c.json({ error: `body too large: limit ${MGMT_BODY_LIMIT} bytes` }, 413, { connection: 'close' }),
    }),
  );

  // Writes a web page could make a browser send from another site (lib/api.ts writeRefusal).
  app.use('*', async (c, next) => {
    const no = writeRefusal(c.req.method, (h) => c.req.header(h));
    if (!no) return next();
    // A usage report's one body error is the SPEC's 400 (4.3).
    return no.status === 415 && c.req.path === USAGE_PATH ? c.json({ error: 'invalid body' }, 400) : c.json({ error: no.message }, no.status);
  });
  // NUL, unpaired surrogates, over-deep JSON: 400 here (lib/api.ts), never a store error later.
  app.use(
    '*',
    rejectBadInput((c, detail) =>
      c.json(
        c.req.path === USAGE_PATH
          ? { error: 'invalid body' }
          : { error: `invalid request: ${detail.map((d) => `${d.loc.join('.')}: ${d.msg}`).join('; ')}`, detail },
        400,
      ),
    ),
  );

  app.route('/', healthRoutes(deps));

  app.route('/', registryRoutes({ registry: deps.registry, actor: deps.actor }));
  app.route('/', usageRoutes(deps.usage));
  app.route('/', auditRoutes(deps.audit));
  for (const r of deps.routes ?? []) app.route('/', r);

  app.doc31('/openapi.json', { openapi: '3.1.0', info: { title: `${BRAND_TITLE} control plane management API`, version: '1' } });
  app.get('/docs', swaggerUI({ url: '/openapi.json' }));
  app.notFound((c) => {
    const allow = allowedMethods(app, c.req.path);
    if (allow.length === 0) return c.json({ error: 'not found' }, 404);
    return c.json({ error: `${c.req.method} is not allowed on ${c.req.path}; allowed: ${allow.join(', ')}` }, 405, { allow: allow.join(', ') });
  });
  app.onError(mgmtOnError);
  return app;
}
