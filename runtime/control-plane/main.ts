/**
 * `node dist/runtime/control-plane/main.js` (or `tsx runtime/control-plane/main.ts`): the control
 * plane as its own process: `/authz` (DECISION_ADDR), gRPC ext_authz (DECISION_GRPC_ADDR),
 * management (MGMT_ADDR) and, when
 * AGENT_IDP_URL is set, the forward proxy and approval queue (EGRESS_PROXY_ADDR). Store from
 * REGISTRY_BACKEND / REGISTRY_DB_URL / REGISTRY_DATA_DIR. The registry starts as the store has
 * it; producers (the management API, the operator) apply the entries.
 */
import { BRAND } from '../lib/brand.js';
import type { Config } from '../lib/config.js';
import { isMain, runUntilSignal, type Closable } from '../lib/process.js';
import { createReadiness } from '../lib/readiness.js';
import { initTracing, shutdownTracing } from '../lib/tracing.js';
import { openStore } from '../store/factory.js';
import { startControlPlaneWithEgress } from './egress-gateway.js';
import { controlPlaneStoreOptions } from './server.js';

export async function startControlPlaneProcess(config: Config): Promise<Closable> {
  const tracing = initTracing(config.tracing, `${BRAND}-control-plane`);
  const store = await openStore(controlPlaneStoreOptions(config.controlPlane.store));
  try {
    const readiness = createReadiness();
    const started = readiness.gate('starting');
    const run = await startControlPlaneWithEgress({ store, config, readiness });
    started();
    return {
      ports: { decision: run.cp.decisionPort, grpc: run.cp.grpcPort, mgmt: run.cp.mgmtPort, proxy: run.gateway.port },
      async close() {
        await run.close();
        await store.close();
        if (tracing) await shutdownTracing();
      },
    };
  } catch (e) {
    await store.close();
    throw e;
  }
}

if (isMain(import.meta.url)) void runUntilSignal('control-plane', (config) => startControlPlaneProcess(config));
