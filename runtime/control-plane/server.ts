/**
 * Composition of the control plane: registry snapshot + audit chain (store-backed), budget
 * meters, metrics, the decision deps (identity authority, workforce OIDC, OPA veto) and the
 * listeners: `/authz` on DECISION_ADDR (bare node:http), Envoy's gRPC ext_authz on
 * DECISION_GRPC_ADDR (grpc/) and the management app on MGMT_ADDR.
 *
 * Configured by its slices (`ControlPlaneConfig`: AGENT_IDENTITY_MODE, AGENT_IDP_URL, OPA_URL,
 * OIDC_*, DECISION_ADDR, ...; the audit, auth and process slices; the proxy's CONNECT ports), built
 * by `loadConfig` at the entry point. See README.md.
 */
import type http from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import type { OpenAPIHono } from '@hono/zod-openapi';
import { parseAddr, type Config, type StoreSetting } from '../lib/config.js';
import { apiAuth, authOf, credentialCheck, principalOf } from '../lib/api-auth.js';
import { DEFAULTS } from '../lib/settings.js';
import { close as closeServer, listen, listenerDeadline } from '../lib/http.js';
import { errMsg, logger } from '../lib/log.js';
import type { Store, StoreOptions } from '../store/factory.js';
import { auditHealth, auditOptions, auditUnable, openAuditChain, registerAuditMetrics, type AuditChain } from './audit/index.js';
import { createReadiness, type Readiness } from '../lib/readiness.js';
import { createAuthzServer } from './authz-server.js';
import { createExtAuthzGrpcServer } from './grpc/server.js';
import { registerBudgetMetrics } from './budget/gauges.js';
import { createBudgetLedger } from './budget/ledger.js';
import { createSharedBudgetMeter, type SharedBudgetMeter } from './budget/meter.js';
import type { Reservations } from './budget/ports.js';
import { createReservations, UnknownReservation } from './budget/reservations.js';
import { budgetRoutes } from './budget/routes.js';
import { createDecisionEngine, type DecisionEngine } from './decision/engine.js';
import { createPolicySource } from './decision/policy.js';
import { decisionRoutes } from './decision/routes.js';
import type { DecisionSettings, IdentityMode } from './decision/types.js';
import { callTicketKey, createCallTickets } from './tickets.js';
import { trustedPeers } from '../lib/net.js';
import type { IdentityPort } from './identity-port.js';
import { createIdentityClient, type IdentityClient, type IdentityClientOptions, type LocalIdentity } from './identity-client.js';
import { approvalRoutes, type ApprovalQueue } from './approvals/index.js';
import { createMetrics, type ControlPlaneMetrics } from './metrics.js';
import { createMgmtApp } from './mgmt.js';
import { resourceMetadataRoutes } from './resource-metadata.js';
import { createOidcVerifier, oidcOf } from '../lib/oidc.js';
import { createOpaClient, type OpaClient } from './opa.js';
import { portalApp } from '../portal/index.js';
import { createRegistry, type Registry } from './registry/index.js';
import type { UsageReport } from './types.js';

const log = logger('control-plane');

/**
 * Store options of the control plane from REGISTRY_BACKEND (`postgres`, `pglite`, `memory`),
 * REGISTRY_DB_URL and REGISTRY_DATA_DIR (PGlite folder, default `.data/control-plane`).
 * A URL without a backend means postgres; neither means PGlite in the data folder.
 */
export function controlPlaneStoreOptions(s: StoreSetting): StoreOptions {
  if (s.backend === 'postgres' && !s.url) throw new Error('REGISTRY_BACKEND=postgres needs REGISTRY_DB_URL');
  return { ...s };
}

/** The slices the control plane reads: its own, the audit chain's, the API auth, the listeners' deadline and the proxy's CONNECT ports. */
export type ControlPlaneSlices = Pick<Config, 'controlPlane' | 'audit' | 'auth' | 'process'> & { proxy: Pick<Config['proxy'], 'connectPorts'> };

/** The plane's parts: what the egress gateway (egress-gateway.ts) starts the forward proxy on. */
export interface ControlPlaneParts {
  registry: Registry;
  audit: AuditChain;
  budget: SharedBudgetMeter;
  /** The broker's reserve-then-settle of model calls (budget/reservations.ts). */
  reservations: Reservations;
  metrics: ControlPlaneMetrics;
  /** The decision engine every enforcement point runs (/authz, the forward proxy, the dry-run). */
  engine: DecisionEngine;
  identity?: IdentityPort;
  /**
   * The egress approval queue the management routes serve (`/v1/egress/requests`): set by the
   * egress gateway once it runs (egress-gateway.ts), undefined while there is none (the routes
   * answer 503).
   */
  approvals: { queue?: ApprovalQueue };
  now: () => number;
}

