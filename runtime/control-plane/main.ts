/**
 * `node dist/runtime/control-plane/main.js` (or `tsx runtime/control-plane/main.ts`): the control
 * plane as its own process: `/authz` (DECISION_ADDR), management (MGMT_ADDR) and, when
 * AGENT_IDP_URL is set, the forward proxy and approval queue (EGRESS_PROXY_ADDR). Store from
 * REGISTRY_BACKEND / REGISTRY_DB_URL / REGISTRY_DATA_DIR. With WRIT_EXAMPLES=true the example
 * services (runtime/examples/registry.yaml) are applied under owner `examples`.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { envName } from '../lib/brand.js';
import { bool, type Env } from '../lib/config.js';
import { logger } from '../lib/log.js';
import { isMain, runUntilSignal, type Closable } from '../lib/process.js';
import { openStore } from '../store/factory.js';
import { startControlPlaneWithEgress } from './egress-gateway.js';
import { controlPlaneStoreOptions } from './server.js';

const log = logger('control-plane');
const EXAMPLES = fileURLToPath(new URL('../examples/registry.yaml', import.meta.url));

export async function startControlPlaneProcess(env: Env = process.env): Promise<Closable> {
  const examples = bool(env, envName('EXAMPLES'), false);
  const store = await openStore(controlPlaneStoreOptions(env));
  try {
    const run = await startControlPlaneWithEgress({ store, env });
    if (examples) {
      const doc = (parseYaml(readFileSync(EXAMPLES, 'utf8')) ?? {}) as { services?: unknown[] };
      const r = await run.cp.plane.registry.apply(doc.services ?? [], { owner: 'examples' });
      log.info('examples applied', { created: r.created.length, unchanged: r.unchanged.length, conflicts: r.conflicts, invalid: r.invalid });
    }
    return {
      ports: { decision: run.cp.decisionPort, mgmt: run.cp.mgmtPort, proxy: run.gateway.port },
      async close() {
        await run.close();
        await store.close();
      },
    };
  } catch (e) {
    await store.close();
    throw e;
  }
}

if (isMain(import.meta.url)) void runUntilSignal('control-plane', () => startControlPlaneProcess());
