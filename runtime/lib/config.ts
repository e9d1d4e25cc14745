/**
 * The typed configuration every component takes: one frozen slice per component, built once by
 * `loadConfig(env)` (settings.ts) at the entry point. Nothing below the entry points reads the
 * environment: a component is given its slice (and, in the all-in-one, in-process ports).
 */
import type { OtlpProtocol, SamplerName } from './tracing-config.js';

export type Env = Record<string, string | undefined>;

export interface ListenAddr {
  host: string;
  port: number;
}

/**
 * Parses a Go-style listen address: `:9191`, `127.0.0.1:9191`, `[::1]:9191`, `9191`.
 * An empty host means all interfaces.
 */
export function parseAddr(addr: string): ListenAddr {
  const s = addr.trim();
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(s) ?? /^()()(\d{1,5})$/.exec(s);
  if (!m) throw new Error(`invalid listen address: ${JSON.stringify(addr)}`);
  const port = Number(m[3]);
  if (port > 65535) throw new Error(`invalid port in listen address: ${JSON.stringify(addr)}`);
  const host = m[1] ?? m[2] ?? '';
  return { host: host === '' ? '0.0.0.0' : host, port };
}

export type Backend = 'postgres' | 'pglite' | 'memory';

/** Which store a component opens (the store factory's options it takes from its variables). */
export interface StoreSetting {
  backend: Backend;
  url?: string;
  dataDir: string;
}

/** Every process: its logger, idle collector and listeners' request deadline. */
export interface ProcessConfig {
  /** LOG_LEVEL as given (an unknown level means info). */
  logLevel: string;
  idleGcIntervalMs: number;
  requestTimeoutMs: number;
}

/** The management API's authentication (both listeners) and the credential a component presents. */
export interface AuthConfig {
  mode: 'off' | 'keys';
  bootstrapKey?: string;
  /** WRIT_API_KEY: presented to another component's management listener. */
  apiKey?: string;
}

export interface AllInOneConfig {
  dataDir: string;
  policyDir?: string;
  examples: boolean;
  brokerEnabled: boolean;
  /** True when no store setting names a database or backend: one shared PGlite folder then. */
  embeddedStore: boolean;
  /** AGENT_IDP_URL as given: unset, this process's identity authority answers in process. */
  agentIdpUrl?: string;
  /** BROKER_AUTHZ_URL / BROKER_USAGE_URL as given: unset, the broker decides and records usage in process. */
  brokerAuthzUrl?: string;
  brokerUsageUrl?: string;
  /** BROKER_PUBLIC_URL: the broker listener's base URL as clients reach it (the MCP routes' RFC 9728 resource identifiers); unset: from each request's Host. */
  brokerPublicUrl?: string;
}

export interface OidcSetting {
  issuer?: string;
  jwksUrl?: string;
  audience?: string;
}

export interface ControlPlaneConfig {
  decisionAddr: string;
  /** DECISION_GRPC_ADDR (`:9192`); unset beside an ephemeral decision port, port 0 beside it. */
  grpcAddr: string;
  /** True when DECISION_GRPC_ADDR is set. */
  grpcAddrSet: boolean;
  mgmtAddr: string;
  /**
   * MGMT_PUBLIC_URL: the management listener's base URL as clients reach it; the RFC 9728 metadata
   * of services that opt in (`oauthResource`) is served there and named in `/authz` challenges.
   */
  mgmtPublicUrl?: string;
  store: StoreSetting;
  identityMode: 'header' | 'vc';
  /** AGENT_IDP_URL: the identity authority (delegation check, VPs, forward proxy). */
  idpUrl?: string;
  idpTimeoutMs: number;
  idpVpCacheMs: number;
  idpRevocationPollMs: number;
  requireGoverned: boolean;
  /** TRUSTED_PROXIES as given (lib/net.ts trustedPeers parses it). */
  trustedProxies: string;
  vpAudience: string;
  oidc: OidcSetting;
  opaUrl?: string;
  opaTimeoutMs: number;
  reservationTtlMs: number;
}

export interface AuditConfig {
  /** AUDIT_CHAIN_ID, when set. */
  chain?: string;
  /** The base a chain id is made unique from: WRIT_POD_NAME, POD_NAME or the host name. */
  chainBase: string;
  durability: 'async' | 'sync';
  commitTimeoutMs: number;
  maxPending: number;
  /** Undefined: no spool (`AUDIT_SPOOL_DIR=none`). */
  spoolDir?: string;
  keySecret?: string;
  checkpointEvery: number;
  checkpointIntervalMs: number;
  verifyIntervalMs: number;
  verifyBudget: number;
  /** 0: keep all. */
  retentionDays: number;
  retentionRecords: number;
  /** The chain lease's time-to-live, renewed every third of it. */
  leaseTtlMs: number;
}

export interface ProxyLimitsSetting {
  headersTimeoutMs: number;
  maxHeaderBytes: number;
  connectTimeoutMs: number;
  idleTimeoutMs: number;
  keepAliveTimeoutMs: number;
}