export interface ControlPlaneOptions {
  store: Store;
  /** Its configuration (loadConfig's); default: every default. */
  config?: ControlPlaneSlices;
  /** An identity authority client; overrides AGENT_IDP_URL (tests inject an in-process one). */
  identity?: IdentityPort;
  /**
   * The AGENT_IDP_URL client's per-request calls (verify-presentation, the delegation check)
   * answered in process (the all-in-one, whose authority shares the process:
   * identity/in-process.ts); every other call and watcher stays HTTP.
   */
  localIdentity?: LocalIdentity;
  /** Clock for budgets, audit and registry (epoch ms); default Date.now. */
  now?: () => number;
  /**
   * Ship audit records to the store (default true). false keeps the chain in memory only (the
   * 1000-record ring): for dry runs and the benchmark's decision-path figure, never production.
   */
  durableAudit?: boolean;
  /** Workforce OIDC override (tests); default from the OIDC_* settings. */
  oidc?: Parameters<typeof createOidcVerifier>[0];
  /** CONNECT ports open to hosts outside the registry; default EGRESS_CONNECT_PORTS or 443. */
  connectPorts?: readonly number[];
  /**
   * What `/readyz` answers (lib/readiness.ts); default a new one. A process that starts more
   * than the control plane (the all-in-one) passes its own and adds its start steps as gates.
   */
  readiness?: Readiness;
}

export interface ControlPlane extends ControlPlaneParts {
  /** The `/authz` listener (not yet listening). */
  authzServer: http.Server;
  /** The management app (registry, usage, audit, metrics, extra routes). */
  mgmtApp: OpenAPIHono;
  /** Feeds a usage report to the budget meters and the token/cost counters (settling its reservation). */
  recordUsage(r: UsageReport): void | Promise<void>;
  /** `/readyz`'s gates and watches: the audit chain writable, the governance standing fetched once, not closing. */
  readiness: Readiness;
  /** Flushes the audit shipper and releases everything this plane opened (not the store). */
  close(): Promise<void>;
}

/** The HTTP identity authority client when AGENT_IDP_URL is set. */
function identityOf(c: ControlPlaneSlices, onCall?: IdentityClientOptions['onCall'], local?: LocalIdentity): IdentityPort | undefined {
  const cp = c.controlPlane;
  if (!cp.idpUrl) return undefined;
  return createIdentityClient({
    baseUrl: cp.idpUrl,
    onCall,
    local,
    timeoutMs: cp.idpTimeoutMs,
    revalidateMs: cp.idpVpCacheMs,
    pollMs: cp.idpRevocationPollMs,
    apiKey: c.auth.apiKey,
  });
}

/**
 * The control plane's running dependencies on `readiness`: it is not ready while closing, while
 * its audit chain cannot record (every decision would deny), and until the identity authority's
 * governance standing was fetched once (before it, every governed agent denies). A standing that
 * goes stale later keeps it ready: those agents deny (fail closed) and the rest decide as usual.
 */
function readinessOf(given: Readiness | undefined, d: { audit: AuditChain; identity?: IdentityPort; closed: () => boolean }): Readiness {
  const r = given ?? createReadiness();
  r.watch(() => (d.closed() ? 'control plane closing' : undefined));
  r.watch(() => auditUnable(d.audit));
  const standing = d.identity?.standing?.bind(d.identity);
  if (standing) r.watch(() => (standing() ? undefined : 'governance standing not fetched from the identity authority yet'));
  return r;
}

