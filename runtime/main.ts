/**
 * All-in-one Writ (the embedded default of `npm start`): every listener in one process, wired
 * together. One PGlite data folder serves both the control plane and the identity authority
 * unless REGISTRY_DB_URL / IDP_DB_URL (or the *_BACKEND settings) say otherwise.
 *
 *   identity authority  PORT (8090)       control plane  DECISION_ADDR (:9191), MGMT_ADDR (:8181),
 *                                                        DECISION_GRPC_ADDR (:9192, gRPC ext_authz)
 *   forward proxy       EGRESS_PROXY_ADDR (:9092)        model broker   BROKER_ADDR (:8080)
 *   egress gateway      EGRESS_GATEWAY_ADDR (:3128, asking this process's /authz over HTTP)
 *
 * AGENT_IDP_URL defaults to this process's identity authority, which turns on the regulated
 * delegation check and the forward proxy; the per-request identity calls (verify-presentation,
 * delegation check) are then made in process. The folder source (operator/folder) applies the
 * custom resources of WRIT_POLICY_DIR, or of crds/examples/ unless WRIT_EXAMPLES=false, and
 * follows their edits without a restart. BROKER_ENABLED=false leaves the broker
 * out; the broker's decision and usage URLs default to this process's listeners.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { BRAND, envName } from './lib/brand.js';
import { parseAddr, type Config, type Env } from './lib/config.js';
import { errMsg, logger } from './lib/log.js';
import { isMain, runUntilSignal } from './lib/process.js';
import { createReadiness } from './lib/readiness.js';
import { loadConfig } from './lib/settings.js';
import { initTracing, shutdownTracing } from './lib/tracing.js';
import { openStore, type Store, type StoreOptions } from './store/factory.js';
import { controlPlaneStoreOptions } from './control-plane/server.js';
import type { IdentityClient } from './control-plane/identity-client.js';
import { proxyLimitsOf, startControlPlaneWithEgress } from './control-plane/egress-gateway.js';
import { startGateway } from './egress-gateway/gateway.js';
import { startBroker } from './broker/server.js';
import { holdForHuman } from './control-plane/approvals/hold.js';
import { createMcpGateway } from './mcp/gateway.js';
import { localRegistry } from './identity/oauth/registry.js';
import { createUpstreamSecrets } from './lib/upstream-secrets.js';
import { createLocalDecisionClient } from './broker/decision-local.js';
import { deliverUsageLocally } from './broker/usage-local.js';
import { inProcessIdentity } from './identity/in-process.js';
import { startIdentityAuthority } from './identity/server.js';
import { policyFolderConfig, startPolicyFolder } from '../operator/folder/embedded.js';

const log = logger('main');
/** How long start waits for the identity authority's issuer key before starting the rest anyway. */
const ISSUER_WAIT_MS = 10_000;

export interface Writ {
  ports: { identity: number; decision: number; grpc: number; mgmt: number; gateway: number; proxy?: number; broker?: number };
  close(): Promise<void>;
}

interface Closer {
  name: string;
  close(): Promise<void>;
}

/** EGRESS_GATEWAY_ADDR; unset, `:3128`, or port 0 beside an ephemeral decision port (tests, benchmarks). */
function gatewayAddrOf(config: Config): string {
  if (config.proxy.gatewayAddrSet) return config.proxy.gatewayAddr;
  const d = parseAddr(config.controlPlane.decisionAddr);
  return d.port === 0 ? `${d.host.includes(':') ? `[${d.host}]` : d.host}:0` : config.proxy.gatewayAddr;
}

/**
 * With WRIT_API_AUTH=keys the components of this process call each other with WRIT_API_KEY, the
 * bootstrap key unless another is set; without either they could not: refuse to start.
 */
function ownAuth(auth: Config['auth']): Config['auth'] {
  if (auth.mode !== 'keys' || auth.apiKey) return auth;
  const own = envName('API_KEY');
  if (!auth.bootstrapKey) throw new Error(`${envName('API_AUTH')}=keys needs ${envName('BOOTSTRAP_ADMIN_KEY')} or ${own} in the all-in-one`);
  return { ...auth, apiKey: auth.bootstrapKey };
}

/** Starts every listener from `given` (default this process's environment); see startWritWith. */
export async function startWrit(given: Env = process.env): Promise<Writ> {
  return startWritWith(loadConfig(given));
}

