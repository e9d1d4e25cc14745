/**
 * Control-plane management listener (SPEC 4.3, `:8181`): health, registry, usage, audit, metrics.
 *
 * Error shapes (the control plane's, not the identity authority's): `{error: string}` with a
 * message naming the offending field; registry validation errors add `detail` (loc/msg/type).
 * - malformed JSON, wrong types, unknown fields -> 400
 * - POST /v1/usage with any bad body -> 400 `{error: 'invalid body'}` exactly (SPEC 4.3, 7)
 * - request bodies over 1 MiB (MGMT_BODY_LIMIT) -> 413 `{error: 'body too large: limit 1048576 bytes'}`
 * - unknown route -> 404 `{error: 'not found'}`; store unreachable -> 503; never a 500 for bad input.
 * The egress-approval routes are mounted by their owner through `extraRoutes`.
 */
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { errMsg, logger } from '../lib/log.js';
import type { AuditReader } from './audit/chain.js';
import { RING_SIZE, DEFAULT_RECENT } from './audit/chain.js';
import { AuditBackpressureError } from './audit/shipper.js';
import type { Registry } from './registry/registry.js';
import { RegistryValidationError } from './registry/service.js';
import { UsageSchema, type UsageReport } from './types.js';

/** Request body limit of the management API (SPEC is silent; 1 MiB, answered with 413). */
export const MGMT_BODY_LIMIT = 1024 * 1024;
/** Prometheus text exposition format 0.0.4. */
export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

export interface MgmtDeps {
  registry: Pick<Registry, 'list' | 'get' | 'upsert'>;
  audit: AuditReader;
  /** Feeds budget meters and counters; telemetry only, no audit row. */
  usage: (r: UsageReport) => void;
  metricsText: () => Promise<string>;
  ready: () => boolean;
  /** Mounts more routes (egress approvals) on the same app. */
  extraRoutes?: (app: Hono) => void;
  /** Who registry writes are attributed to in the audit log (default `mgmt-api`). */
  actor?: (c: Context) => string;
}

const log = logger('mgmt');

class BadJson extends Error {}

async function readJson(c: Context): Promise<unknown> {
  const text = await c.req.text();
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new BadJson(`malformed JSON body: ${errMsg(e)}`);
  }
}

export function createMgmtApp(deps: MgmtDeps): Hono {
  const app = new Hono();

  app.use(
    '*',
    bodyLimit({
      maxSize: MGMT_BODY_LIMIT,
      // The rest of the body is never read, so the connection cannot be reused: say so.
      onError: (c) => c.json({ error: `body too large: limit ${MGMT_BODY_LIMIT} bytes` }, 413, { connection: 'close' }),
    }),
  );

  app.get('/healthz', (c) => c.json({ ok: true }));
  app.get('/readyz', (c) => (deps.ready() ? c.json({ ready: true }) : c.json({ ready: false, error: 'not ready' }, 503)));

  app.get('/v1/registry/services', (c) => c.json(deps.registry.list()));

  app.post('/v1/registry/services', async (c) => {
    let body: unknown;
    try {
      body = await readJson(c);
    } catch (e) {
      return c.json({ error: errMsg(e) }, 400);
    }
    try {
      const stored = await deps.registry.upsert(body, { by: deps.actor?.(c) ?? 'mgmt-api' });
      return c.json(stored);
    } catch (e) {
      if (e instanceof RegistryValidationError) return c.json({ error: e.message, detail: e.issues }, 400);
      if (e instanceof AuditBackpressureError) return c.json({ error: 'audit log unavailable; write refused' }, 503);
      log.error('registry upsert failed', { err: errMsg(e) });
      return c.json({ error: 'registry store unavailable' }, 503);
    }
  });

  // Names may contain '/' (ServiceSchema allows it), so the parameter takes the rest of the path.
  app.get('/v1/registry/services/:name{.+}', (c) => {
    const name = c.req.param('name');
    const svc = deps.registry.get(name);
    return svc ? c.json(svc) : c.json({ error: `service ${JSON.stringify(name)} not found` }, 404);
  });

  app.post('/v1/usage', async (c) => {
    let body: unknown;
    try {
      body = await readJson(c);
    } catch {
      return c.json({ error: 'invalid body' }, 400);
    }
    const r = UsageSchema.safeParse(body);
    if (!r.success) return c.json({ error: 'invalid body' }, 400);
    deps.usage(r.data);
    return c.json({ ok: true });
  });

  app.get('/v1/audit', (c) => {
    const raw = c.req.query('limit');
    let limit = DEFAULT_RECENT;
    if (raw !== undefined) {
      if (!/^\d+$/.test(raw) || Number(raw) < 1) {
        return c.json({ error: `limit must be an integer >= 1 (got ${JSON.stringify(raw)})` }, 400);
      }
      limit = Math.min(Number(raw), RING_SIZE);
    }
    return c.json(deps.audit.recent(limit));
  });

  app.get('/v1/audit/verify', (c) => c.json(deps.audit.verify()));

  app.get('/metrics', async (c) => {
    const text = await deps.metricsText();
    return c.body(text, 200, { 'content-type': METRICS_CONTENT_TYPE });
  });

  deps.extraRoutes?.(app);

  app.notFound((c) => c.json({ error: 'not found' }, 404));
  app.onError((err, c) => {
    log.error('unhandled error', { err: err.message, path: c.req.path });
    return c.json({ error: 'internal error' }, 500);
  });
  return app;
}
