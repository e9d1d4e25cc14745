/** Health, readiness, issuer discovery (did:web document, /v1/issuer) and revocation. */
import { subApi } from '../lib/api.js';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { ApiError } from '../lib/errors.js';
import type { IdentityContext } from './context.js';
import { issuerDidDocument, ed25519FromMultibase } from './did.js';
import { DEFAULT_LIST, identityRepo } from './repo.js';
import { body, err, errors, json, RevocationListSchema, RevokedSchema, RevokeSchema } from './schemas.js';

const StatusSchema = z.object({ status: z.string() });
const ListParam = z.object({
  list: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9._-]+$/)
    .openapi({ param: { name: 'list', in: 'path' } }),
});

/** JSON with a weak ETag; a matching If-None-Match answers 304 (the client polls this ~4x/s). */
export function conditional(c: Context, etag: string, payload: () => Promise<unknown>) {
  c.header('ETag', etag);
  c.header('Cache-Control', 'no-cache');
  const inm = c.req.header('if-none-match');
  if (inm && inm.split(',').some((t) => t.trim() === etag)) return Promise.resolve(c.body(null, 304));
  return payload().then((p) => c.json(p as object, 200));
}

export function discoveryRoutes(ctx: IdentityContext, ready: () => boolean): OpenAPIHono {
  const app = subApi();
  app.openapi(createRoute({ method: 'get', path: '/healthz', tags: ['health'], summary: 'Liveness', responses: { 200: json(StatusSchema) } }), (c) =>
    c.json({ status: 'ok' }, 200),
  );
  app.openapi(
    createRoute({
      method: 'get',
      path: '/readyz',
      tags: ['health'],
      summary: 'Readiness: migrations applied and issuer key loaded',
      responses: { 200: json(StatusSchema), 503: json(StatusSchema, 'Not ready') },
    }),
    (c) => (ready() ? c.json({ status: 'ready' }, 200) : c.json({ status: 'not ready' }, 503)),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/.well-known/did.json',
      tags: ['discovery'],
      summary: 'Issuer did:web DID document (Ed25519VerificationKey2020, publicKeyMultibase)',
      responses: { 200: json(z.record(z.string(), z.unknown())), 503: errors[503] },
    }),
    (c) => {
      const k = ctx.issuer();
      return c.json(issuerDidDocument(k.did, ed25519FromMultibase(k.publicMultibase)), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/issuer',
      tags: ['discovery'],
      summary: 'Issuer DID and public key',
      responses: { 200: json(z.object({ issuerDid: z.string(), issuerPubMultibase: z.string() })), 503: errors[503] },
    }),
    (c) => {
      const k = ctx.issuer();
      return c.json({ issuerDid: k.did, issuerPubMultibase: k.publicMultibase }, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/revoke',
      tags: ['revocation'],
      summary: 'Revoke a credential we issued by its jti (idempotent)',
      request: { body: body(RevokeSchema) },
      responses: { 200: json(RevokedSchema), 404: err('No credential with that jti was issued here'), ...errors },
    }),
    async (c) => {
      const { vcJti } = c.req.valid('json');
      const repo = identityRepo(ctx.store);
      if (!(await repo.credentialExists(vcJti))) throw new ApiError(404, 'unknown_credential', `no credential ${JSON.stringify(vcJti)} was issued here`);
      await repo.revoke(vcJti, ctx.now());
      ctx.verifyIndex?.noteRevoked(vcJti); // at once here; other replicas through the change feed
      await ctx.changes?.settled(); // answer once every replica refuses it
      return c.json({ revoked: true as const, vcJti }, 200);
    },
  );

  const notModified = { description: 'Not modified (If-None-Match matched the ETag)' };

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/revocations',
      tags: ['revocation'],
      summary: 'Every revoked jti, oldest first (ETag / If-None-Match supported)',
      responses: { 200: json(RevocationListSchema), 304: notModified, ...errors },
    }),
    async (c) => {
      const repo = identityRepo(ctx.store);
      const etag = `W/"${await repo.revocationVersion()}"`;
      return conditional(c, etag, async () => ({ revoked: await repo.revokedList() })) as never;
    },
  );

  const statusHandler = async (c: Context, list: string) => {
    const repo = identityRepo(ctx.store);
    const etag = `W/"${await repo.revocationVersion(list)}"`;
    return conditional(c, etag, async () => ({ revoked: await repo.revokedList(list) }));
  };

  app.openapi(
    createRoute({
      method: 'get',
      path: '/status/{list}',
      tags: ['revocation'],
      summary: 'Revoked jtis of one status list (credentials point here via credentialStatus)',
      request: { params: ListParam },
      responses: { 200: json(RevocationListSchema), 304: notModified, ...errors },
    }),
    async (c) => statusHandler(c, c.req.valid('param').list) as never,
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/status',
      tags: ['revocation'],
      summary: `The default status list ("${DEFAULT_LIST}")`,
      responses: { 200: json(RevocationListSchema), 304: notModified, ...errors },
    }),
    async (c) => statusHandler(c, DEFAULT_LIST) as never,
  );
  return app;
}
