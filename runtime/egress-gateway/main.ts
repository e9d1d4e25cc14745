/**
 * `node dist/runtime/egress-gateway/main.js` (`docker run writ egress-gateway`): the egress
 * gateway as its own process (gateway.ts): EGRESS_GATEWAY_ADDR (`:3128`), asking
 * EGRESS_GATEWAY_AUTHZ_URL (the control plane's `/authz`) within EGRESS_GATEWAY_AUTHZ_TIMEOUT_MS.
 */
import { positiveInt, str, type Env } from '../lib/config.js';
import { isMain, runUntilSignal, type Closable } from '../lib/process.js';
import { proxyLimitsFromEnv } from '../control-plane/egress-gateway.js';
import { DEFAULT_GATEWAY_ADDR, startGateway } from './gateway.js';

export async function startEgressGatewayProcess(env: Env = process.env): Promise<Closable> {
  const gw = await startGateway({
    authzUrl: str(env, 'EGRESS_GATEWAY_AUTHZ_URL', 'http://127.0.0.1:9191/authz'),
    addr: str(env, 'EGRESS_GATEWAY_ADDR', DEFAULT_GATEWAY_ADDR),
    authzTimeoutMs: positiveInt(env, 'EGRESS_GATEWAY_AUTHZ_TIMEOUT_MS', 2000),
    limits: proxyLimitsFromEnv(env),
  });
  return { ports: { gateway: gw.port }, close: () => gw.close() };
}

if (isMain(import.meta.url)) void runUntilSignal('egress-gateway', () => startEgressGatewayProcess());
