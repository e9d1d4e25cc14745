/**
 * One configuration: every environment variable any Writ process reads, declared once with its
 * type, allowed values and documented default. `loadConfig(env)` validates all of them at start,
 * before any listener opens, and fails naming every bad variable at once. Empty means unset,
 * everywhere. The README's configuration tables list exactly these variables (a test checks it),
 * and a test scans the code for any variable read that is not declared here.
 */
import { envName } from './brand.js';
import { parseAddr, type Env } from './config.js';

type Kind =
  | { type: 'string' }
  | { type: 'url' }
  | { type: 'addr' }
  | { type: 'int'; min?: number }
  | { type: 'bool' }
  | { type: 'enum'; values: readonly string[] }
  | { type: 'json' }
  | { type: 'ports' }
  | { type: 'duration' }
  | { type: 'cidrs' };

export interface Setting {
  name: string;
  /** Who reads it (the README table it is documented in). */
  component: 'all-in-one' | 'control-plane' | 'proxy' | 'identity' | 'broker' | 'sidecar' | 'tracing' | 'webhook' | 'operator' | 'audit' | 'logging' | 'auth';
  kind: Kind;
}

const s = (name: string, component: Setting['component'], kind: Kind): Setting => ({ name, component, kind });
const str: Kind = { type: 'string' };
const url: Kind = { type: 'url' };
const addr: Kind = { type: 'addr' };
const pos: Kind = { type: 'int', min: 1 };
const nonneg: Kind = { type: 'int', min: 0 };
const bool: Kind = { type: 'bool' };
const backend: Kind = { type: 'enum', values: ['postgres', 'pglite', 'memory'] };

/** OTLP transports offered (`OTEL_EXPORTER_OTLP_PROTOCOL`), the default first: OTLP/gRPC is not. */
export const OTLP_PROTOCOLS = ['http/protobuf', 'http/json'] as const;
export type OtlpProtocol = (typeof OTLP_PROTOCOLS)[number];

/** The OTel SDK's samplers (`OTEL_TRACES_SAMPLER`), the default first. */
export const TRACES_SAMPLERS = [
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
  'always_on',
  'always_off',
  'traceidratio',
] as const;

