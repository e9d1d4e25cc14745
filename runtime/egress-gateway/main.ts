/**
 * `node dist/runtime/egress-gateway/main.js` (`docker run writ egress-gateway`): the egress
 * gateway as its own process (gateway.ts): EGRESS_GATEWAY_ADDR (`:3128`), asking
 * EGRESS_GATEWAY_AUTHZ_URL (the control plane's `/authz`) within EGRESS_GATEWAY_AUTHZ_TIMEOUT_MS.
 */
import type { Config } from '../lib/config.js';
import { isMain, runUntilSignal, type Closable } from '../lib/process.js';
import { proxyLimitsOf } from '../control-plane/egress-gateway.js';
import { startGateway } from './gateway.js';

export async function startEgressGatewayProcess(config: Pick<Config, 'proxy'>): Promise<Closable> {
  const gw = await startGateway({
    authzUrl: config.proxy.gatewayAuthzUrl,
    addr: config.proxy.gatewayAddr,
    authzTimeoutMs: config.proxy.gatewayAuthzTimeoutMs,
    limits: proxyLimitsOf(config.proxy),
  });
  return { ports: { gateway: gw.port }, close: () => gw.close() };
}

if (isMain(import.meta.url)) void runUntilSignal('egress-gateway', (config) => startEgressGatewayProcess(config));
