/**
 * Seam between the identity authority's server (agents, credentials, delegations, revocation)
 * and its enterprise routes (directory, identity resolution, governance, authority delegations,
 * cascade, API keys, preview). The server calls this once while building its app.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { Store } from '../../store/factory.js';

export interface EnterpriseContext {
  store: Store;
  /** Clock in epoch milliseconds; tests pass a fake. */
  now: () => number;
  env: Record<string, string | undefined>;
}

export function registerEnterpriseRoutes(_app: OpenAPIHono, _ctx: EnterpriseContext): void {
  // Filled in by the enterprise capability (directory, governance, authority, keys, preview).
}
