/**
 * Registry routes of the management API (SPEC 4.3 plus the apply seam): list, get, the SPEC
 * upsert (owner `api`), delete, apply and the version. A sub-app composed into the management
 * app with `app.route('/', ...)`; its schemas generate `/openapi.json`.
 */
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { grants, principalOf, producerScope } from '../../lib/api-auth.js';
import { ProducerOwner } from '../../lib/api.js';
import { errMsg, logger } from '../../lib/log.js';
import { AuditBackpressureError } from '../audit/shipper.js';
import { ServiceSchema } from '../types.js';
import type { Registry } from './registry.js';
import { RegistryConflictError, RegistryValidationError } from './service.js';
import { mgmtHook } from '../mgmt-errors.js';

/** The scope that lets a credential apply as `owner` (SPEC's producers: `folder:<path>`, `kubernetes:<cluster>`, ...). */
export const ownerScope = (owner: string): string => producerScope('registry', owner);

const log = logger('registry');

const Err = z.object({ error: z.string(), detail: z.array(z.any()).optional() }).openapi('MgmtError');
const Service = ServiceSchema.openapi('Service');
const NameParam = z.object({
  name: z
    .string()
    .min(1)
    .openapi({ param: { name: 'name', in: 'path' } }),
});
const Owner = ProducerOwner;
const ApplyBody = z
  .object({
    owner: Owner.openapi({ description: 'The producer: `api`, `examples`, `folder:<path>`, `kubernetes:<cluster>`, ...' }),
    services: z.array(z.record(z.string(), z.unknown())).max(100_000).openapi({
      description: 'Service objects (SPEC 2.1). Each is validated on its own: an invalid one is reported in `invalid` and never blocks the others.',
    }),
    dryRun: z.boolean().optional(),
  })
  .strict()
  .openapi('ApplyRequest');
const ApplyResult = z
  .object({
    version: z.number().int(),
    created: z.array(z.string()),
    updated: z.array(z.string()),
    deleted: z.array(z.string()),
    unchanged: z.array(z.string()),
    conflicts: z.array(z.string()),
    conflictOwners: z.record(z.string(), z.string()),
    invalid: z.array(z.object({ name: z.string(), error: z.string() })),
  })
  .openapi('ApplyResult');
const Version = z.object({ version: z.number().int(), hash: z.string() }).openapi('RegistryVersion');

const json = <T extends z.ZodType>(schema: T, description: string) => ({ content: { 'application/json': { schema } }, description });

/** A store or audit failure of a write: 503 with what is unavailable (never a 500). */
function unavailable(c: Context, e: unknown, what: string) {
  if (e instanceof AuditBackpressureError) return c.json({ error: 'audit log unavailable; write refused' }, 503);
  log.error(`registry ${what} failed`, { err: errMsg(e) });
  return c.json({ error: 'registry store unavailable' }, 503);
}

export interface RegistryRoutesDeps {
  registry: Pick<Registry, 'list' | 'get' | 'upsert' | 'apply' | 'remove' | 'snapshot'>;
  /** Who registry writes are attributed to in the audit log (default `mgmt-api`). */
  actor?: (c: Context) => string;
}

export function registryRoutes(deps: RegistryRoutesDeps): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: mgmtHook });
  const by = (c: Context) => deps.actor?.(c) ?? 'mgmt-api';

  app.openapi(
    createRoute({ method: 'get', path: '/v1/registry/services', responses: { 200: json(z.array(Service), 'Every service, sorted by name.') } }),
    (c) => c.json(deps.registry.list(), 200),
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/registry/services',
      request: { body: { content: { 'application/json': { schema: Service } }, required: true } },
      responses: {
        200: json(Service, 'The stored service (upsert by owner `api`, audited as registry.upsert).'),
        400: json(Err, 'Invalid service.'),
        409: json(Err, 'Another owner manages this service.'),
        503: json(Err, 'Store or audit log unavailable.'),
      },
    }),
    async (c) => {
      try {
        return c.json(await deps.registry.upsert(c.req.valid('json'), { by: by(c) }), 200);
      } catch (e) {
        if (e instanceof RegistryValidationError) return c.json({ error: e.message, detail: e.issues }, 400);
        if (e instanceof RegistryConflictError) return c.json({ error: e.message }, 409);
        return unavailable(c, e, 'upsert');
      }
    },
  );

  // Names may contain '/' (ServiceSchema allows it): the documented `{name}` routes are served by
  // handlers registered first on `:name{.+}`, which takes the rest of the path.
  const getOne = (c: Context) => {
    const name = c.req.param('name') ?? '';
    const svc = deps.registry.get(name);
    return svc ? c.json(svc, 200) : c.json({ error: `service ${JSON.stringify(name)} not found` }, 404);
  };
  const removeOne = async (c: Context) => {
    const name = c.req.param('name') ?? '';
    try {
      const gone = await deps.registry.remove(name, { owner: 'api', by: by(c) });
      if (!gone) return c.json({ error: `service ${JSON.stringify(name)} not found` }, 404);
      return c.json({ deleted: name, version: deps.registry.snapshot().version }, 200);
    } catch (e) {
      if (e instanceof RegistryConflictError) return c.json({ error: e.message }, 409);
      return unavailable(c, e, 'delete');
    }
  };
  app.get('/v1/registry/services/:name{.+}', getOne);
  app.delete('/v1/registry/services/:name{.+}', removeOne);
  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/registry/services/{name}',
      request: { params: NameParam },
      responses: { 200: json(Service, 'One service.'), 404: json(Err, 'Unknown service.') },
    }),
    getOne as never,
  );

  app.openapi(
    createRoute({
      method: 'delete',
      path: '/v1/registry/services/{name}',
      request: { params: NameParam },
      responses: {
        200: json(z.object({ deleted: z.string(), version: z.number().int() }), 'Deleted (owner `api`).'),
        404: json(Err, 'Unknown service.'),
        409: json(Err, 'Another owner manages this service: withdraw it there.'),
        503: json(Err, 'Store or audit log unavailable.'),
      },
    }),
    removeOne as never,
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/registry/apply',
      request: { body: { content: { 'application/json': { schema: ApplyBody } }, required: true } },
      responses: {
        200: json(ApplyResult, "The owner's desired entries applied (or planned, with dryRun): names per outcome and the resulting version."),
        400: json(Err, 'Malformed request.'),
        403: json(Err, 'With auth on: applying as an owner other than `api` needs the scope `registry:owner:<owner>`.'),
        503: json(Err, 'Store or audit log unavailable.'),
      },
    }),
    async (c) => {
      const b = c.req.valid('json');
      // An owner is a claim: applying as one prunes what it holds. With auth on, a producer's
      // owner (folder:, kubernetes:, ...) is the credential's to claim; a plan (dryRun) writes nothing.
      const p = principalOf(c);
      if (p && !b.dryRun && b.owner !== 'api' && !grants(p, ownerScope(b.owner))) {
        return c.json({ error: `applying as owner ${JSON.stringify(b.owner)} needs the scope ${ownerScope(b.owner)} (or admin)` }, 403);
      }
      try {
        return c.json(await deps.registry.apply(b.services, { owner: b.owner, dryRun: b.dryRun, by: `${by(c)}:${b.owner}` }), 200);
      } catch (e) {
        return unavailable(c, e, 'apply');
      }
    },
  );

  app.openapi(
    createRoute({ method: 'get', path: '/v1/registry/version', responses: { 200: json(Version, 'The registry version and content hash.') } }),
    (c) => {
      const s = deps.registry.snapshot();
      return c.json({ version: s.version, hash: s.hash }, 200);
    },
  );
  return app;
}
