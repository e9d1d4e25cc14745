/**
 * Tracing configuration from the environment (tracing-config.ts, through loadConfig): OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SDK_DISABLED, the sampler, the protocol and the
 * headers, each validated.
 */
import { describe, expect, it } from 'vitest';
import { otlpHeaders } from './tracing-config.js';
import { loadConfig } from './settings.js';

const tracingOf = (env: Record<string, string | undefined>) => loadConfig(env).tracing;

describe('tracing config', () => {
  it('reads OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SDK_DISABLED, refusing a bad endpoint', () => {
    expect(tracingOf({})).toEqual({ mode: 'stdout' });
    expect(tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: '' })).toEqual({ mode: 'stdout' });
    expect(tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
      mode: 'otlp',
      endpoint: 'http://collector:4318',
      protocol: 'http/protobuf',
    });
    expect(tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' })).toEqual({ mode: 'off' });
    expect(() => tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toThrow(/OTEL_EXPORTER_OTLP_ENDPOINT/);
    expect(() => tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://c' })).toThrow(/OTEL_EXPORTER_OTLP_ENDPOINT/);
    expect(() => tracingOf({ OTEL_SDK_DISABLED: 'maybe' })).toThrow(/OTEL_SDK_DISABLED/);
  });

  it('reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, refusing an unknown sampler or a ratio outside [0, 1]', () => {
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' };
    expect(tracingOf({ ...env, OTEL_TRACES_SAMPLER: 'parentbased_always_on' })).toEqual({
      mode: 'otlp',
      endpoint: 'http://c:4318',
      protocol: 'http/protobuf',
    });
    expect(tracingOf({ ...env, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25' })).toEqual({
      mode: 'otlp',
      endpoint: 'http://c:4318',
      protocol: 'http/protobuf',
      sampler: { name: 'parentbased_traceidratio', ratio: 0.25 },
    });
    expect(tracingOf({ OTEL_TRACES_SAMPLER: 'traceidratio' })).toEqual({ mode: 'stdout', sampler: { name: 'traceidratio', ratio: 1 } });
    expect(tracingOf({ OTEL_TRACES_SAMPLER: 'always_off', OTEL_TRACES_SAMPLER_ARG: 'ignored' }).sampler).toEqual({ name: 'always_off', ratio: 1 });
    expect(() => tracingOf({ OTEL_TRACES_SAMPLER: 'sometimes' })).toThrow(/OTEL_TRACES_SAMPLER must be one of/);
    for (const bad of ['1.5', '-0.1', 'half', '0x'])
      expect(() => tracingOf({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: bad }), bad).toThrow(/OTEL_TRACES_SAMPLER_ARG/);
  });

  it('reads OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the OTLP default) or http/json; grpc is refused', () => {
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' };
    expect(tracingOf({ ...env, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }).protocol).toBe('http/json');
    expect(tracingOf({ ...env, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf' }).protocol).toBe('http/protobuf');
    expect(() => tracingOf({ ...env, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toThrow(/OTEL_EXPORTER_OTLP_PROTOCOL must be one of http\/protobuf, http\/json/);
  });

  it('reads OTEL_EXPORTER_OTLP_HEADERS as the OTel spec writes it, never echoing a bad entry', () => {
    expect(tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_HEADERS: 'Authorization=Bearer%20s3cret, x-tenant = a%2Cb' })).toEqual({
      mode: 'otlp',
      endpoint: 'http://c:4318',
      protocol: 'http/protobuf',
      headers: { authorization: 'Bearer s3cret', 'x-tenant': 'a,b' },
    });
    expect(otlpHeaders('')).toEqual({});
    for (const bad of ['s3cret-token', '=v', 'bad key=v', 'k=%E0%A4%A', 'k=a%0D%0Ab'])
      expect(() => otlpHeaders(`ok=1,${bad}`), bad).toThrow(/^OTEL_EXPORTER_OTLP_HEADERS must be .*entry 2 is not$/);
  });
});
