/**
 * Each component's slice of the configuration, built by `loadConfig` (settings.ts) from the
 * declared settings' typed values: the derived defaults (a store's backend from its URL, the audit
 * spool beside the data folder, a replica's id from its pod or host name, the tracing mode) are
 * worked out here, once.
 */
import { hostname } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import type { Config, StoreSetting } from './config.js';
import type { Values } from './settings.js';
import { tracingConfig } from './tracing-config.js';

/** The store a component opens: `postgres` when its URL is set, unless its backend says otherwise. */
function store(backendSet: StoreSetting['backend'] | undefined, url: string | undefined, dataDir: string, urlOnlyForPostgres: boolean): StoreSetting {
  const backend = backendSet ?? (url ? 'postgres' : 'pglite');
  return { backend, ...(url && (!urlOnlyForPostgres || backend === 'postgres') ? { url } : {}), dataDir };
}

/**
 * Where the audit spool goes by default: beside the PGlite data folder and named after it
 * (`.data/writ.audit-spool`), so two data folders in one parent never share one spool file.
 */
function spoolDir(given: Partial<Values>): string | undefined {
  if (given.auditSpoolDir === 'none') return undefined;
  if (given.auditSpoolDir) return given.auditSpoolDir;
  const data = resolve(given.dataDir ?? given.registryDataDir ?? '.data/writ');
  return join(dirname(data), `${basename(data)}.audit-spool`);
}

/** Platform variables read beside the settings: `brandPodName` is WRIT_POD_NAME (the chart sets it from the pod's name). */
export interface Platform {
  brandPodName?: string;
}

export type Builders = { [K in keyof Config]: (v: Values, given: Partial<Values>, platform: Platform) => Config[K] };

