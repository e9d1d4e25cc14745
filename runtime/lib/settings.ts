/**
 * One configuration: every environment variable any Writ process reads, declared once with its
 * type, allowed values, default and parser. `loadConfig(env)` validates all of them at start,
 * before any listener opens, fails naming every bad variable at once, and returns the frozen,
 * typed configuration with one slice per component (config.ts, built by slices.ts). Empty means
 * unset, everywhere.
 * The README's configuration tables list exactly these variables with these defaults (a test
 * checks it), and a test scans the code for any environment read outside the entry points and
 * this file.
 */
import { envName, VP_AUDIENCE } from './brand.js';
import { parseAddr, type Config, type Env } from './config.js';
import { SLICES, type Builders } from './slices.js';
import { OTLP_PROTOCOLS, TRACES_SAMPLERS } from './tracing-config.js';

export { OTLP_PROTOCOLS, TRACES_SAMPLERS, type OtlpProtocol, type SamplerName } from './tracing-config.js';

export type Component =
  'all-in-one' | 'control-plane' | 'proxy' | 'identity' | 'broker' | 'sidecar' | 'tracing' | 'webhook' | 'operator' | 'audit' | 'logging' | 'auth';

type KindType = 'string' | 'url' | 'addr' | 'int' | 'bool' | 'enum' | 'json' | 'ports' | 'duration' | 'cidrs';

/** A variable's type: how a raw value is checked and parsed, and how a default is written in the README. */
export interface Kind<T> {
  type: KindType;
  min?: number;
  values?: readonly string[];
  /** A valid raw value to its typed value; may throw naming `name` (checked at load). */
  parse(raw: string, name: string): T;
  /** A typed value as the README writes it. */
  show?(v: T): string;
}

export interface Setting<T = unknown> {
  name: string;
  /** Who reads it (the README table it is documented in). */
  component: Component;
  kind: Kind<T>;
  /** The value when unset; absent: unset stays undefined (the slice says what that means). */
  default?: T;
}

function s<T>(name: string, component: Component, kind: Kind<T>): Setting<T | undefined>;
function s<T>(name: string, component: Component, kind: Kind<T>, def: T): Setting<T>;
function s<T>(name: string, component: Component, kind: Kind<T>, def?: T): Setting<T> {
  return def === undefined ? { name, component, kind } : { name, component, kind, default: def };
}

const text: Kind<string> = { type: 'string', parse: (v) => v };
const url: Kind<string> = { type: 'url', parse: (v) => v };
const addr: Kind<string> = { type: 'addr', parse: (v) => v };
const int = (min: number): Kind<number> => ({ type: 'int', min, parse: Number });
const pos = int(1);
const nonneg = int(0);
const bool: Kind<boolean> = { type: 'bool', parse: (v) => /^(1|true|yes|on)$/i.test(v) };
const oneOf = <T extends string>(values: readonly T[]): Kind<T> => ({ type: 'enum', values, parse: (v) => v as T });
const backend = oneOf(['postgres', 'pglite', 'memory'] as const);
const ports: Kind<readonly number[]> = {
  type: 'ports',
  parse: (v) =>
    v
      .split(',')
      .map((p) => p.trim())
      .filter(Boolean)
      .map(Number),
  show: (v) => v.join(','),
};

const APPROVAL_TIMEOUT = 'EGRESS_APPROVAL_TIMEOUT';

/** Go-style duration or bare seconds -> milliseconds, between 1 ms and 24 h; throws naming `name`. */
export function parseDurationMs(raw: string, name = APPROVAL_TIMEOUT): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(raw);
  if (!m) throw new Error(`${name} must be a duration like 120s, 2m or 1500ms, got ${JSON.stringify(raw)}`);
  const n = Number(m[1]);
  const unit = m[2] ?? 's';
  const ms = unit === 'ms' ? n : unit === 's' ? n * 1000 : unit === 'm' ? n * 60_000 : n * 3_600_000;
  if (!(ms >= 1) || ms > 24 * 3_600_000) throw new Error(`${name} must be between 1 ms and 24 h, got ${JSON.stringify(raw)}`);
  return Math.round(ms);
}
const duration: Kind<number> = { type: 'duration', parse: parseDurationMs, show: (ms) => (ms % 1000 === 0 ? String(ms / 1000) : `${ms}ms`) };