export async function createControlPlane(opts: ControlPlaneOptions): Promise<ControlPlane> {
  const config = opts.config ?? DEFAULTS;
  const cp = config.controlPlane;
  const now = opts.now ?? Date.now;
  const identityMode: IdentityMode = cp.identityMode;
  // Validate every setting before opening anything, so a bad config leaves nothing behind.
  const oidc = opts.oidc ? createOidcVerifier(opts.oidc) : oidcOf(cp.oidc);
  const opaUrl = cp.opaUrl;
  const identityTimeoutMs = cp.idpTimeoutMs;
  const auditOpts = auditOptions(config.audit);
  // Identity-authority calls are metered once the metrics exist (the client starts polling now).
  const identityCalls: { observe?: IdentityClientOptions['onCall'] } = {};
  const ownIdentity = opts.identity
    ? undefined
    : identityOf(config, (op, seconds, outcome) => identityCalls.observe?.(op, seconds, outcome), opts.localIdentity);
  const identity = opts.identity ?? ownIdentity;
  const opa: OpaClient | undefined = opaUrl ? createOpaClient({ url: opaUrl, timeoutMs: cp.opaTimeoutMs }) : undefined;

  const audit = await openAuditChain(opts.durableAudit === false ? undefined : opts.store, { ...auditOpts, now });
  let registry: Registry;
  try {
    registry = await createRegistry(opts.store, { audit, now });
  } catch (e) {
    await audit.close().catch(() => {});
    await opa?.close();
    throw e;
  }
  // Budgets are shared by every replica on the store and survive restarts (budget/meter.ts).
  const budget = createSharedBudgetMeter({ ledger: createBudgetLedger(opts.store), budgetOf: (a) => registry.get(a)?.budget, now });
  const reservations = createReservations({ store: opts.store, meter: budget, budgetOf: (a) => registry.get(a)?.budget, now, ttlMs: cp.reservationTtlMs });
  const metrics = createMetrics({ known: (n) => registry.get(n) !== undefined, registry, budget, now });
  identityCalls.observe = (op, seconds, outcome) => metrics.observeIdentityCall(op, seconds, outcome);
  registerAuditMetrics(metrics.registry, audit);
  registerBudgetMetrics(metrics.registry, { registry, budget, now });
  const pollMs = cp.idpRevocationPollMs;
  const settings: DecisionSettings = {
    identityMode,
    identityAuthority: !!identity,
    oidc: !!oidc,
    opa: !!opa,
    vpAudience: cp.vpAudience,
    requireGoverned: cp.requireGoverned,
    governanceMaxAgeMs: Math.max(3 * (pollMs > 0 ? pollMs : 500), 2000),
    connectPorts: new Set(opts.connectPorts ?? config.proxy.connectPorts),
    ...(cp.mgmtPublicUrl ? { metadataBase: cp.mgmtPublicUrl.replace(/\/+$/, '') } : {}),
  };
  const tickets = createCallTickets(await callTicketKey(opts.store), now);
  const engine = createDecisionEngine({
    policy: createPolicySource({ registry, standing: identity?.standing ? () => identity.standing!() : undefined, settings }),
    ports: { identity, oidc, opa, budget: { usage: (a, t) => budget.decisionUsage(a, t) }, tickets, identityTimeoutMs, now },
    sinks: { budget, reservations, audit, meter: metrics, tickets, now },
    trustedPeer: trustedPeers(cp.trustedProxies),
  });

  const recordUsage = (r: UsageReport): void | Promise<void> => {
    if (r.reservation) {
      // Settled once: a repeated report of a settled reservation changes nothing. A reservation
      // the agent does not hold (another agent's, or none stored within the settlement's wait: the
      // id is then claimed, and its row, if it lands later, gives its worst case back) is no
      // reason to drop what it used: charged as unreserved usage.
      return reservations.settle(r.reservation, r.agent, r.tokens, r.costUsd).then(
        (first) => {
          if (first) metrics.recordUsage(r.agent, r.model, r.tokens, r.costUsd);
        },
        (e: unknown) => {
          if (!(e instanceof UnknownReservation)) throw e;
          log.warn("usage names a reservation the agent does not hold (none stored within the wait, or another agent's); charged as unreserved", {
            agent: r.agent,
            reservation: r.reservation,
          });
          return recordUsage({ ...r, reservation: undefined });
        },
      );
    }
    budget.recordUsage(r.agent, r.tokens, r.costUsd, now());
    metrics.recordUsage(r.agent, r.model, r.tokens, r.costUsd);
  };

  const approvals: ControlPlaneParts['approvals'] = {};
  const parts: ControlPlaneParts = { registry, audit, budget, reservations, metrics, engine, identity, approvals, now };
  let closed = false;
  const readiness = readinessOf(opts.readiness, { audit, identity, closed: () => closed });
  // WRIT_API_AUTH=keys: API keys are checked at the identity authority (POST /v1/keys/verify),
  // every time (a revoked key stops at once), workforce OIDC tokens by the OIDC verifier.
  const verifyKey = (identity as Partial<IdentityClient> | undefined)?.verifyApiKey;
  const check = credentialCheck({ oidc, verifyKey }, now);
  const guard = apiAuth({ ...authOf(config.auth), check, deny: (c, status, message) => c.json({ error: message }, status) });
  const mgmtApp = createMgmtApp({
    guard,
    actor: (c) => principalOf(c)?.id ?? 'mgmt-api',
    registry,
    audit,
    usage: recordUsage,
    metricsText: () => metrics.text(),
    readiness,
    readyDetail: () => ({ audit: auditHealth(audit) }),
    routes: [
      decisionRoutes(engine),
      budgetRoutes({ registry, budget, reservations, now }),
      approvalRoutes({ queue: () => approvals.queue }),
      portalApp({ identityUrl: cp.idpUrl }),
      resourceMetadataRoutes({ entry: (name) => registry.get(name), issuer: () => identity?.tokens?.().issuer() }),
    ],
  });
  const authzServer = createAuthzServer(engine);

  log.info('control plane ready', {
    identityMode,
    identityAuthority: !!identity,
    workforceOidc: !!oidc,
    opa: !!opa,
    services: registry.list().length,
  });

  return {
    ...parts,
    authzServer,
    mgmtApp,
    recordUsage,
    readiness,
    async close() {
      if (closed) return;
      closed = true;
      await reservations.close();
      await budget.close();
      await registry.close();
      try {
        await audit.close();
      } catch (e) {
        log.error('audit flush on close failed', { err: errMsg(e) });
      }
      await opa?.close();
      await ownIdentity?.close?.();
    },
  };
}

