/**
 * Tracing configuration (SPEC 6, 8): which mode (`otlp`, `stdout`, `off`), the OTLP/HTTP endpoint,
 * headers and protocol, and the sampler, from the OTel SDK's variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
 * `_HEADERS`, `_PROTOCOL`, `OTEL_TRACES_SAMPLER`, `_ARG`, `OTEL_SDK_DISABLED`) as settings.ts
 * declares them; checked by loadConfig before any listener opens. Pure; `tracing.ts` installs what
 * it says.
 */
import type { TracingConfig } from './config.js';

export type { TracingConfig, TracingMode } from './config.js';

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
export type SamplerName = (typeof TRACES_SAMPLERS)[number];

/** The tracing variables as declared (each already checked against its kind). */
export interface TracingSettings {
  disabled: boolean;
  endpoint?: string;
  headers?: string;
  protocol: OtlpProtocol;
  sampler: SamplerName;
  samplerArg?: string;
}

/** OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (a ratio in [0, 1], default 1); a bad ratio is a startup error. */
function samplerOf(name: SamplerName, arg: string | undefined): TracingConfig['sampler'] {
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

/** The tracing slice; throws naming the variable on an endpoint that is not http(s), bad headers or a bad ratio. */
export function tracingConfig(t: TracingSettings): TracingConfig {
  if (t.disabled) return { mode: 'off' };
  const sampler = samplerOf(t.sampler, t.samplerArg);
  const sampling = sampler ? { sampler } : {};
  if (t.endpoint === undefined) return { mode: 'stdout', ...sampling };
  let url: URL;
  try {
    url = new URL(t.endpoint);
  } catch {
    throw new Error(`OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL, got ${JSON.stringify(t.endpoint)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new Error(`OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL, got ${JSON.stringify(t.endpoint)}`);
  const headers = otlpHeaders(t.headers ?? '');
  return { mode: 'otlp', endpoint: t.endpoint.replace(/\/+$/, ''), protocol: t.protocol, ...(Object.keys(headers).length ? { headers } : {}), ...sampling };
}
