/**
 * The RFC 9728 metadata of services behind Envoy that opt in as OAuth protected resources (issue
 * 43 item 6: a registry entry's `oauthResource`), served by the management listener at
 * `GET /.well-known/oauth-protected-resource/services/{name}` (public): the document `/authz`
 * challenges name (decision/egress-challenge.ts, `MGMT_PUBLIC_URL`). `resource` is the entry's
 * `oauthResource`, `authorization_servers` the issuer the control plane follows, `scopes_supported`
 * the words of its `requireScope`. No such entry: 404; the issuer not read yet: 503.
 */
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import { resourceMetadata } from '../lib/protected-resource.js';
import { mgmtHook } from './mgmt-errors.js';
import { SERVICE_METADATA_PREFIX } from './decision/egress-challenge.js';
import type { Service } from './types.js';

const Metadata = z
  .object({
    resource: z.string(),
    authorization_servers: z.array(z.string()),
    bearer_methods_supported: z.array(z.string()),
    resource_name: z.string(),
    scopes_supported: z.array(z.string()).optional(),
  })
  .openapi('ProtectedResourceMetadata');
const OAuthError = z.object({ error: z.string(), error_description: z.string() });

export function resourceMetadataRoutes(o: { entry(name: string): Service | undefined; issuer(): string | undefined }): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: mgmtHook });
  app.openapi(
    createRoute({
      method: 'get',
      path: `${SERVICE_METADATA_PREFIX}{name}`,
      request: { params: z.object({ name: z.string() }) },
      responses: {
        200: { content: { 'application/json': { schema: Metadata } }, description: 'RFC 9728 metadata of a service that opts in (oauthResource).' },
        404: { content: { 'application/json': { schema: OAuthError } }, description: 'No such entry, or it does not opt in.' },
        503: { content: { 'application/json': { schema: OAuthError } }, description: 'The authorization server is not known yet.' },
      },
    }),
    (c) => {
      const name = c.req.valid('param').name;
      const e = o.entry(name);
      const noStore = { 'cache-control': 'no-store' };
      if (!e?.oauthResource)
        return c.json(
          { error: 'not_found', error_description: `no registry entry ${JSON.stringify(name)} is an OAuth protected resource (oauthResource)` },
          404,
          noStore,
        );
      const issuer = o.issuer();
      if (!issuer)
        return c.json(
          { error: 'temporarily_unavailable', error_description: 'the authorization server is not known yet (identity authority not reached)' },
          503,
          noStore,
        );
      return c.json(resourceMetadata({ resource: e.oauthResource, issuer, name: e.name, requireScope: e.requireScope }), 200, noStore);
    },
  );
  return app;
}
