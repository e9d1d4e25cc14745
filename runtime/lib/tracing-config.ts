/**
 * Tracing configuration from the environment (SPEC 6, 8): which mode (`otlp`, `stdout`, `off`),
 * the OTLP/HTTP endpoint, headers and protocol, and the sampler, read and validated from the OTel
 * SDK's variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `_HEADERS`, `_PROTOCOL`, `OTEL_TRACES_SAMPLER`,
 * `_ARG`, `OTEL_SDK_DISABLED`) before any listener opens. Pure; `tracing.ts` installs what it says.
 */
import { bool, oneOf, optional, type Env } from './config.js';
import { OTLP_PROTOCOLS, TRACES_SAMPLERS, type OtlpProtocol } from './settings.js';

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

export type SamplerName = (typeof TRACES_SAMPLERS)[number];

/** OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (a ratio in [0, 1], default 1); a bad value is a startup error. */
function samplerFromEnv(env: Env): TracingConfig['sampler'] {
  const name = oneOf(env, 'OTEL_TRACES_SAMPLER', TRACES_SAMPLERS, 'parentbased_always_on');
  const arg = optional(env, 'OTEL_TRACES_SAMPLER_ARG');
  const ratio = arg === undefined || !name.endsWith('traceidratio') ? 1 : Number(arg);
  if (!(ratio >= 0 && ratio <= 1)) throw new Error(`OTEL_TRACES_SAMPLER_ARG must be a ratio between 0 and 1, got ${JSON.stringify(arg)}`);
  return name === 'parentbased_always_on' ? undefined : { name, ratio };
}

/** `OTEL_EXPORTER_OTLP_HEADERS` as the OTel spec writes it: `k1=v1,k2=v2`, keys and values URL-encoded. */
export function otlpHeaders(raw: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [i, pair] of raw.split(',').entries()) {
    if (!pair.trim()) continue;
    const eq = pair.indexOf('=');
    let key = '';
    let value = '';
    let malformed = false;
    try {
      key = decodeURIComponent(pair.slice(0, eq).trim());
      value = decodeURIComponent(pair.slice(eq + 1).trim());
    } catch {
      malformed = true;
    }
    if (malformed || eq <= 0 || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(key) || /[\r\n]/.test(value))
      // Never echo the entry: a header value is often a credential.
      throw new Error(`OTEL_EXPORTER_OTLP_HEADERS must be comma-separated key=value pairs; entry ${i + 1} is not`);
    out[key.toLowerCase()] = value;
  }
  return out;
}

/** Reads and validates OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS and _PROTOCOL, OTEL_TRACES_SAMPLER(_ARG) and OTEL_SDK_DISABLED (call before listening). */
export function tracingFromEnv(env: Env): TracingConfig {
  if (bool(env, 'OTEL_SDK_DISABLED', false)) return { mode: 'off' };
  const sampler = samplerFromEnv(env);
  const sampling = sampler ? { sampler } : {};
  const endpoint = optional(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  if (endpoint === undefined) return { mode: 'stdout', ...sampling };
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    throw new Error(`OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL, got ${JSON.stringify(endpoint)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new Error(`OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL, got ${JSON.stringify(endpoint)}`);
  const headers = otlpHeaders(optional(env, 'OTEL_EXPORTER_OTLP_HEADERS') ?? '');
  const protocol = oneOf(env, 'OTEL_EXPORTER_OTLP_PROTOCOL', OTLP_PROTOCOLS, OTLP_PROTOCOLS[0]);
  return { mode: 'otlp', endpoint: endpoint.replace(/\/+$/, ''), protocol, ...(Object.keys(headers).length ? { headers } : {}), ...sampling };
}
