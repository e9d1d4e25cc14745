/**
 * Seam between the identity authority's server (agents, credentials, delegations, revocation)
 * and its enterprise routes (directory, identity resolution, governance, authority delegations,
 * cascade, API keys, preview). The server calls this once while building its app.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { subApi } from '../../lib/api.js';
import type { Store } from '../../store/factory.js';
import type { ChangeFeed } from '../change-feed.js';
import { directoryRoutes, SYNC_BODY_LIMIT } from './directory/routes.js';
import { runCascade } from './governance/cascade.js';
import { governanceRoutes } from './governance/routes.js';
import { createStandingView, standingRoutes } from './governance/standing.js';
import { identityRoutes } from './identity/routes.js';
import { keyRoutes } from './keys/routes.js';
import { previewRoutes } from './preview/routes.js';
import type { KeyService } from './keys/service.js';
import type { IdentityConfig } from '../../lib/config.js';
import { DEFAULTS } from '../../lib/settings.js';

export { SYNC_BODY_LIMIT };

export interface EnterpriseContext {
  store: Store;
  /** Clock in epoch milliseconds; tests pass a fake. */
  now: () => number;
  /** The identity slice (issuer map, API-key pepper, audit roles); default: every default. */
  config?: Pick<IdentityConfig, 'issuerMap' | 'apiKeyPepper' | 'auditRoles'>;
  /** Committed identity changes (API-key cache currency); absent: every key verify reads the store. */
  changes?: ChangeFeed;
  /** The authority's key service (shared with its API authentication); absent: the routes make one. */
  keys?: KeyService;
}

/**
 * Largest request body an enterprise route accepts, for servers whose global body limit must
 * make room: the SCIM sync takes up to SYNC_BODY_LIMIT, everything else the API default.
 */
export function enterpriseBodyLimit(path: string): number | undefined {
  return path === '/v1/directory/sync' ? SYNC_BODY_LIMIT : undefined;
}

/** The enterprise routes as one sub-app, composed into the identity authority with `app.route('/', ...)`. */
export function enterpriseRoutes(ctx: EnterpriseContext): OpenAPIHono {
  const app = subApi();
  const config = ctx.config ?? DEFAULTS.identity;
  app.route('/', directoryRoutes({ db: ctx.store.db, now: ctx.now, cascade: runCascade, changes: ctx.changes }));
  app.route('/', governanceRoutes({ db: ctx.store.db, now: ctx.now, changes: ctx.changes }));
  app.route('/', standingRoutes({ db: ctx.store.db, view: ctx.changes && createStandingView(ctx.store.db, ctx.changes) }));
  app.route('/', identityRoutes({ db: ctx.store.db, now: ctx.now, issuerMap: config.issuerMap }));
  app.route('/', keyRoutes({ db: ctx.store.db, now: ctx.now, pepper: config.apiKeyPepper, changes: ctx.changes }, ctx.keys));
  app.route('/', previewRoutes({ db: ctx.store.db, auditRoles: config.auditRoles }));
  return app;
}