/** Every setting, by the name its slice reads it under. */
const D = {
  // all-in-one
  dataDir: s(envName('DATA_DIR'), 'all-in-one', text, '.data/writ'),
  examples: s(envName('EXAMPLES'), 'all-in-one', bool, true),
  policyDir: s(envName('POLICY_DIR'), 'all-in-one', text),
  brokerEnabled: s('BROKER_ENABLED', 'all-in-one', bool, true),
  // Read by the dynamic loader, jemalloc and glibc, not by Writ: set by `npm start` and the image.
  ldPreload: s('LD_PRELOAD', 'all-in-one', text),
  mallocConf: s('MALLOC_CONF', 'all-in-one', text),
  mallocArenaMax: s('MALLOC_ARENA_MAX', 'all-in-one', nonneg),
  // Every entry point (runtime/lib/process.ts): 0 turns the idle collection off.
  idleGcIntervalMs: s('IDLE_GC_INTERVAL_MS', 'all-in-one', nonneg, 5000),
  requestTimeoutMs: s(envName('REQUEST_TIMEOUT_MS'), 'all-in-one', pos, 60_000),
  // An unknown level means info (README): any value is accepted.
  logLevel: s('LOG_LEVEL', 'logging', text, 'info'),
  // management API authentication (both listeners; runtime/lib/api-auth.ts)
  apiAuth: s(envName('API_AUTH'), 'auth', oneOf(['off', 'keys'] as const), 'off'),
  bootstrapKey: s(envName('BOOTSTRAP_ADMIN_KEY'), 'auth', text),
  apiKey: s(envName('API_KEY'), 'auth', text),
  // control plane
  decisionAddr: s('DECISION_ADDR', 'control-plane', addr, ':9191'),
  decisionGrpcAddr: s('DECISION_GRPC_ADDR', 'control-plane', addr, ':9192'),
  mgmtAddr: s('MGMT_ADDR', 'control-plane', addr, ':8181'),
  mgmtPublicUrl: s('MGMT_PUBLIC_URL', 'control-plane', url),
  registryBackend: s('REGISTRY_BACKEND', 'control-plane', backend),
  registryDbUrl: s('REGISTRY_DB_URL', 'control-plane', url),
  registryDataDir: s('REGISTRY_DATA_DIR', 'control-plane', text, '.data/control-plane'),
  identityMode: s('AGENT_IDENTITY_MODE', 'control-plane', oneOf(['header', 'vc'] as const), 'header'),
  agentIdpUrl: s('AGENT_IDP_URL', 'control-plane', url),
  agentIdpTimeoutMs: s('AGENT_IDP_TIMEOUT_MS', 'control-plane', pos, 2000),
  agentIdpVpCacheMs: s('AGENT_IDP_VP_CACHE_MS', 'control-plane', nonneg, 30_000),
  agentIdpRevocationPollMs: s('AGENT_IDP_REVOCATION_POLL_MS', 'control-plane', nonneg, 500),
  requireGoverned: s(envName('REQUIRE_GOVERNED'), 'control-plane', bool, false),
  // Parsed (and refused with the entry named) by lib/net.ts trustedPeers.
  trustedProxies: s('TRUSTED_PROXIES', 'control-plane', { type: 'cidrs', parse: (v) => v } as Kind<string>),
  agentVpAudience: s('AGENT_VP_AUDIENCE', 'control-plane', text, VP_AUDIENCE),
  oidcIssuer: s('OIDC_ISSUER', 'control-plane', url),
  oidcJwksUrl: s('OIDC_JWKS_URL', 'control-plane', url),
  oidcAudience: s('OIDC_AUDIENCE', 'control-plane', text),
  opaUrl: s('OPA_URL', 'control-plane', url),
  opaTimeoutMs: s('OPA_TIMEOUT_MS', 'control-plane', pos, 500),
  // forward proxy and approval queue
  egressProxyAddr: s('EGRESS_PROXY_ADDR', 'proxy', addr, ':9092'),
  gatewayAddr: s('EGRESS_GATEWAY_ADDR', 'proxy', addr, ':3128'),
  gatewayAuthzUrl: s('EGRESS_GATEWAY_AUTHZ_URL', 'proxy', url, 'http://127.0.0.1:9191/authz'),
  gatewayAuthzTimeoutMs: s('EGRESS_GATEWAY_AUTHZ_TIMEOUT_MS', 'proxy', pos, 2000),
  egressConnectPorts: s('EGRESS_CONNECT_PORTS', 'proxy', ports, [443]),
  egressApprovalTimeoutMs: s(APPROVAL_TIMEOUT, 'proxy', duration, 120_000),
  egressMaxPendingPerAgent: s('EGRESS_MAX_PENDING_PER_AGENT', 'proxy', pos, 100),
  egressReplicaId: s('EGRESS_REPLICA_ID', 'proxy', text),
  upstreamSecretsDir: s('UPSTREAM_SECRETS_DIR', 'proxy', text),
  mcpGatewayAddr: s('MCP_GATEWAY_ADDR', 'proxy', addr),
  proxyHeadersTimeoutMs: s('EGRESS_PROXY_HEADERS_TIMEOUT_MS', 'proxy', pos, 10_000),
  proxyMaxHeaderBytes: s('EGRESS_PROXY_MAX_HEADER_BYTES', 'proxy', pos, 32 * 1024),
  proxyConnectTimeoutMs: s('EGRESS_PROXY_CONNECT_TIMEOUT_MS', 'proxy', pos, 5000),
  proxyIdleTimeoutMs: s('EGRESS_PROXY_IDLE_TIMEOUT_MS', 'proxy', pos, 120_000),
  proxyKeepAliveTimeoutMs: s('EGRESS_PROXY_KEEPALIVE_TIMEOUT_MS', 'proxy', pos, 30_000),
  // identity authority
  port: s('PORT', 'identity', int(0), 8090),
  idpStoreBackend: s('IDP_STORE_BACKEND', 'identity', backend),
  idpDbUrl: s('IDP_DB_URL', 'identity', url),
  idpDataDir: s('IDP_DATA_DIR', 'identity', text, '.data/identity'),
  idpIssuerHost: s('IDP_ISSUER_HOST', 'identity', text, 'localhost:8090'),
  idpPublicUrl: s('IDP_PUBLIC_URL', 'identity', url),
  idpKeyEncryptionKey: s('IDP_KEY_ENCRYPTION_KEY', 'identity', text),
  idpMembershipTtlSeconds: s('IDP_MEMBERSHIP_TTL_SECONDS', 'identity', pos, 30 * 24 * 3600),
  idpCapabilityTtlSeconds: s('IDP_CAPABILITY_TTL_SECONDS', 'identity', pos, 30 * 24 * 3600),
  idpVpAudience: s('IDP_VP_AUDIENCE', 'identity', text, VP_AUDIENCE),
  idpClockSkewSeconds: s('IDP_CLOCK_SKEW_SECONDS', 'identity', nonneg, 30),
  idpIssuerMap: s('IDP_ISSUER_MAP', 'identity', { type: 'json', parse: (v) => v } as Kind<string>),
  idpApiKeyPepper: s('IDP_API_KEY_PEPPER', 'identity', text),
  idpAuditRoles: s('IDP_AUDIT_ROLES', 'identity', text, 'auditor,security-auditor,compliance-auditor'),
  // Read by libuv (its thread pool's size) and by identity/ed25519.ts (threadPoolSize below),
  // which bounds the Ed25519 verifications it queues there by it.
  uvThreadpoolSize: s('UV_THREADPOOL_SIZE', 'identity', pos, 4),
  idpTokenTtlSeconds: s('IDP_TOKEN_TTL_SECONDS', 'identity', pos, 300),
  idpRegistryUrl: s('IDP_REGISTRY_URL', 'identity', url),
  // model broker
  brokerAddr: s('BROKER_ADDR', 'broker', addr, ':8080'),
  brokerPublicUrl: s('BROKER_PUBLIC_URL', 'broker', url),
  brokerConfig: s('BROKER_CONFIG', 'broker', text),
  brokerProviderKey: s('BROKER_PROVIDER_KEY', 'broker', text),
  openaiApiKey: s('OPENAI_API_KEY', 'broker', text),
  brokerAuthzUrl: s('BROKER_AUTHZ_URL', 'broker', url, 'http://127.0.0.1:9191/authz'),
  brokerUsageUrl: s('BROKER_USAGE_URL', 'broker', url, 'http://127.0.0.1:8181/v1/usage'),
  brokerUpstreamTimeoutMs: s('BROKER_UPSTREAM_TIMEOUT_MS', 'broker', pos, 600_000),
  brokerStreamMaxMs: s('BROKER_STREAM_MAX_MS', 'broker', pos, 600_000),
  brokerDecisionTimeoutMs: s('BROKER_DECISION_TIMEOUT_MS', 'broker', pos, 2000),
  brokerMaxBodyBytes: s('BROKER_MAX_BODY_BYTES', 'broker', pos, 4 * 1024 * 1024),
  reservationTtlMs: s('BUDGET_RESERVATION_TTL_MS', 'control-plane', pos, 900_000),
  // sidecar
  identityFile: s(envName('IDENTITY_FILE'), 'sidecar', text),
  realBrokerUrl: s('REAL_BROKER_URL', 'sidecar', url),
  egressProxyUrl: s('EGRESS_PROXY_URL', 'sidecar', url),
  sidecarAddr: s('SIDECAR_ADDR', 'sidecar', addr, '127.0.0.1:8788'),
  sidecarCaFile: s('SIDECAR_CA_FILE', 'sidecar', text),
  sidecarTimeoutMs: s('SIDECAR_TIMEOUT_MS', 'sidecar', pos, 30_000),
  sidecarReloadMs: s('SIDECAR_RELOAD_MS', 'sidecar', pos, 5000),
  sidecarCredential: s('SIDECAR_CREDENTIAL', 'sidecar', oneOf(['vp', 'token'] as const), 'vp'),
  sidecarTokenUrl: s('SIDECAR_TOKEN_URL', 'sidecar', url),
  sidecarTokenAudience: s('SIDECAR_TOKEN_AUDIENCE', 'sidecar', text),
  sidecarTokenSubjectFile: s('SIDECAR_TOKEN_SUBJECT_FILE', 'sidecar', text),
  // tracing
  otlpEndpoint: s('OTEL_EXPORTER_OTLP_ENDPOINT', 'tracing', url),
  otlpHeaders: s('OTEL_EXPORTER_OTLP_HEADERS', 'tracing', text),
  otlpProtocol: s('OTEL_EXPORTER_OTLP_PROTOCOL', 'tracing', oneOf(OTLP_PROTOCOLS), OTLP_PROTOCOLS[0]),
  otelSdkDisabled: s('OTEL_SDK_DISABLED', 'tracing', bool, false),
  tracesSampler: s('OTEL_TRACES_SAMPLER', 'tracing', oneOf(TRACES_SAMPLERS), TRACES_SAMPLERS[0]),
  // A ratio in [0, 1], checked by lib/tracing-config.ts.
  tracesSamplerArg: s('OTEL_TRACES_SAMPLER_ARG', 'tracing', text),
  // audit log (control plane)
  auditChainId: s('AUDIT_CHAIN_ID', 'audit', text),
  auditDurability: s('AUDIT_DURABILITY', 'audit', oneOf(['async', 'sync'] as const), 'async'),
  auditCommitTimeoutMs: s('AUDIT_COMMIT_TIMEOUT_MS', 'audit', pos, 5000),
  auditMaxPending: s('AUDIT_MAX_PENDING', 'audit', pos, 100_000),
  auditSpoolDir: s('AUDIT_SPOOL_DIR', 'audit', text),
  auditKeyEncryptionKey: s('AUDIT_KEY_ENCRYPTION_KEY', 'audit', text),
  auditCheckpointEvery: s('AUDIT_CHECKPOINT_EVERY', 'audit', pos, 1000),
  auditCheckpointIntervalMs: s('AUDIT_CHECKPOINT_INTERVAL_MS', 'audit', pos, 60_000),
  auditVerifyIntervalMs: s('AUDIT_VERIFY_INTERVAL_MS', 'audit', nonneg, 30_000),
  auditVerifyBudget: s('AUDIT_VERIFY_BUDGET', 'audit', pos, 100_000),
  auditRetentionDays: s('AUDIT_RETENTION_DAYS', 'audit', nonneg),
  auditRetentionRecords: s('AUDIT_RETENTION_RECORDS', 'audit', nonneg),
  auditLeaseTtlMs: s('AUDIT_LEASE_TTL_MS', 'audit', pos, 15_000),
  // admission webhook (each also a flag)
  webhookAddr: s('WEBHOOK_ADDR', 'webhook', addr, ':8443'),
  webhookHealthAddr: s('WEBHOOK_HEALTH_ADDR', 'webhook', addr, ':8080'),
  requireProvisioned: s('REQUIRE_PROVISIONED', 'webhook', bool, true),
  webhookProxyUrl: s('WEBHOOK_PROXY_URL', 'webhook', url),
  webhookNoProxy: s('WEBHOOK_NO_PROXY', 'webhook', text),
  webhookTlsCertFile: s('WEBHOOK_TLS_CERT_FILE', 'webhook', text, '/etc/webhook/certs/tls.crt'),
  webhookTlsKeyFile: s('WEBHOOK_TLS_KEY_FILE', 'webhook', text, '/etc/webhook/certs/tls.key'),
  webhookCertReloadMs: s('WEBHOOK_CERT_RELOAD_MS', 'webhook', pos, 10_000),
  webhookIdpTimeoutMs: s('WEBHOOK_IDP_TIMEOUT_MS', 'webhook', pos, 2000),
  // operator
  kubeconfig: s('KUBECONFIG', 'operator', text),
  podNamespace: s('POD_NAMESPACE', 'operator', text),
  podName: s('POD_NAME', 'proxy', text),
  mgmtUrl: s(envName('MGMT_URL'), 'operator', url),
  clusterName: s(envName('CLUSTER_NAME'), 'operator', text, 'default'),
  kubernetes: s(envName('KUBERNETES'), 'operator', bool, true),
  operatorHealthAddr: s('OPERATOR_HEALTH_ADDR', 'operator', addr, ':8081'),
};

