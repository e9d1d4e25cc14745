/**
 * `node dist/runtime/control-plane/main.js` (or `tsx runtime/control-plane/main.ts`): the control
 * plane as its own process: `/authz` (DECISION_ADDR), gRPC ext_authz (DECISION_GRPC_ADDR),
 * management (MGMT_ADDR) and, when
 * AGENT_IDP_URL is set, the forward proxy and approval queue (EGRESS_PROXY_ADDR); with
 * MCP_GATEWAY_ADDR, the MCP gateway on a listener of its own (runtime/mcp/listener.ts). Store from
 * REGISTRY_BACKEND / REGISTRY_DB_URL / REGISTRY_DATA_DIR. The registry starts as the store has
 * it; producers (the management API, the operator) apply the entries.
 */
import { BRAND } from '../lib/brand.js';
import type { Config } from '../lib/config.js';
import { isMain, runUntilSignal, type Closable } from '../lib/process.js';
import { createReadiness } from '../lib/readiness.js';
import { initTracing, shutdownTracing } from '../lib/tracing.js';
import { openStore } from '../store/factory.js';
import { listenerDeadline } from '../lib/http.js';
import { createUpstreamSecrets } from '../lib/upstream-secrets.js';
import { createMcpGateway } from '../mcp/gateway.js';
import { startMcpListener, type McpListener } from '../mcp/listener.js';
import { holdForHuman } from './approvals/hold.js';
import { startControlPlaneWithEgress, type RunningWithEgress } from './egress-gateway.js';
import { controlPlaneStoreOptions } from './server.js';

/** The MCP gateway deciding with this process's engine and holding calls in its approval queue. */
function startMcp(addr: string, run: RunningWithEgress, config: Config): Promise<McpListener> {
  const plane = run.cp.plane;
  return startMcpListener(
    addr,
    createMcpGateway({
      engine: plane.engine,
      authorizationServer: () => plane.identity?.tokens?.().issuer(),
      upstreamSecrets: createUpstreamSecrets(config.proxy.upstreamSecretsDir),
      hold: (req, signal) => holdForHuman(run.gateway.queue, req, signal),
    }),
    listenerDeadline(config.process),
  );
}

export async function startControlPlaneProcess(config: Config): Promise<Closable> {
  const tracing = initTracing(config.tracing, `${BRAND}-control-plane`);
  const store = await openStore(controlPlaneStoreOptions(config.controlPlane.store));
  try {
    const readiness = createReadiness();
    const started = readiness.gate('starting');
    const run = await startControlPlaneWithEgress({ store, config, readiness });
    let mcp: McpListener | undefined;
    try {
      if (config.proxy.mcpGatewayAddr) mcp = await startMcp(config.proxy.mcpGatewayAddr, run, config);
    } catch (e) {
      await run.close();
      throw e;
    }
    started();
    return {
      ports: { decision: run.cp.decisionPort, grpc: run.cp.grpcPort, mgmt: run.cp.mgmtPort, proxy: run.gateway.port, ...(mcp ? { mcp: mcp.port } : {}) },
      async close() {
        await mcp?.close();
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