export const SETTINGS: readonly Setting[] = [
  // all-in-one
  s(envName('DATA_DIR'), 'all-in-one', str),
  s(envName('EXAMPLES'), 'all-in-one', bool),
  s(envName('POLICY_DIR'), 'all-in-one', str),
  s('BROKER_ENABLED', 'all-in-one', bool),
  // Read by glibc, not by Writ: set to 2 by `npm start` and the image.
  s('MALLOC_ARENA_MAX', 'all-in-one', nonneg),
  // Every entry point (runtime/lib/process.ts): 0 turns the idle collection off.
  s('IDLE_GC_INTERVAL_MS', 'all-in-one', nonneg),
  s(envName('REQUEST_TIMEOUT_MS'), 'all-in-one', pos),
  // An unknown level means info (README): any value is accepted.
  s('LOG_LEVEL', 'logging', str),
  // management API authentication (both listeners; runtime/lib/api-auth.ts)
  s(envName('API_AUTH'), 'auth', { type: 'enum', values: ['off', 'keys'] }),
  s(envName('BOOTSTRAP_ADMIN_KEY'), 'auth', str),
  s(envName('API_KEY'), 'auth', str),
  // control plane
  s('DECISION_ADDR', 'control-plane', addr),
  s('DECISION_GRPC_ADDR', 'control-plane', addr),
  s('MGMT_ADDR', 'control-plane', addr),
  s('REGISTRY_BACKEND', 'control-plane', backend),
  s('REGISTRY_DB_URL', 'control-plane', url),
  s('REGISTRY_DATA_DIR', 'control-plane', str),
  s('AGENT_IDENTITY_MODE', 'control-plane', { type: 'enum', values: ['header', 'vc'] }),
  s('AGENT_IDP_URL', 'control-plane', url),
  s('AGENT_IDP_TIMEOUT_MS', 'control-plane', pos),
  s('AGENT_IDP_VP_CACHE_MS', 'control-plane', nonneg),
  s('AGENT_IDP_REVOCATION_POLL_MS', 'control-plane', nonneg),
  s(envName('REQUIRE_GOVERNED'), 'control-plane', bool),
  s('TRUSTED_PROXIES', 'control-plane', { type: 'cidrs' }),
  s('AGENT_VP_AUDIENCE', 'control-plane', str),
  s('OIDC_ISSUER', 'control-plane', url),
  s('OIDC_JWKS_URL', 'control-plane', url),
  s('OIDC_AUDIENCE', 'control-plane', str),
  s('OPA_URL', 'control-plane', url),
  s('OPA_TIMEOUT_MS', 'control-plane', pos),
  // forward proxy and approval queue
  s('EGRESS_PROXY_ADDR', 'proxy', addr),
  s('EGRESS_GATEWAY_ADDR', 'proxy', addr),
  s('EGRESS_GATEWAY_AUTHZ_URL', 'proxy', url),
  s('EGRESS_GATEWAY_AUTHZ_TIMEOUT_MS', 'proxy', pos),
  s('EGRESS_CONNECT_PORTS', 'proxy', { type: 'ports' }),
  s('EGRESS_APPROVAL_TIMEOUT', 'proxy', { type: 'duration' }),
  s('EGRESS_MAX_PENDING_PER_AGENT', 'proxy', pos),
  s('EGRESS_REPLICA_ID', 'proxy', str),
  s('EGRESS_PROXY_HEADERS_TIMEOUT_MS', 'proxy', pos),
  s('EGRESS_PROXY_MAX_HEADER_BYTES', 'proxy', pos),
  s('EGRESS_PROXY_CONNECT_TIMEOUT_MS', 'proxy', pos),
  s('EGRESS_PROXY_IDLE_TIMEOUT_MS', 'proxy', pos),
  s('EGRESS_PROXY_KEEPALIVE_TIMEOUT_MS', 'proxy', pos),
  // identity authority
  s('PORT', 'identity', { type: 'int', min: 0 }),
  s('IDP_STORE_BACKEND', 'identity', backend),
  s('IDP_DB_URL', 'identity', url),
  s('IDP_DATA_DIR', 'identity', str),
  s('IDP_ISSUER_HOST', 'identity', str),
  s('IDP_PUBLIC_URL', 'identity', url),
  s('IDP_KEY_ENCRYPTION_KEY', 'identity', str),
  s('IDP_MEMBERSHIP_TTL_SECONDS', 'identity', pos),
  s('IDP_CAPABILITY_TTL_SECONDS', 'identity', pos),
  s('IDP_VP_AUDIENCE', 'identity', str),
  s('IDP_CLOCK_SKEW_SECONDS', 'identity', nonneg),
  s('IDP_ISSUER_MAP', 'identity', { type: 'json' }),
  s('IDP_API_KEY_PEPPER', 'identity', str),
  s('IDP_AUDIT_ROLES', 'identity', str),
  s('IDP_TOKEN_TTL_SECONDS', 'identity', pos),
  s('IDP_REGISTRY_URL', 'identity', url),
  // Read by libuv (its thread pool's size) and by identity/ed25519.ts, which bounds the Ed25519
  // verifications it queues there by it.
  s('UV_THREADPOOL_SIZE', 'identity', pos),
  // model broker
  s('BROKER_ADDR', 'broker', addr),
  s('BROKER_CONFIG', 'broker', str),
  s('BROKER_PROVIDER_KEY', 'broker', str),
  s('OPENAI_API_KEY', 'broker', str),
  s('BROKER_AUTHZ_URL', 'broker', url),
  s('BROKER_USAGE_URL', 'broker', url),
  s('BROKER_UPSTREAM_TIMEOUT_MS', 'broker', pos),
  s('BROKER_STREAM_MAX_MS', 'broker', pos),
  s('BROKER_DECISION_TIMEOUT_MS', 'broker', pos),
  s('BROKER_MAX_BODY_BYTES', 'broker', pos),
  s('BUDGET_RESERVATION_TTL_MS', 'control-plane', pos),
  // sidecar
  s(envName('IDENTITY_FILE'), 'sidecar', str),
  s('REAL_BROKER_URL', 'sidecar', url),
  s('EGRESS_PROXY_URL', 'sidecar', url),
  s('SIDECAR_ADDR', 'sidecar', addr),
  s('SIDECAR_CA_FILE', 'sidecar', str),
  s('SIDECAR_TIMEOUT_MS', 'sidecar', pos),
  s('SIDECAR_RELOAD_MS', 'sidecar', pos),
  // tracing
  s('OTEL_EXPORTER_OTLP_ENDPOINT', 'tracing', url),
  s('OTEL_EXPORTER_OTLP_HEADERS', 'tracing', str),
  s('OTEL_EXPORTER_OTLP_PROTOCOL', 'tracing', { type: 'enum', values: OTLP_PROTOCOLS }),
  s('OTEL_SDK_DISABLED', 'tracing', bool),
  s('OTEL_TRACES_SAMPLER', 'tracing', { type: 'enum', values: TRACES_SAMPLERS }),
  // A ratio in [0, 1], checked by lib/tracing-config.ts.
  s('OTEL_TRACES_SAMPLER_ARG', 'tracing', str),
  // audit log (control plane)
  s('AUDIT_CHAIN_ID', 'audit', str),
  s('AUDIT_LEASE_TTL_MS', 'audit', pos),
  s('AUDIT_DURABILITY', 'audit', { type: 'enum', values: ['async', 'sync'] }),
  s('AUDIT_COMMIT_TIMEOUT_MS', 'audit', pos),
  s('AUDIT_MAX_PENDING', 'audit', pos),
  s('AUDIT_SPOOL_DIR', 'audit', str),
  s('AUDIT_KEY_ENCRYPTION_KEY', 'audit', str),
  s('AUDIT_CHECKPOINT_EVERY', 'audit', pos),
  s('AUDIT_CHECKPOINT_INTERVAL_MS', 'audit', pos),
  s('AUDIT_VERIFY_INTERVAL_MS', 'audit', nonneg),
  s('AUDIT_VERIFY_BUDGET', 'audit', pos),
  s('AUDIT_RETENTION_DAYS', 'audit', nonneg),
  s('AUDIT_RETENTION_RECORDS', 'audit', nonneg),
  // admission webhook (each also a flag)
  s('WEBHOOK_ADDR', 'webhook', addr),
  s('WEBHOOK_HEALTH_ADDR', 'webhook', addr),
  s('REQUIRE_PROVISIONED', 'webhook', bool),
  s('WEBHOOK_PROXY_URL', 'webhook', url),
  s('WEBHOOK_NO_PROXY', 'webhook', str),
  s('WEBHOOK_TLS_CERT_FILE', 'webhook', str),
  s('WEBHOOK_TLS_KEY_FILE', 'webhook', str),
  s('WEBHOOK_CERT_RELOAD_MS', 'webhook', pos),
  s('WEBHOOK_IDP_TIMEOUT_MS', 'webhook', pos),
  // operator
  s('KUBECONFIG', 'operator', str),
  s('POD_NAMESPACE', 'operator', str),
  s('POD_NAME', 'proxy', str),
  s(envName('MGMT_URL'), 'operator', url),
  s(envName('CLUSTER_NAME'), 'operator', str),
  s('OPERATOR_HEALTH_ADDR', 'operator', addr),
  s(envName('KUBERNETES'), 'operator', bool),
];

