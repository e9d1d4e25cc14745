/**
 * Export settings against an in-test OTLP/HTTP receiver that decodes what arrives (otlp-testing.ts):
 * OTEL_EXPORTER_OTLP_PROTOCOL=http/json sends decision spans and SDK spans as JSON; one sampler
 * (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG) decides for both.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BRAND } from './brand.js';
import { close } from './http.js';
import { otlpReceiver } from './otlp-testing.js';
import { flushTracing, initTracing, injectTrace, shutdownTracing, startDecisionSpan, withSpan } from './tracing.js';
import { eventually } from './poll-testing.js';
import { newTraceparent, twoOrMore } from './tracing-testing.js';
import { loadConfig } from './settings.js';

const tracingOf = (env: Record<string, string | undefined>) => loadConfig(env).tracing;

describe('OTEL_EXPORTER_OTLP_PROTOCOL=http/json', () => {
  let rx: Awaited<ReturnType<typeof otlpReceiver>>;
  beforeAll(async () => {
    rx = await otlpReceiver();
    initTracing(tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: rx.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }), `${BRAND}-json`);
  });
  afterAll(async () => {
    await shutdownTracing();
    if (rx) await close(rx.server);
  });

  it('sends decision spans and SDK spans as JSON, with the same content', async () => {
    const gw = newTraceparent();
    const span = startDecisionSpan('authz', gw.traceparent);
    await span.run(() => withSpan('delegation.check', { [`${BRAND}.operation`]: 'delegation.check' }, () => Promise.resolve()));
    span.end({ rule: 'registry', allow: true, status: 200 });
    await flushTracing();
    const both = await twoOrMore(rx, gw.traceId, 'the decision and SDK spans');
    const decision = both.find((x) => x.name === 'authz')!;
    expect(decision).toMatchObject({ parentSpanId: gw.spanId, kind: 2, service: `${BRAND}-json` });
    expect(decision.attributes).toMatchObject({ [`${BRAND}.rule`]: 'registry', [`${BRAND}.decision`]: 'allow', 'http.response.status_code': 200 });
    expect(both.find((x) => x.name === 'delegation.check')!.parentSpanId).toBe(decision.spanId);
    expect(new Set(rx.got.map((g) => g.headers['content-type']))).toEqual(new Set(['application/json']));
  });
});

describe('sampling: one sampler for decision spans and SDK spans', () => {
  let rx: Awaited<ReturnType<typeof otlpReceiver>>;
  beforeAll(async () => {
    rx = await otlpReceiver();
  });
  afterAll(async () => {
    await shutdownTracing();
    await close(rx.server);
  });

  /** Runs a decision span named `name` (with an SDK child span inside); resolves with the traceparent it sends on. */
  async function decide(name: string, traceparent?: string): Promise<string> {
    const span = startDecisionSpan(name, traceparent);
    const sent = span.run(() => injectTrace({})).traceparent ?? '';
    await span.run(() => withSpan(`${name}-child`, {}, async () => {}));
    span.end({ rule: 'registry', allow: true });
    return sent;
  }
  const withSampler = async (OTEL_TRACES_SAMPLER: string, OTEL_TRACES_SAMPLER_ARG: string) => {
    await shutdownTracing();
    expect(initTracing(tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: rx.url, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG }), `${BRAND}-test`)).toBe(true);
  };
  const names = () => rx.spans.map((s) => s.name);

  it('parentbased_traceidratio 0: a trace Writ would start is not recorded (flags 00 travel on); a sampled gateway trace is', async () => {
    await withSampler('parentbased_traceidratio', '0');
    const gw = newTraceparent();
    expect(await decide('root-unsampled')).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
    expect(await decide('gateway-sampled', `00-${gw.traceId}-${gw.spanId}-01`)).toMatch(new RegExp(`^00-${gw.traceId}-[0-9a-f]{16}-01$`));
    await flushTracing();
    await eventually(() => rx.spans.find((s) => s.name === 'gateway-sampled-child'), 'the sampled child span');
    expect(names()).toContain('gateway-sampled');
    expect(names().filter((n) => n.startsWith('root-unsampled'))).toEqual([]);
  });

  it('traceidratio (not parent based): 0 records nothing even under a sampled gateway, 1 records a root', async () => {
    await withSampler('traceidratio', '0');
    const gw = newTraceparent();
    expect(await decide('ratio0-under-gateway', `00-${gw.traceId}-${gw.spanId}-01`)).toMatch(/-00$/);
    await withSampler('traceidratio', '1');
    expect(await decide('ratio1-root')).toMatch(/-01$/);
    await flushTracing();
    await eventually(() => rx.spans.find((s) => s.name === 'ratio1-root-child'), 'the ratio-1 child span');
    expect(names()).toContain('ratio1-root');
    expect(names().filter((n) => n.startsWith('ratio0-'))).toEqual([]);
  });
});
