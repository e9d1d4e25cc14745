/** API-key routes (SPEC 4.5) plus list/get (safe views) and POST /v1/keys/verify. */
import { actorOf, holdsAll, principalOf } from '../../../lib/api-auth.js';
import { subApi } from '../../../lib/api.js';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { body, errorResponse, invalid, json, TenantId } from '../directory/http.js';
import { KEY_ENVS } from './secret.js';
import { keyService, scopeEscalation, type KeyService, type KeyServiceDeps } from './service.js';

const Scope = z.string().min(1).max(200).regex(/^\S+$/, 'no whitespace');
const Actor = z.string().min(1).max(320);

export const KeyRecordSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    env: z.string(),
    prefix: z.string(),
    masked: z.string(),
    last4: z.string(),
    scopes: z.array(z.string()),
    status: z.string(),
    tenantId: z.string().nullable(),
    createdBy: z.string().nullable(),
    createdAt: z.string(),
    lastUsedAt: z.string().nullable(),
    revokedAt: z.string().nullable(),
    revokedBy: z.string().nullable(),
    rotatedAt: z.string().nullable(),
    rotatedFrom: z.string().nullable(),
  })
  .openapi('ApiKey');
const Minted = z.object({ key: KeyRecordSchema, plaintext: z.string() }).openapi('ApiKeyMinted');

const CreateBody = z
  .object({
    name: z.string().min(1).max(200),
    env: z.enum(KEY_ENVS).default('test'),
    scopes: z.array(Scope).max(100).default([]),
    tenantId: TenantId.optional(),
    createdBy: Actor.optional(),
  })
  .openapi('ApiKeyCreate');
const VerifyBody = z.object({ key: z.string().min(1).max(512), scope: Scope.optional(), tenantId: TenantId.optional() }).openapi('ApiKeyVerify');
const VerifyOut = z
  .object({
    valid: z.boolean(),
    reason: z.enum(['ok', 'malformed', 'invalid_key', 'key_revoked', 'key_rotated', 'tenant_mismatch', 'scope_not_granted']),
    key: KeyRecordSchema.optional(),
  })
  .openapi('ApiKeyVerifyResult');

const IdParam = z.object({
  key_id: z
    .string()
    .min(1)
    .max(64)
    .openapi({ param: { name: 'key_id', in: 'path' } }),
});
const Guard = z.object({ tenant: TenantId.optional().openapi({ param: { name: 'tenant', in: 'query' } }) });

/** `svc`: the authority's one key service (shared with its API authentication), else a new one. */
export function keyRoutes(deps: KeyServiceDeps, svc: KeyService = keyService(deps)): OpenAPIHono {
  const app = subApi();

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/keys',
      tags: ['keys'],
      summary: 'Mint an API key; the plaintext is in this response only',
      request: { body: body(CreateBody) },
      responses: { 201: json(Minted, 'Key record and its plaintext (shown once)'), 403: errorResponse('A scope the caller does not hold'), ...invalid },
    }),
    async (c) => {
      const b = c.req.valid('json');
      const scopes = [...new Set(b.scopes)];
      if (!holdsAll(principalOf(c), scopes)) throw scopeEscalation('mint this key');
      return c.json(await svc.create({ ...b, scopes, createdBy: actorOf(c, b.createdBy) }), 201);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/keys',
      tags: ['keys'],
      summary: 'Key records (no secrets), newest first; every tenant when `tenant` is absent',
      request: { query: Guard },
      responses: { 200: json(z.array(KeyRecordSchema), 'Keys'), ...invalid },
    }),
    async (c) => c.json(await svc.list(c.req.valid('query').tenant), 200),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/keys/{key_id}',
      tags: ['keys'],
      summary: 'One key record (no secret)',
      request: { params: IdParam, query: Guard },
      responses: { 200: json(KeyRecordSchema, 'Key'), 404: errorResponse('Unknown key'), ...invalid },
    }),
    async (c) => c.json(await svc.get(c.req.valid('param').key_id, c.req.valid('query').tenant), 200),
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/keys/{key_id}/rotate',
      tags: ['keys'],
      summary: 'New secret (new record, rotatedFrom = this id); this key stops working at once',
      request: { params: IdParam, query: Guard, body: body(z.object({ by: Actor }).openapi('ApiKeyRotate')) },
      responses: {
        200: json(Minted, 'New key record and plaintext'),
        403: errorResponse('The key holds a scope the caller does not'),
        404: errorResponse('Unknown key'),
        409: errorResponse('Key not active'),
        ...invalid,
      },
    }),
    async (c) => {
      const p = principalOf(c);
      const may = (scopes: readonly string[]) => holdsAll(p, scopes);
      return c.json(await svc.rotate(c.req.valid('param').key_id, actorOf(c, c.req.valid('json').by), c.req.valid('query').tenant, may), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/keys/{key_id}/revoke',
      tags: ['keys'],
      summary: 'Revoke (idempotent); returns the key record',
      request: {
        params: IdParam,
        query: Guard,
        body: { required: false, content: { 'application/json': { schema: z.object({ by: Actor.optional() }).openapi('ApiKeyRevoke') } } },
      },
      responses: { 200: json(KeyRecordSchema, 'Revoked key'), 404: errorResponse('Unknown key'), ...invalid },
    }),
    async (c) => {
      const b = (c.req.valid('json') as { by?: string } | undefined) ?? {};
      return c.json(await svc.revoke(c.req.valid('param').key_id, actorOf(c, b.by), c.req.valid('query').tenant), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/keys/verify',
      tags: ['keys'],
      summary: 'Check a presented key (and optionally one scope); updates lastUsedAt',
      request: { body: body(VerifyBody) },
      responses: { 200: json(VerifyOut, 'Verification result (valid=false with a reason on any failure)'), ...invalid },
    }),
    async (c) => {
      const b = c.req.valid('json');
      return c.json(await svc.verify(b.key, { scope: b.scope, tenantId: b.tenantId }), 200);
    },
  );
  return app;
}