/** The forward proxy and the approval queue. */
export interface ProxyConfig {
  addr: string;
  connectPorts: readonly number[];
  approvalTimeoutMs: number;
  maxPendingPerAgent: number;
  replicaId: string;
  limits: ProxyLimitsSetting;
  /** UPSTREAM_SECRETS_DIR: where the Secrets registry entries' `upstreamAuth` names are mounted (`<dir>/<name>/<key>`). */
  upstreamSecretsDir?: string;
  /** MCP_GATEWAY_ADDR: the control plane process's own MCP gateway listener (runtime/mcp/listener.ts); unset: none (the all-in-one serves it on the broker listener). */
  mcpGatewayAddr?: string;
  /** The egress gateway (runtime/egress-gateway/): EGRESS_GATEWAY_ADDR, and whether it is set. */
  gatewayAddr: string;
  gatewayAddrSet: boolean;
  gatewayAuthzUrl: string;
  gatewayAuthzTimeoutMs: number;
}

export interface IdentityConfig {
  port: number;
  store: StoreSetting;
  issuerHost: string;
  publicUrl?: string;
  keyEncryptionKey?: string;
  membershipTtlSeconds: number;
  capabilityTtlSeconds: number;
  vpAudience: string;
  clockSkewSeconds: number;
  issuerMap?: string;
  apiKeyPepper?: string;
  auditRoles: string;
  /** Workforce OIDC (the OIDC_* settings, as the control plane reads them). */
  oidc: OidcSetting;
  /** IDP_TOKEN_TTL_SECONDS: the longest an OAuth access token lives. */
  tokenTtlSeconds: number;
  /** IDP_REGISTRY_URL: the control plane's management URL the token endpoint reads entries from. */
  registryUrl?: string;
}

export interface BrokerConfigSetting {
  addr: string;
  /** BROKER_CONFIG; unset: the models.yaml shipped beside the broker. */
  configPath?: string;
  /** The provider key and the variable it came from (BROKER_PROVIDER_KEY, else OPENAI_API_KEY); undefined: none. */
  providerKey?: { key: string; keyVar: string };
  authzUrl: string;
  usageUrl: string;
  upstreamTimeoutMs: number;
  streamMaxMs: number;
  decisionTimeoutMs: number;
  maxBodyBytes: number;
}

export interface SidecarConfig {
  identityFile?: string;
  brokerUrl?: string;
  proxyUrl?: string;
  addr: string;
  caFile?: string;
  timeoutMs: number;
  reloadMs: number;
  audience: string;
  /** The agent's credential: a VP minted per request (`vp`), or an access token fetched and renewed (`token`). */
  credential: 'vp' | 'token';
  /** The token endpoint as the sidecar reaches it (credential `token`). */
  tokenUrl?: string;
  /** The registry entry the token is for (the broker's). */
  tokenAudience?: string;
  /** An approved delegation's VC: the token is exchanged for it (RFC 8693) instead of client_credentials. */
  tokenSubjectFile?: string;
}

export type TracingMode = 'otlp' | 'stdout' | 'off';

export interface TracingConfig {
  mode: TracingMode;
  /** OTLP/HTTP base endpoint (mode otlp), e.g. http://collector:4318. */
  endpoint?: string;
  /** `OTEL_EXPORTER_OTLP_PROTOCOL` (mode otlp; default `http/protobuf`, as the OTLP spec sets it). */
  protocol?: OtlpProtocol;
  /** Headers sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`: `k1=v1,k2=v2`, URL-encoded). */
  headers?: Record<string, string>;
  /** `OTEL_TRACES_SAMPLER` and its ratio (`OTEL_TRACES_SAMPLER_ARG`); absent: `parentbased_always_on`. */
  sampler?: { name: SamplerName; ratio: number };
}

export interface WebhookConfig {
  addr: string;
  healthAddr: string;
  idpUrl?: string;
  requireProvisioned: boolean;
  proxyUrl?: string;
  noProxy?: string;
  certFile: string;
  keyFile: string;
  certReloadMs: number;
  idpTimeoutMs: number;
}

export interface OperatorSetting {
  mgmtUrl?: string;
  idpUrl?: string;
  cluster: string;
  kubernetes: boolean;
  policyDir?: string;
  podName: string;
  podNamespace?: string;
  kubeconfig?: string;
  /** OPERATOR_HEALTH_ADDR: /healthz and /readyz. */
  healthAddr: string;
}

/** The whole configuration, frozen: one slice per component. */
export interface Config {
  process: ProcessConfig;
  auth: AuthConfig;
  allInOne: AllInOneConfig;
  controlPlane: ControlPlaneConfig;
  audit: AuditConfig;
  proxy: ProxyConfig;
  identity: IdentityConfig;
  broker: BrokerConfigSetting;
  sidecar: SidecarConfig;
  tracing: TracingConfig;
  webhook: WebhookConfig;
  operator: OperatorSetting;
}
