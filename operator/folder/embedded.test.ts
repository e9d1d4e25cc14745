import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createRegistry } from '../../runtime/control-plane/registry/index.js';
import { createIdentityAuthority } from '../../runtime/identity/server.js';
import { openTestPglite } from '../../runtime/store/testing.js';
import { inProcessIdentity } from '../ports.js';
import { loadConfig } from '../../runtime/lib/settings.js';
import { EXAMPLES_DIR, policyFolderConfig, seedExampleDirectory, startPolicyFolder } from './embedded.js';

const folderOf = (env: Record<string, string>) => {
  const c = loadConfig(env);
  return policyFolderConfig(c.allInOne, c.auth);
};

describe('policy folder as npm start runs it', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'writ-embedded-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('WRIT_POLICY_DIR names the folder (checked at start); unset: the examples unless WRIT_EXAMPLES=false', () => {
    expect(folderOf({})).toEqual({ dir: EXAMPLES_DIR, examples: true });
    expect(folderOf({ WRIT_EXAMPLES: 'false' })).toBeUndefined();
    expect(folderOf({ WRIT_POLICY_DIR: tmp, WRIT_EXAMPLES: 'false' })).toEqual({ dir: tmp, examples: false });
    expect(() => folderOf({ WRIT_POLICY_DIR: join(tmp, 'missing') })).toThrow(/WRIT_POLICY_DIR must name a folder/);
  });

  it('the examples load with their directory seeded once; governed agents reach their wanted state', async () => {
    const store = await openTestPglite();
    const registry = await createRegistry(store);
    const authority = createIdentityAuthority({ store, config: loadConfig({}) });
    try {
      const src = await startPolicyFolder({ dir: EXAMPLES_DIR, examples: true }, { registry, authority }, { rescanMs: 0 });
      await src.close();
      expect(registry.list()).toHaveLength(10);
      const agent = (await (await authority.app.request('/v1/governance/agents/research-agent')).json()) as { status: string };
      expect(agent.status).toBe('active');
      // A second start does not sync the seed again (the tenant has employees now).
      expect(await seedExampleDirectory(inProcessIdentity(authority.app))).toBe(false);
    } finally {
      await authority.close();
      await registry.close();
      await store.close();
    }
  }, 120_000); // a fresh PGlite alone takes tens of seconds on a loaded 2-core machine
});
