/**
 * Test helper: the real registry and identity authority on one in-memory PGlite (no sockets),
 * with the example directory synced, as the applier, folder source and Kubernetes source tests
 * use them.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createRegistry, type Registry } from '../../runtime/control-plane/registry/index.js';
import type { AuditEntry } from '../../runtime/control-plane/types.js';
import { createIdentityAuthority, type IdentityAuthority } from '../../runtime/identity/server.js';
import { openTestPglite } from '../../runtime/store/testing.js';
import type { Store } from '../../runtime/store/factory.js';
import { inProcessIdentity, inProcessRegistry, type IdentityRequest, type RegistryPort } from '../ports.js';
import { loadConfig } from '../../runtime/lib/settings.js';

export const EXAMPLES_DIR = fileURLToPath(new URL('../../crds/examples/', import.meta.url));
export const SEED_FILE = fileURLToPath(new URL('../../crds/examples/seed/directory.json', import.meta.url));

export interface TestStack {
  store: Store;
  registry: Registry;
  registryPort: RegistryPort;
  authority: IdentityAuthority;
  identity: IdentityRequest;
  audits: AuditEntry[];
  close(): Promise<void>;
}

export async function openTestStack(): Promise<TestStack> {
  const store = await openTestPglite();
  const audits: AuditEntry[] = [];
  const registry = await createRegistry(store, { audit: { append: (e) => audits.push(e) } });
  const authority = createIdentityAuthority({ store, config: loadConfig({}) });
  await authority.whenReady();
  const identity = inProcessIdentity(authority.app);
  const res = await identity('/v1/directory/sync', { method: 'POST', headers: { 'content-type': 'application/json' }, body: readFileSync(SEED_FILE, 'utf8') });
  if (res.status !== 200) throw new Error(`seed sync: ${res.status} ${await res.text()}`);
  return {
    store,
    registry,
    registryPort: inProcessRegistry(registry),
    authority,
    identity,
    audits,
    async close() {
      await authority.close();
      await registry.close();
      await store.close();
    },
  };
}