/** Starts every listener, each given its slices; on any failure closes what already started and rethrows. */
export async function startWritWith(loaded: Config): Promise<Writ> {
  const config: Config = { ...loaded, auth: ownAuth(loaded.auth) };
  const aio = config.allInOne;
  const policy = policyFolderConfig(aio, config.auth);
  const closers: Closer[] = [];
  // /readyz (:8181) answers 200 only once everything below is up: every listener, the policy
  // folder's first apply, the audit chain held, the governance standing fetched once.
  const readiness = createReadiness();
  const started = readiness.gate('starting: not every listener is open, or the policy folder is not applied yet');
  // One tracer provider for every component of this process (closed last: spans flushed).
  if (initTracing(config.tracing, BRAND)) closers.push({ name: 'tracing', close: shutdownTracing });
  const closeAll = async () => {
    for (const c of closers.reverse()) {
      try {
        await c.close();
      } catch (e) {
        log.error('close failed', { part: c.name, err: errMsg(e) });
      }
    }
    closers.length = 0;
  };
  try {
    let shared: Store | undefined;
    if (aio.embeddedStore) {
      const opts: StoreOptions = { backend: 'pglite', dataDir: aio.dataDir };
      shared = await openStore(opts);
      closers.push({ name: 'store', close: () => shared!.close() });
    }
    const idp = await startIdentityAuthority({ store: shared, config });
    closers.push({ name: 'identity', close: () => idp.close() });
    // Its issuer key loaded before the control plane's first revocation poll asks it (that poll
    // failed at every start, with a warning); a key that will not load is retried and logged there.
    await Promise.race([idp.authority.whenReady().catch(() => {}), delay(ISSUER_WAIT_MS, undefined, { ref: false })]);

    const cpStore = shared ?? (await openStore(controlPlaneStoreOptions(config.controlPlane.store)));
    if (!shared) closers.push({ name: 'control-plane store', close: () => cpStore.close() });
    const idpUrl = aio.agentIdpUrl;
    const controlPlane = { ...config.controlPlane, idpUrl: idpUrl ?? `http://127.0.0.1:${idp.port}` };
    // The forward proxy and the approval queue ride on the control plane (they start because
    // AGENT_IDP_URL is set); they close before it so held requests are expired and audited.
    // This process's authority answers verify-presentation and delegation checks in process (no
    // loopback request), unless AGENT_IDP_URL names another one.
    const run = await startControlPlaneWithEgress({
      store: cpStore,
      config: { ...config, controlPlane },
      readiness,
      ...(idpUrl ? {} : { localIdentity: inProcessIdentity(idp.authority) }),
    });
    closers.push({ name: 'control plane', close: () => run.close() });
    const cp = run.cp;
    // The token endpoint reads this process's registry snapshot (IDP_REGISTRY_URL unset).
    if (!config.identity.registryUrl)
      idp.authority.useRegistry(
        localRegistry(
          (name) => cp.plane.registry.get(name),
          () => cp.plane.registry.list(),
        ),
      );

    if (policy) {
      const folder = await startPolicyFolder(policy, { registry: cp.plane.registry, authority: idp.authority });
      closers.push({ name: 'policy folder', close: () => folder.close() });
    }
    // The governance standing fetched now (after the folder registered and activated its governed
    // agents): decisions see it from the first request, not a poll later.
    await (cp.plane.identity as Partial<IdentityClient> | undefined)?.pollStanding?.();

    // The broker asks this process's decision engine and records its usage in process, unless
    // BROKER_AUTHZ_URL or BROKER_USAGE_URL names another control plane.
    const authzUrl = aio.brokerAuthzUrl;
    const usageUrl = aio.brokerUsageUrl;
    const broker = aio.brokerEnabled
      ? await startBroker({
          settings: config,
          authzUrl: authzUrl ?? `http://127.0.0.1:${cp.decisionPort}/authz`,
          ...(authzUrl ? {} : { localDecisions: (timeoutMs: number) => createLocalDecisionClient(cp.plane.engine, { timeoutMs }) }),
          usageUrl: usageUrl ?? `http://127.0.0.1:${cp.mgmtPort}/v1/usage`,
          ...(usageUrl ? {} : { localUsage: deliverUsageLocally(cp.plane.recordUsage) }),
          // The MCP gateway decides with this process's engine and holds calls in its approval queue.
          mcp: createMcpGateway({
            engine: cp.plane.engine,
            // RFC 9728: each /mcp/{service} names the authorization server this control plane follows.
            authorizationServer: () => cp.plane.identity?.tokens?.().issuer(),
            upstreamSecrets: createUpstreamSecrets(config.proxy.upstreamSecretsDir),
            ...(aio.brokerPublicUrl ? { publicUrl: aio.brokerPublicUrl } : {}),
            hold: (req, signal) => holdForHuman(run.gateway.queue, req, signal),
          }),
        })
      : undefined;
    if (broker) closers.push({ name: 'broker', close: () => broker.close() });

    // The egress gateway (runtime/egress-gateway/) against this process's own /authz, over HTTP as
    // it runs in a cluster.
    const gateway = await startGateway({
      authzUrl: `http://127.0.0.1:${cp.decisionPort}/authz`,
      addr: gatewayAddrOf(config),
      authzTimeoutMs: config.proxy.gatewayAuthzTimeoutMs,
      limits: proxyLimitsOf(config.proxy),
      readiness,
    });
    closers.push({ name: 'egress gateway', close: () => gateway.close() });

    const ports: Writ['ports'] = { identity: idp.port, decision: cp.decisionPort, grpc: cp.grpcPort, mgmt: cp.mgmtPort, gateway: gateway.port };
    if (run.gateway.port !== undefined) ports.proxy = run.gateway.port;
    if (broker) ports.broker = broker.port;
    readiness.watch(() => (idp.authority.ready() ? undefined : 'identity authority not ready (issuer key not loaded)'));
    started();
    log.info('writ is up', { ...ports, agentIdpUrl: controlPlane.idpUrl });
    return { ports, close: closeAll };
  } catch (e) {
    await closeAll();
    throw e;
  }
}

if (isMain(import.meta.url)) void runUntilSignal('main', (config) => startWritWith(config));
