/**
 * Tests: a control plane with its forward proxy, on a fresh test PGlite, following a test identity
 * authority (`openBed`) over HTTP, with `entries` in its registry (the test puts them in the
 * authority's, `bed.services`, where its order needs them).
 */
import { loadConfig } from '../lib/settings.js';
import type { OAuthBed } from '../identity/oauth/oauth-testing.js';
import { openTestPglite } from '../store/testing.js';
import { startControlPlaneWithEgress, type RunningWithEgress } from './egress-gateway.js';
import type { Service } from './types.js';

export interface FollowingPlane {
  run: RunningWithEgress;
  /** Closes the plane, then its store. */
  close(): Promise<void>;
}

/** `env`: more control-plane settings (e.g. MGMT_PUBLIC_URL). */
export async function startFollowingPlane(bed: OAuthBed, entries: Service[], env: Record<string, string> = {}): Promise<FollowingPlane> {
  const store = await openTestPglite();
  const run = await startControlPlaneWithEgress({
    store,
    config: loadConfig({ ...env, AGENT_IDP_URL: `http://127.0.0.1:${bed.port}` }),
    decisionAddr: '127.0.0.1:0',
    mgmtAddr: '127.0.0.1:0',
    proxyAddr: '127.0.0.1:0',
  });
  for (const e of entries) await run.cp.plane.registry.upsert(e);
  return {
    run,
    async close() {
      await run.close();
      await store.close();
    },
  };
}