/** Each component's slice from the values (and, for the derived defaults, which were set). */
export const SLICES: Builders = {
  process: (v) => ({ logLevel: v.logLevel, idleGcIntervalMs: v.idleGcIntervalMs, requestTimeoutMs: v.requestTimeoutMs }),
  auth: (v) => ({ mode: v.apiAuth, bootstrapKey: v.bootstrapKey, apiKey: v.apiKey }),
  allInOne: (v, g) => ({
    dataDir: v.dataDir,
    policyDir: v.policyDir,
    examples: v.examples,
    brokerEnabled: v.brokerEnabled,
    embeddedStore: [g.registryDbUrl, g.registryBackend, g.idpDbUrl, g.idpStoreBackend].every((x) => x === undefined),
    agentIdpUrl: g.agentIdpUrl,
    brokerAuthzUrl: g.brokerAuthzUrl,
    brokerUsageUrl: g.brokerUsageUrl,
    brokerPublicUrl: g.brokerPublicUrl,
  }),
  controlPlane: (v, g) => ({
    decisionAddr: v.decisionAddr,
    grpcAddr: v.decisionGrpcAddr,
    grpcAddrSet: g.decisionGrpcAddr !== undefined,
    mgmtAddr: v.mgmtAddr,
    mgmtPublicUrl: v.mgmtPublicUrl,
    store: store(v.registryBackend, v.registryDbUrl, v.registryDataDir, true),
    identityMode: v.identityMode,
    idpUrl: v.agentIdpUrl,
    idpTimeoutMs: v.agentIdpTimeoutMs,
    idpVpCacheMs: v.agentIdpVpCacheMs,
    idpRevocationPollMs: v.agentIdpRevocationPollMs,
    requireGoverned: v.requireGoverned,
    trustedProxies: v.trustedProxies ?? '',
    vpAudience: v.agentVpAudience,
    oidc: { issuer: v.oidcIssuer, jwksUrl: v.oidcJwksUrl, audience: v.oidcAudience },
    opaUrl: v.opaUrl,
    opaTimeoutMs: v.opaTimeoutMs,
    reservationTtlMs: v.reservationTtlMs,
  }),
  audit: (v, g, p) => ({
    chain: v.auditChainId,
    chainBase: p.brandPodName || v.podName || hostname() || 'control-plane',
    durability: v.auditDurability,
    commitTimeoutMs: v.auditCommitTimeoutMs,
    maxPending: v.auditMaxPending,
    spoolDir: spoolDir(g),
    keySecret: v.auditKeyEncryptionKey ?? v.idpKeyEncryptionKey,
    checkpointEvery: v.auditCheckpointEvery,
    checkpointIntervalMs: v.auditCheckpointIntervalMs,
    verifyIntervalMs: v.auditVerifyIntervalMs,
    verifyBudget: v.auditVerifyBudget,
    retentionDays: v.auditRetentionDays ?? 0,
    retentionRecords: v.auditRetentionRecords ?? 0,
    leaseTtlMs: v.auditLeaseTtlMs,
  }),
  proxy: (v, g, p) => ({
    gatewayAddr: v.gatewayAddr,
    gatewayAddrSet: g.gatewayAddr !== undefined,
    gatewayAuthzUrl: v.gatewayAuthzUrl,
    gatewayAuthzTimeoutMs: v.gatewayAuthzTimeoutMs,
    addr: v.egressProxyAddr,
    connectPorts: v.egressConnectPorts,
    approvalTimeoutMs: v.egressApprovalTimeoutMs,
    maxPendingPerAgent: v.egressMaxPendingPerAgent,
    replicaId: v.egressReplicaId ?? (p.brandPodName || v.podName || hostname()),
    upstreamSecretsDir: v.upstreamSecretsDir,
    mcpGatewayAddr: v.mcpGatewayAddr,
    limits: {
      headersTimeoutMs: v.proxyHeadersTimeoutMs,
      maxHeaderBytes: v.proxyMaxHeaderBytes,
      connectTimeoutMs: v.proxyConnectTimeoutMs,
      idleTimeoutMs: v.proxyIdleTimeoutMs,
      keepAliveTimeoutMs: v.proxyKeepAliveTimeoutMs,
    },
  }),
  identity: (v) => ({
    port: v.port,
    store: store(v.idpStoreBackend, v.idpDbUrl, v.idpDataDir, false),
    issuerHost: v.idpIssuerHost,
    publicUrl: v.idpPublicUrl,
    keyEncryptionKey: v.idpKeyEncryptionKey,
    membershipTtlSeconds: v.idpMembershipTtlSeconds,
    capabilityTtlSeconds: v.idpCapabilityTtlSeconds,
    vpAudience: v.idpVpAudience,
    clockSkewSeconds: v.idpClockSkewSeconds,
    issuerMap: v.idpIssuerMap,
    apiKeyPepper: v.idpApiKeyPepper,
    auditRoles: v.idpAuditRoles,
    oidc: { issuer: v.oidcIssuer, jwksUrl: v.oidcJwksUrl, audience: v.oidcAudience },
    tokenTtlSeconds: v.idpTokenTtlSeconds,
    registryUrl: v.idpRegistryUrl,
  }),
  broker: (v) => ({
    addr: v.brokerAddr,
    configPath: v.brokerConfig,
    providerKey: v.brokerProviderKey
      ? { key: v.brokerProviderKey, keyVar: 'BROKER_PROVIDER_KEY' }
      : v.openaiApiKey
        ? { key: v.openaiApiKey, keyVar: 'OPENAI_API_KEY' }
        : undefined,
    authzUrl: v.brokerAuthzUrl,
    usageUrl: v.brokerUsageUrl,
    upstreamTimeoutMs: v.brokerUpstreamTimeoutMs,
    streamMaxMs: v.brokerStreamMaxMs,
    decisionTimeoutMs: v.brokerDecisionTimeoutMs,
    maxBodyBytes: v.brokerMaxBodyBytes,
  }),
  sidecar: (v) => ({
    identityFile: v.identityFile,
    brokerUrl: v.realBrokerUrl,
    proxyUrl: v.egressProxyUrl,
    addr: v.sidecarAddr,
    caFile: v.sidecarCaFile,
    timeoutMs: v.sidecarTimeoutMs,
    reloadMs: v.sidecarReloadMs,
    audience: v.agentVpAudience,
    credential: v.sidecarCredential,
    tokenUrl: v.sidecarTokenUrl,
    tokenAudience: v.sidecarTokenAudience,
    tokenSubjectFile: v.sidecarTokenSubjectFile,
  }),
  tracing: (v) =>
    tracingConfig({
      disabled: v.otelSdkDisabled,
      endpoint: v.otlpEndpoint,
      headers: v.otlpHeaders,
      protocol: v.otlpProtocol,
      sampler: v.tracesSampler,
      samplerArg: v.tracesSamplerArg,
    }),
  webhook: (v) => ({
    addr: v.webhookAddr,
    healthAddr: v.webhookHealthAddr,
    idpUrl: v.agentIdpUrl,
    requireProvisioned: v.requireProvisioned,
    proxyUrl: v.webhookProxyUrl,
    noProxy: v.webhookNoProxy,
    certFile: v.webhookTlsCertFile,
    keyFile: v.webhookTlsKeyFile,
    certReloadMs: v.webhookCertReloadMs,
    idpTimeoutMs: v.webhookIdpTimeoutMs,
  }),
  operator: (v) => ({
    mgmtUrl: v.mgmtUrl,
    idpUrl: v.agentIdpUrl,
    cluster: v.clusterName,
    kubernetes: v.kubernetes,
    policyDir: v.policyDir,
    podName: v.podName ?? hostname(),
    podNamespace: v.podNamespace,
    kubeconfig: v.kubeconfig,
    healthAddr: v.operatorHealthAddr,
  }),
};