type Declared = typeof D;
/** Every setting's typed value (its default when unset). */
export type Values = { readonly [K in keyof Declared]: Declared[K] extends Setting<infer T> ? T : never };

export const SETTINGS: readonly Setting[] = Object.values(D) as Setting[];

const byName = new Map(SETTINGS.map((x) => [x.name, x]));

/** The declaration of `name` (throws for an undeclared variable: declare it here first). */
export function setting(name: string): Setting {
  const d = byName.get(name);
  if (!d) throw new Error(`${name} is not a declared setting (runtime/lib/settings.ts)`);
  return d;
}

/** A declared default as the README writes it, or undefined when the setting has none. */
export function shownDefault(d: Setting): string | undefined {
  if (d.default === undefined) return undefined;
  return d.kind.show ? d.kind.show(d.default) : String(d.default);
}

const BOOL = /^(1|true|yes|on|0|false|no|off)$/i;

/** Why `v` is not a valid value of `d`, or undefined. */
export function invalid(d: Setting, v: string): string | undefined {
  const k = d.kind;
  switch (k.type) {
    case 'url':
      try {
        new URL(v);
        return undefined;
      } catch {
        return `must be a URL, got ${JSON.stringify(v)}`;
      }
    case 'addr':
      try {
        parseAddr(v);
        return undefined;
      } catch (e) {
        return (e as Error).message;
      }
    case 'int': {
      const n = Number(v);
      const what = k.min === 1 ? 'a positive integer' : k.min === 0 ? 'a non-negative integer' : 'an integer';
      if (!/^\s*-?\d+\s*$/.test(v) || !Number.isSafeInteger(n) || (k.min !== undefined && n < k.min)) return `must be ${what}, got ${JSON.stringify(v)}`;
      return undefined;
    }
    case 'bool':
      return BOOL.test(v) ? undefined : `must be a boolean (true/false), got ${JSON.stringify(v)}`;
    case 'enum':
      return k.values!.includes(v) ? undefined : `must be one of ${k.values!.join(', ')}, got ${JSON.stringify(v)}`;
    case 'json':
      try {
        JSON.parse(v);
        return undefined;
      } catch {
        return 'must be JSON';
      }
    case 'ports':
      return v.split(',').every((p) => /^\s*\d{1,5}\s*$/.test(p) && Number(p) >= 1 && Number(p) <= 65535)
        ? undefined
        : `must be a comma-separated list of ports, got ${JSON.stringify(v)}`;
    default:
      return undefined;
  }
}

