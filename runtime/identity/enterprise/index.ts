/**
 * Seam between the identity authority's server (agents, credentials, delegations, revocation)
 * and its enterprise routes (directory, identity resolution, governance, authority delegations,
 * cascade, API keys, preview). The server calls this once while building its app.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { Store } from '../../store/factory.js';
import type { ChangeFeed } from '../change-feed.js';
import { registerDirectoryRoutes, SYNC_BODY_LIMIT } from './directory/routes.js';
import { runCascade } from './governance/cascade.js';
import { registerGovernanceRoutes } from './governance/routes.js';
import { registerStandingRoute } from './governance/standing.js';
import { registerIdentityRoutes } from './identity/routes.js';
import { registerKeyRoutes } from './keys/routes.js';
import { registerPreviewRoutes } from './preview/routes.js';

export { SYNC_BODY_LIMIT };

export interface EnterpriseContext {
  store: Store;
  /** Clock in epoch milliseconds; tests pass a fake. */
  now: () => number;
  env: Record<string, string | undefined>;
  /** Committed identity changes (API-key cache currency); absent: every key verify reads the store. */
  changes?: ChangeFeed;
}

/**
 * Largest request body an enterprise route accepts, for servers whose global body limit must
 * make room: the SCIM sync takes up to SYNC_BODY_LIMIT, everything else the API default.
 */
export function enterpriseBodyLimit(path: string): number | undefined {
  return path === '/v1/directory/sync' ? SYNC_BODY_LIMIT : undefined;
}

export function registerEnterpriseRoutes(app: OpenAPIHono, ctx: EnterpriseContext): void {
  registerDirectoryRoutes(app, { db: ctx.store.db, now: ctx.now, cascade: runCascade });
  registerGovernanceRoutes(app, { db: ctx.store.db, now: ctx.now });
  registerStandingRoute(app, { db: ctx.store.db });
  registerIdentityRoutes(app, { db: ctx.store.db, now: ctx.now, env: ctx.env });
  registerKeyRoutes(app, { db: ctx.store.db, now: ctx.now, env: ctx.env, changes: ctx.changes });
  registerPreviewRoutes(app, { db: ctx.store.db, env: ctx.env });
}
