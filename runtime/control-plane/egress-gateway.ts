/**
 * Egress enforcement composition: the approval queue and the forward proxy, started against a
 * control plane's parts (the same registry, budgets, identity port, audit chain and metrics as
 * /authz). The plane's management app always has the approval routes (approvals/routes.ts); the
 * gateway hands them its queue through `plane.approvals` while it runs.
 *
 *   const cp = await startControlPlane({ store, config });
 *   const gw = await startEgressGateway({ plane: cp.plane, store, config });
 *   gw.port;            // the proxy port, undefined when disabled
 *   await gw.close();   // BEFORE cp.close(): held requests are expired and audited first,
 *   await cp.close();   // then the control plane flushes the audit chain
 *
 * or, in one call, `startControlPlaneWithEgress({ store, config, ... })`.
 *
 * The proxy and the queue start only when the plane has an identity port (AGENT_IDP_URL set, or
 * one injected): the proxy's credential is an agent VP. Without one the routes answer 503.
 *
 * Settings (the proxy slice): EGRESS_PROXY_ADDR (default `:9092`), EGRESS_APPROVAL_TIMEOUT (`120s`), EGRESS_REPLICA_ID,
 * EGRESS_CONNECT_PORTS (CONNECT ports open to hosts outside the registry, default `443`),
 * EGRESS_PROXY_HEADERS_TIMEOUT_MS, EGRESS_PROXY_MAX_HEADER_BYTES, EGRESS_PROXY_CONNECT_TIMEOUT_MS,
 * EGRESS_PROXY_IDLE_TIMEOUT_MS, EGRESS_PROXY_KEEPALIVE_TIMEOUT_MS.
 */
import type { Config } from '../lib/config.js';
import { DEFAULTS } from '../lib/settings.js';
import { listen } from '../lib/http.js';
import { createReadiness } from '../lib/readiness.js';
import { errMsg, logger } from '../lib/log.js';
import type { Store } from '../store/factory.js';
import { createApprovalQueue, type ApprovalQueue, type ApprovalQueueOptions } from './approvals/index.js';
import { createUpstreamSecrets, type UpstreamSecrets } from '../lib/upstream-secrets.js';
import { createForwardProxy, DEFAULT_LIMITS, type ForwardProxy, type ProxyLimits } from './proxy/index.js';
import { startControlPlane, type ControlPlaneParts, type ControlPlaneSlices, type RunningControlPlane, type StartOptions } from './server.js';

const log = logger('egress-gateway');

export interface EgressGatewayOptions {
  /** The control plane (or its parts) whose decision deps the proxy runs. */
  plane: ControlPlaneParts;
  /** The control plane's store (egress requests live there). */
  store: Store;
  /** The proxy slice (loadConfig's); default: every default. */
  config?: Pick<Config, 'proxy'>;
  /** Default EGRESS_PROXY_ADDR or `:9092`. */
  addr?: string;
  limits?: Partial<ProxyLimits>;
  /** The upstream credentials (`upstreamAuth`); default: read from UPSTREAM_SECRETS_DIR. */
  upstreamSecrets?: UpstreamSecrets;
  /** Queue overrides (tests): hold timeout, replica id, poll period, clock. */
  queue?: Partial<Pick<ApprovalQueueOptions, 'timeoutMs' | 'replicaId' | 'pollMs' | 'now'>>;
}

export interface EgressGateway {
  /** False when the plane has no identity port: no proxy, no queue, routes answer 503. */
  enabled: boolean;
  /** The proxy's bound port when enabled. */
  port?: number;
  queue?: ApprovalQueue;
  proxy?: ForwardProxy;
  /** Stops the proxy, expires and audits held requests, closes the queue. Call before the plane's close. */
  close(): Promise<void>;
}

/** Proxy limits from the EGRESS_PROXY_* settings (milliseconds and bytes). */
export function proxyLimitsOf(p: Pick<Config['proxy'], 'limits'>): ProxyLimits {
  return { ...DEFAULT_LIMITS, ...p.limits };
}

export async function startEgressGateway(o: EgressGatewayOptions): Promise<EgressGateway> {
  const proxyConfig = (o.config ?? DEFAULTS).proxy;
  if (!o.plane.identity) {
    log.info('forward proxy disabled: no identity authority (set AGENT_IDP_URL); egress-request routes answer 503');
    o.plane.approvals.queue = undefined;
    return { enabled: false, close: async () => {} };
  }
  // Validate every setting before opening anything.
  const addr = o.addr ?? proxyConfig.addr;
  const limits = { ...proxyLimitsOf(proxyConfig), ...o.limits };

  const queue = await createApprovalQueue({
    store: o.store,
    audit: o.plane.audit,
    timeoutMs: proxyConfig.approvalTimeoutMs,
    replicaId: proxyConfig.replicaId,
    maxPendingPerAgent: proxyConfig.maxPendingPerAgent,
    now: o.plane.now,
    ...o.queue,
  });
  o.plane.metrics.attach({ approvals: queue });
  const proxy = createForwardProxy({
    engine: o.plane.engine,
    queue: () => o.plane.approvals.queue,
    limits,
    metricsRegistry: o.plane.metrics.registry,
    upstreamSecrets: o.upstreamSecrets ?? createUpstreamSecrets(proxyConfig.upstreamSecretsDir),
  });
  o.plane.approvals.queue = queue;
  let port: number;
  try {
    port = await listen(proxy.server, addr);
  } catch (e) {
    o.plane.approvals.queue = undefined;
    await proxy.close(0);
    await queue.close();
    throw e;
  }
  log.info('forward proxy listening', { port, approvalTimeoutMs: queue.timeoutMs, connectPorts: [...o.plane.engine.policy.current().settings.connectPorts] });
  let closed = false;
  return {
    enabled: true,
    port,
    queue,
    proxy,
    async close() {
      if (closed) return;
      closed = true;
      // 1. No new connections. 2. Held requests are released: they stay pending for the agent's
      //    retry, and their handlers answer 403 (saying so) and append their audit rows. 3. In-flight exchanges get a grace period, then every
      //    socket is destroyed. The caller closes the plane afterwards, flushing the audit chain.
      proxy.stopAccepting();
      try {
        await queue.close();
      } catch (e) {
        log.error('approval queue close failed', { err: errMsg(e) });
      }
      await proxy.close();
      o.plane.approvals.queue = undefined;
      o.plane.metrics.attach({ approvals: undefined });
    },
  };
}

export interface RunningWithEgress {
  cp: RunningControlPlane;
  gateway: EgressGateway;
  /** Closes the gateway, then the control plane (audit flushed last). */
  close(): Promise<void>;
}

/** startControlPlane with the egress gateway started on its parts. */
export async function startControlPlaneWithEgress(
  opts: StartOptions & Pick<EgressGatewayOptions, 'limits' | 'queue'> & { proxyAddr?: string; config?: ControlPlaneSlices & Pick<Config, 'proxy'> },
): Promise<RunningWithEgress> {
  const readiness = opts.readiness ?? createReadiness();
  const proxyUp = readiness.gate('forward proxy not listening yet');
  const cp = await startControlPlane({ ...opts, readiness });
  let gateway: EgressGateway;
  try {
    gateway = await startEgressGateway({
      plane: cp.plane,
      store: opts.store,
      config: opts.config,
      addr: opts.proxyAddr,
      limits: opts.limits,
      queue: opts.queue,
    });
  } catch (e) {
    await cp.close();
    throw e;
  }
  proxyUp();
  return {
    cp,
    gateway,
    async close() {
      await gateway.close();
      await cp.close();
    },
  };
}