/** The set values (`given`, empty is unset) and every value with its default (`values`), with every error. */
function parseAll(env: Env): { given: Partial<Values>; values: Values; errors: string[] } {
  const given: Record<string, unknown> = {};
  const values: Record<string, unknown> = {};
  const errors: string[] = [];
  for (const [key, d] of Object.entries(D) as [string, Setting][]) {
    const raw = env[d.name];
    values[key] = d.default;
    if (raw === undefined || raw === '') continue;
    const why = invalid(d, raw);
    if (why) {
      errors.push(`${d.name} ${why}`);
      continue;
    }
    try {
      given[key] = values[key] = d.kind.parse(raw, d.name);
    } catch (e) {
      errors.push((e as Error).message);
    }
  }
  return { given: given as Partial<Values>, values: values as Values, errors };
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const x of Object.values(o)) deepFreeze(x);
  }
  return o;
}

/**
 * Validates every declared variable that is set (empty is unset) and returns the frozen, typed
 * configuration: one slice per component. Throws one error naming every invalid variable.
 */
export function loadConfig(env: Env): Config {
  const { given, values, errors } = parseAll(env);
  const platform = { brandPodName: env[envName('POD_NAME')] || undefined };
  const out: Partial<Record<keyof Config, unknown>> = {};
  for (const [k, build] of Object.entries(SLICES) as [keyof Config, Builders[keyof Config]][]) {
    try {
      out[k] = build(values, given, platform);
    } catch (e) {
      errors.push((e as Error).message);
    }
  }
  if (errors.length) throw new Error(`invalid configuration: ${errors.join('; ')}`);
  return deepFreeze(out as Config);
}

/** Every default: the configuration of an empty environment (tests, and components given no slice). */
export const DEFAULTS: Config = loadConfig({});

/** The configuration of this process's environment (entry points, through lib/process.ts), `overrides` (flags) over it. */
export function loadProcessConfig(overrides: Env = {}): Config {
  return loadConfig({ ...process.env, ...overrides });
}

/**
 * One setting of this process's own environment, for the modules that read it before (or without)
 * a loaded configuration: the logger's level at import, libuv's thread pool (which libuv sizes from
 * the same variable), a PGlite worker thread's idle collector, the command-line tool's credential. A bad value reads as the default
 * (loadConfig refuses it at the process's start).
 */
export function processSetting<K extends 'logLevel' | 'uvThreadpoolSize' | 'idleGcIntervalMs' | 'apiKey'>(key: K): Values[K] {
  const d = D[key] as Setting<Values[K]>;
  const raw = process.env[d.name];
  return raw === undefined || raw === '' || invalid(d, raw) ? (d.default as Values[K]) : d.kind.parse(raw, d.name);
}