const byName = new Map(SETTINGS.map((x) => [x.name, x]));

/** The declaration of `name` (throws for an undeclared variable: declare it here first). */
export function setting(name: string): Setting {
  const d = byName.get(name);
  if (!d) throw new Error(`${name} is not a declared setting (runtime/lib/settings.ts)`);
  return d;
}

const BOOL = /^(1|true|yes|on|0|false|no|off)$/i;
/** As the approval queue parses it (approvals/record.ts parseDurationMs). */
const DURATION = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/;

/** Why `v` is not a valid value of `d`, or undefined. */
export function invalid(d: Setting, v: string): string | undefined {
  const k = d.kind;
  switch (k.type) {
    case 'string':
      return undefined;
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
      if (!/^-?\d+$/.test(v.trim()) || !Number.isSafeInteger(n)) return `must be an integer, got ${JSON.stringify(v)}`;
      return k.min !== undefined && n < k.min ? `must be >= ${k.min}, got ${n}` : undefined;
    }
    case 'bool':
      return BOOL.test(v) ? undefined : `must be a boolean (true/false), got ${JSON.stringify(v)}`;
    case 'enum':
      return k.values.includes(v) ? undefined : `must be one of ${k.values.join(', ')}, got ${JSON.stringify(v)}`;
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
    case 'duration':
      return DURATION.test(v) ? undefined : `must be a duration (120, 120s, 2m, 1500ms, 1h), got ${JSON.stringify(v)}`;
    case 'cidrs':
      return undefined; // parsed (and refused with the entry named) by lib/net.ts trustedPeers
  }
}

/**
 * Validates every declared variable that is set (empty is unset) and returns the set ones,
 * trimmed. Throws one error naming every invalid variable. Components then read their typed
 * values through lib/config.ts, whose parsers agree with these checks.
 */
export function loadConfig(env: Env): ReadonlyMap<string, string> {
  const out = new Map<string, string>();
  const errors: string[] = [];
  for (const d of SETTINGS) {
    const v = env[d.name];
    if (v === undefined || v === '') continue;
    const why = invalid(d, v);
    if (why) errors.push(`${d.name} ${why}`);
    else out.set(d.name, v);
  }
  if (errors.length) throw new Error(`invalid configuration: ${errors.join('; ')}`);
  return out;
}
