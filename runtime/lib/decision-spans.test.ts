import http from 'node:http';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { DecisionSpanWriter, nowUs, otlpJson, randomId, type DecisionRow } from './decision-spans.js';
import { close, listen } from './http.js';
import { ByteWriter, otlpProto } from './otlp-proto.js';
import { decodeExport, otlpReceiver } from './otlp-testing.js';

const row = (i: number, attrs: DecisionRow['attrs'] = { rule: 'registry', allow: true }): DecisionRow => ({
  traceId: randomId(16),
  spanId: randomId(8),
  parentSpanId: i % 2 ? randomId(8) : undefined,
  name: 'authz',
  start: 1_700_000_000_123_250,
  end: 1_700_000_000_124_500,
  attrs,
});

/** A collector (otlp-testing.ts) whose url is the writer's: `<base>/v1/traces`. */
async function collector(status: number | number[] = 200, headers: Record<string, string> = {}) {
  const rx = await otlpReceiver(status, headers);
  return { ...rx, url: `${rx.url}/v1/traces`, count: () => rx.spans.length };
}

describe('decision span encoding', () => {
  it('reads the clock in integer epoch microseconds', () => {
    const t = nowUs();
    expect(Number.isInteger(t)).toBe(true);
    expect(Math.abs(t / 1000 - Date.now())).toBeLessThan(50);
  });

  it('makes random hex ids of W3C length, never repeating', () => {
    const ids = new Set(Array.from({ length: 5000 }, () => randomId(8)));
    expect(ids.size).toBe(5000);
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{16}$/);
    expect(randomId(16)).toMatch(/^[0-9a-f]{32}$/);
  });

  it('is a valid ExportTraceServiceRequest: resource, scope, ids, kind, times, typed attributes', () => {
    const r = row(1, {
      rule: 'delegation',
      allow: false,
      service: 'le"dger',
      actor: 'bøt \ud83d',
      action: 'POST /x',
      status: 403,
      reason: 'line\nbreak \\ "q"',
    });
    const json = otlpJson({ 'service.name': 'writ-cp', 'deployment.replicas': 3, sampled: true }, 'writ');
    const doc = JSON.parse(json.head + [r, row(2)].map(json.span).join(',') + json.tail) as {
      resourceSpans: { resource: { attributes: unknown[] }; scopeSpans: { scope: { name: string }; spans: Record<string, unknown>[] }[] }[];
    };
    const rs = doc.resourceSpans[0]!;
    expect(rs.resource.attributes).toEqual([
      { key: 'service.name', value: { stringValue: 'writ-cp' } },
      { key: 'deployment.replicas', value: { intValue: 3 } },
      { key: 'sampled', value: { boolValue: true } },
    ]);
    expect(rs.scopeSpans[0]!.scope.name).toBe('writ');
    const [a, b] = rs.scopeSpans[0]!.spans;
    expect(a).toMatchObject({
      traceId: r.traceId,
      spanId: r.spanId,
      parentSpanId: r.parentSpanId,
      name: 'authz',
      kind: 2,
      startTimeUnixNano: '1700000000123250000',
      endTimeUnixNano: '1700000000124500000',
    });
    expect(a!.attributes).toEqual([
      { key: 'writ.rule', value: { stringValue: 'delegation' } },
      { key: 'writ.decision', value: { stringValue: 'deny' } },
      { key: 'writ.service', value: { stringValue: 'le"dger' } },
      { key: 'writ.actor', value: { stringValue: 'bøt \ud83d' } },
      { key: 'writ.action', value: { stringValue: 'POST /x' } },
      { key: 'http.response.status_code', value: { intValue: 403 } },
      { key: 'writ.reason', value: { stringValue: 'line\nbreak \\ "q"' } },
    ]);
    expect(b).not.toHaveProperty('parentSpanId');
  });

  /** One request body from `rows`, in each encoding, decoded as a collector does. */
  const both = (rows: DecisionRow[], resource: Record<string, string | number | boolean> = { 'service.name': 'writ-cp' }) => {
    const json = otlpJson(resource, 'writ');
    const proto = otlpProto(resource, 'writ');
    const w = new ByteWriter(16);
    proto.begin(w);
    for (const r of rows) proto.span(w, r);
    return {
      json: decodeExport('application/json', Buffer.from(json.head + rows.map(json.span).join(',') + json.tail)),
      proto: decodeExport('application/x-protobuf', Buffer.from(proto.end(w))),
    };
  };

  it('writes protobuf that decodes to the same spans as the JSON: ids as bytes, exact nanoseconds, typed attributes', () => {
    const r = row(1, { rule: 'delegation', allow: false, service: 'le"dger', actor: 'bøt 🤖', action: 'POST /x', status: 403, reason: 'x'.repeat(300) });
    // Past 2^53 ns: the fixed64 times are exact, not rounded through a double.
    const late = { ...row(2, { allow: true, status: 200 }), start: 4_102_444_800_123_457, end: 4_102_444_800_999_999 };
    const { json, proto } = both([r, late], { 'service.name': 'writ-cp', 'deployment.replicas': 3, sampled: true, weight: 0.5 });
    expect(proto).toEqual(json);
    expect(proto[0]).toMatchObject({ traceId: r.traceId, spanId: r.spanId, parentSpanId: r.parentSpanId, kind: 2, start: '1700000000123250000' });
    expect(proto[0]!.resource).toEqual({ 'service.name': 'writ-cp', 'deployment.replicas': 3, sampled: true, weight: 0.5 });
    expect(proto[0]!.attributes).toMatchObject({
      'writ.actor': 'bøt 🤖',
      'writ.reason': 'x'.repeat(300),
      'http.response.status_code': 403,
      'writ.decision': 'deny',
    });
    expect(proto[1]).toMatchObject({ start: '4102444800123457000', end: '4102444800999999000', parentSpanId: undefined });
  });

  it('protobuf and JSON agree on any attribute text and time (property)', () => {
    const text = fc.string({ unit: 'binary', maxLength: 200 });
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            rule: text,
            service: fc.option(text, { nil: undefined }),
            reason: fc.option(fc.string({ unit: 'binary', maxLength: 20_000 }), { nil: undefined }),
            status: fc.option(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { nil: undefined }),
            start: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER - 10 ** 6 }),
          }),
          { minLength: 1, maxLength: 5 },
        ),
        (specs) => {
          const rows = specs.map((x, i) => ({
            ...row(i, { rule: x.rule, service: x.service, reason: x.reason, status: x.status, allow: i % 2 === 0 }),
            start: x.start,
            end: x.start + 1000,
          }));
          const { json, proto } = both(rows);
          expect(proto).toEqual(json);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('DecisionSpanWriter', () => {
  let cleanup: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanup.reverse()) await c();
    cleanup = [];
  });

  it.each(['http/protobuf', 'http/json'] as const)('%s: sends a full batch at once and the rest on flush, with the configured headers', async (protocol) => {
    const rx = await collector();
    cleanup.push(() => close(rx.server));
    const w = new DecisionSpanWriter({
      url: rx.url,
      headers: { authorization: 'Bearer t' },
      resource: { 'service.name': 's' },
      brand: 'writ',
      protocol,
      batchSize: 10,
      delayMs: 60_000,
    });
    cleanup.push(() => w.close());
    // Big spans among them: a body outgrows its first buffer (64 KiB), and buffers are reused.
    for (let i = 0; i < 25; i++) w.add(row(i, i % 3 ? undefined : { rule: 'r', reason: 'ü'.repeat(9000) }));
    // Two full batches go without waiting for the timer (60 s away); five wait. Polled, not slept:
    // a loaded machine may take longer than any fixed pause to deliver them.
    const end = Date.now() + 5000;
    while (rx.count() < 20 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    expect(rx.count()).toBe(20);
    await w.flush();
    expect(rx.count()).toBe(25);
    expect(rx.got.map((g) => g.spans.length)).toEqual([10, 10, 5]);
    const reasons = rx.spans.map((x) => x.attributes['writ.reason']);
    expect(reasons.filter((x) => x === 'ü'.repeat(9000))).toHaveLength(9);
    expect(rx.spans.every((x) => x.service === 's' && x.scope === 'writ' && x.name === 'authz')).toBe(true);
    const type = protocol === 'http/json' ? 'application/json' : 'application/x-protobuf';
    expect(rx.got[0]!.headers).toMatchObject({ authorization: 'Bearer t', 'content-type': type });
    expect(w.dropped).toBe(0);
  });

  it('sends what is queued every delayMs', async () => {
    const rx = await collector();
    cleanup.push(() => close(rx.server));
    const w = new DecisionSpanWriter({ url: rx.url, resource: {}, brand: 'writ', delayMs: 50 });
    cleanup.push(() => w.close());
    w.add(row(1));
    const end = Date.now() + 5000;
    while (rx.count() < 1 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    expect(rx.count()).toBe(1);
  });

  it('retries a transient failure (with the Retry-After given), never a refusal', async () => {
    const flaky = await collector([503, 502, 200], { 'retry-after': '0' });
    cleanup.push(() => close(flaky.server));
    const w = new DecisionSpanWriter({ url: flaky.url, resource: {}, brand: 'writ', delayMs: 60_000, retryDelayMs: 60_000 });
    cleanup.push(() => w.close());
    for (let i = 0; i < 3; i++) w.add(row(i));
    await w.flush(); // two retries, each after Retry-After: 0 rather than the 60 s pause
    expect(flaky.got).toHaveLength(3);
    expect(flaky.count()).toBe(9); // the same three spans, sent three times
    expect(w.dropped).toBe(0);

    const refusing = await collector(400);
    cleanup.push(() => close(refusing.server));
    const r = new DecisionSpanWriter({ url: refusing.url, resource: {}, brand: 'writ', delayMs: 60_000, retryDelayMs: 1 });
    cleanup.push(() => r.close());
    r.add(row(1));
    await r.flush();
    expect(refusing.got).toHaveLength(1);
    expect(r.dropped).toBe(1);
  });

  it('drops and counts beyond its queue bound and when the endpoint refuses or is gone, never throwing', async () => {
    const rx = await collector(503);
    cleanup.push(() => close(rx.server));
    const w = new DecisionSpanWriter({ url: rx.url, resource: {}, brand: 'writ', maxQueue: 5, batchSize: 100, delayMs: 60_000, retryDelayMs: 5 });
    for (let i = 0; i < 8; i++) w.add(row(i));
    expect(w.dropped).toBe(3);
    await w.flush();
    expect(rx.got).toHaveLength(3); // the first attempt and two retries
    expect(w.dropped).toBe(8);
    await w.close();

    // A writer closing while a batch waits to be retried makes one last attempt, not the pause.
    const down = await collector(503);
    cleanup.push(() => close(down.server));
    const waiting = new DecisionSpanWriter({ url: down.url, resource: {}, brand: 'writ', delayMs: 60_000, retryDelayMs: 60_000 });
    waiting.add(row(1));
    const flushed = waiting.flush();
    // Closed once the writer is in its retry pause (the 503 read, not only the request sent): a
    // close while the first attempt is still in flight ends with that attempt, no retry.
    const pausing = () => (waiting as unknown as { wake?: () => void }).wake !== undefined;
    while (down.got.length < 1 || !pausing()) await new Promise((r) => setTimeout(r, 5));
    const t0 = Date.now();
    await waiting.close();
    await flushed;
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(down.got).toHaveLength(2);
    expect(waiting.dropped).toBe(1);

    // Closing against an endpoint that never answers: the first timed-out batch drops the rest,
    // instead of each of the four batches waiting out its own timeout.
    let requests = 0;
    const silent = http.createServer(() => void requests++);
    const port = await listen(silent, '127.0.0.1:0');
    cleanup.push(async () => {
      silent.closeAllConnections();
      await close(silent);
    });
    const stuck = new DecisionSpanWriter({
      url: `http://127.0.0.1:${port}/v1/traces`,
      resource: {},
      brand: 'writ',
      batchSize: 2,
      delayMs: 60_000,
      timeoutMs: 300,
    });
    for (let i = 0; i < 7; i++) stuck.add(row(i));
    await stuck.close();
    expect(stuck.dropped).toBe(7);
    expect(requests).toBe(1);
  });
});