export interface StartOptions extends ControlPlaneOptions {
  /** Default DECISION_ADDR or `:9191`. */
  decisionAddr?: string;
  /** Default MGMT_ADDR or `:8181`. */
  mgmtAddr?: string;
  /** gRPC ext_authz; default DECISION_GRPC_ADDR, else port 0 beside an ephemeral decision port, else `:9192`. */
  grpcAddr?: string;
}

/** An ephemeral decision address (tests, benchmarks) never means the fixed gRPC port. */
function grpcAddrOf(config: ControlPlaneSlices, decisionAddr: string): string {
  if (config.controlPlane.grpcAddrSet) return config.controlPlane.grpcAddr;
  const d = parseAddr(decisionAddr);
  return d.port === 0 ? `${d.host.includes(':') ? `[${d.host}]` : d.host}:0` : config.controlPlane.grpcAddr;
}

export interface RunningControlPlane {
  decisionPort: number;
  /** Envoy's gRPC ext_authz (`envoy.service.auth.v3.Authorization/Check`) and gRPC health. */
  grpcPort: number;
  mgmtPort: number;
  plane: ControlPlane;
  close(): Promise<void>;
}

export async function startControlPlane(opts: StartOptions): Promise<RunningControlPlane> {
  const config = opts.config ?? DEFAULTS;
  const deadline = listenerDeadline(config.process);
  const plane = await createControlPlane(opts);
  const decisionAddr = opts.decisionAddr ?? config.controlPlane.decisionAddr;
  const mgmtAddr = opts.mgmtAddr ?? config.controlPlane.mgmtAddr;
  const grpcServer = createExtAuthzGrpcServer(plane.engine);
  const listening = plane.readiness.gate('control-plane listeners not open yet');
  let mgmt: http.Server | undefined;
  try {
    const decisionPort = await listen(plane.authzServer, decisionAddr);
    const grpcPort = await grpcServer.listen(opts.grpcAddr ?? grpcAddrOf(config, decisionAddr));
    const mgmtServer = createAdaptorServer({ fetch: plane.mgmtApp.fetch, serverOptions: deadline }) as http.Server;
    mgmt = mgmtServer;
    const mgmtPort = await listen(mgmtServer, mgmtAddr);
    listening();
    log.info('listening', { decision: decisionPort, grpc: grpcPort, mgmt: mgmtPort });
    return {
      decisionPort,
      grpcPort,
      mgmtPort,
      plane,
      async close() {
        await Promise.all([closeServer(plane.authzServer), grpcServer.close(), closeServer(mgmtServer)]);
        await plane.close();
      },
    };
  } catch (e) {
    if (plane.authzServer.listening) await closeServer(plane.authzServer);
    await grpcServer.close();
    if (mgmt?.listening) await closeServer(mgmt);
    await plane.close();
    throw e;
  }
}
