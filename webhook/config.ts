/**
 * The webhook's settings: Go-style flags (SPEC 4.8: `-addr`, `-health-addr`, `-idp-url`,
 * `-require-provisioned`, plus the TLS and proxy ones below), each with an env fallback. A flag
 * wins over its variable; everything is validated before any listener opens.
 */
import type { Config, Env } from '../runtime/lib/config.js';

/** flag -> the env variable it overrides. */
export const FLAGS = {
  addr: 'WEBHOOK_ADDR',
  'health-addr': 'WEBHOOK_HEALTH_ADDR',
  'idp-url': 'AGENT_IDP_URL',
  'require-provisioned': 'REQUIRE_PROVISIONED',
  'tls-cert-file': 'WEBHOOK_TLS_CERT_FILE',
  'tls-key-file': 'WEBHOOK_TLS_KEY_FILE',
  'proxy-url': 'WEBHOOK_PROXY_URL',
  'no-proxy': 'WEBHOOK_NO_PROXY',
  'idp-timeout-ms': 'WEBHOOK_IDP_TIMEOUT_MS',
  'cert-reload-ms': 'WEBHOOK_CERT_RELOAD_MS',
} as const;
type Flag = keyof typeof FLAGS;
const BOOL_FLAGS = new Set<Flag>(['require-provisioned']);

export interface WebhookSettings {
  addr: string;
  healthAddr: string;
  idpUrl: string;
  requireProvisioned: boolean;
  certFile: string;
  keyFile: string;
  /** Values injected into agent containers. */
  proxyEnv: { HTTPS_PROXY: string; HTTP_PROXY: string; NO_PROXY: string };
  idpTimeoutMs: number;
  certReloadMs: number;
  /** WRIT_API_KEY, presented to the identity authority (its WRIT_API_AUTH=keys; scope identity:read). */
  apiKey?: string;
}

/**
 * `-name value`, `-name=value`, `--name value`; a boolean flag alone means true. Returns the
 * flags as env entries (so one set of readers serves both); throws on an unknown flag.
 */
export function flagsToEnv(argv: readonly string[]): Env {
  const out: Env = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const m = /^--?([a-z][a-z-]*)(?:=(.*))?$/s.exec(arg);
    if (!m)
      throw new Error(
        `unexpected argument ${JSON.stringify(arg)} (flags: ${Object.keys(FLAGS)
          .map((f) => `-${f}`)
          .join(' ')})`,
      );
    const flag = m[1] as Flag;
    if (!(flag in FLAGS))
      throw new Error(
        `unknown flag -${m[1]} (flags: ${Object.keys(FLAGS)
          .map((f) => `-${f}`)
          .join(' ')})`,
      );
    let value = m[2];
    if (value === undefined) {
      const next = argv[i + 1];
      if (BOOL_FLAGS.has(flag) && (next === undefined || next.startsWith('-'))) value = 'true';
      else if (next === undefined) throw new Error(`flag -${flag} needs a value`);
      else value = argv[++i]!;
    }
    out[FLAGS[flag]] = value;
  }
  return out;
}

function httpUrl(name: string, v: string | undefined): string {
  if (v === undefined) throw new Error(`${name} is required`);
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw new Error(`${name} must be an http(s) URL, got ${JSON.stringify(v)}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`${name} must be an http(s) URL, got ${JSON.stringify(v)}`);
  return v.replace(/\/+$/, '');
}

/** NO_PROXY default: loopback, the cluster API, the cluster DNS and the identity authority stay direct (SPEC 4.8). */
export function defaultNoProxy(idpUrl: string): string {
  return [
    'localhost',
    '127.0.0.1',
    '::1',
    'kubernetes.default',
    'kubernetes.default.svc',
    'kubernetes.default.svc.cluster.local',
    'kube-dns.kube-system.svc',
    'kube-dns.kube-system.svc.cluster.local',
    new URL(idpUrl).hostname,
  ].join(',');
}

/**
 * The webhook's settings from its slice (the entry point loads the configuration with the flags
 * over the environment: `loadProcessConfig(flagsToEnv(argv))`); throws one message naming the
 * flag/variable at fault.
 */
export function webhookSettings(config: Pick<Config, 'webhook' | 'auth'>): WebhookSettings {
  const w = config.webhook;
  const idpUrl = httpUrl(`-idp-url / ${FLAGS['idp-url']}`, w.idpUrl);
  const proxyUrl = httpUrl(`-proxy-url / ${FLAGS['proxy-url']}`, w.proxyUrl);
  if (!proxyUrl.startsWith('http://'))
    throw new Error(`-proxy-url / ${FLAGS['proxy-url']} must be an http:// URL (the forward proxy speaks plain HTTP and CONNECT)`);
  const noProxy = w.noProxy ?? defaultNoProxy(idpUrl);
  return {
    addr: w.addr,
    healthAddr: w.healthAddr,
    idpUrl,
    requireProvisioned: w.requireProvisioned,
    certFile: w.certFile,
    keyFile: w.keyFile,
    proxyEnv: { HTTPS_PROXY: proxyUrl, HTTP_PROXY: proxyUrl, NO_PROXY: noProxy },
    idpTimeoutMs: w.idpTimeoutMs,
    certReloadMs: w.certReloadMs,
    apiKey: config.auth.apiKey,
  };
}
