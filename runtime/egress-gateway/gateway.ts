/**
 * The egress gateway (SPEC 1, 4.8): a dedicated forward proxy on `:3128` that asks `/authz`
 * for every request (decide.ts) and otherwise is the control plane's forward proxy, the same
 * pieces (runtime/control-plane/proxy/: request-target parsing, hop-by-hop header rewriting, the
 * dial guard, CONNECT tunnels spliced as raw sockets, limits): `http://` by absolute URI,
 * `https://` by CONNECT then a raw tunnel, TLS never terminated. It holds no state and no
 * database, so the data plane scales apart from the control plane.
 *
 *   const gw = await startGateway({ authzUrl, addr: ':3128' });
 *
 * `/healthz` (liveness) and `/readyz` are answered on the same listener for origin-form requests:
 * ready once listening, and not while the last `/authz` call found the decision point unreachable
 * (every request is then denied).
 */
import { listen } from '../lib/http.js';
import { logger } from '../lib/log.js';
import { createReadiness, readyzAnswer, type Readiness } from '../lib/readiness.js';
import { createForwardProxy, type ForwardProxy, type ProxyLimits } from '../control-plane/proxy/index.js';
import { authzDecider } from './decide.js';

const log = logger('egress-gateway');

export const DEFAULT_GATEWAY_ADDR = ':3128';

export interface GatewayOptions {
  /** The decision point, e.g. `http://127.0.0.1:9191/authz`. */
  authzUrl: string;
  addr: string;
  /** Per-call `/authz` timeout (default 2000 ms). */
  authzTimeoutMs?: number;
  limits?: Partial<ProxyLimits>;
  /** Readiness to add the gateway's gate and watch to (default its own). */
  readiness?: Readiness;
}

export interface Gateway {
  port: number;
  proxy: ForwardProxy;
  readiness: Readiness;
  close(): Promise<void>;
}

export async function startGateway(o: GatewayOptions): Promise<Gateway> {
  const readiness = o.readiness ?? createReadiness();
  const listening = readiness.gate('egress gateway not listening yet');
  let reachable = true;
  readiness.watch(() => (reachable ? undefined : `decision point ${o.authzUrl} unreachable: every request is denied`));
  const decide = authzDecider({ url: o.authzUrl, timeoutMs: o.authzTimeoutMs ?? 2000, onReach: (r) => (reachable = r) });
  const proxy = createForwardProxy({ decide, limits: o.limits, readyz: () => readyzAnswer(readiness) });
  const port = await listen(proxy.server, o.addr);
  listening();
  log.info('egress gateway listening', { port, authz: o.authzUrl });
  return {
    port,
    proxy,
    readiness,
    async close() {
      readiness.gate('egress gateway closing');
      await proxy.close();
    },
  };
}
