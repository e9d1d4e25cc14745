import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { DecisionSpanWriter, nowUs, otlpJson, randomId, type DecisionRow } from './decision-spans.js';
import { close, listen } from './http.js';

const row = (i: number, attrs: DecisionRow['attrs'] = { rule: 'registry', allow: true }): DecisionRow => ({
  traceId: randomId(16),
  spanId: randomId(8),
  parentSpanId: i % 2 ? randomId(8) : undefined,
  name: 'authz',
  start: 1_700_000_000_123_250,
  end: 1_700_000_000_124_500,
  attrs,
});

/** A collector that records each request: headers and the parsed body, answering `status` (in turn, the last one repeating). */
async function collector(status: number | number[] = 200, headers: Record<string, string> = {}) {
  const answers = Array.isArray(status) ? [...status] : [status];
  const got: { headers: http.IncomingHttpHeaders; body: { resourceSpans: { scopeSpans: { spans: unknown[] }[] }[] } }[] = [];
  const server = http.createServer((req, res) => {
    // Decoded once whole: a multi-byte character can straddle two chunks.
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      got.push({ headers: req.headers, body: JSON.parse(Buffer.concat(chunks).toString()) as (typeof got)[number]['body'] });
      res.writeHead(answers.length > 1 ? answers.shift()! : answers[0]!, headers).end('{}');
    });
  });
  const port = await listen(server, '127.0.0.1:0');
  const spans = () => got.reduce((n, g) => n + g.body.resourceSpans[0]!.scopeSpans[0]!.spans.length, 0);
  return { url: `http://127.0.0.1:${port}/v1/traces`, got, spans, server };
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
});

describe('DecisionSpanWriter', () => {
  let cleanup: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanup.reverse()) await c();
    cleanup = [];
  });

  it('sends a full batch at once and the rest on flush, with the configured headers', async () => {
    const rx = await collector();
    cleanup.push(() => close(rx.server));
    const w = new DecisionSpanWriter({
      url: rx.url,
      headers: { authorization: 'Bearer t' },
      resource: { 'service.name': 's' },
      brand: 'writ',
      batchSize: 10,
      delayMs: 60_000,
    });
    cleanup.push(() => w.close());
    // Big spans among them: a body outgrows its first buffer (64 KiB), and buffers are reused.
    for (let i = 0; i < 25; i++) w.add(row(i, i % 3 ? undefined : { rule: 'r', reason: 'ü'.repeat(9000) }));
    await new Promise((r) => setTimeout(r, 200));
    // Two full batches went without waiting for the timer; five wait.
    expect(rx.spans()).toBe(20);
    await w.flush();
    expect(rx.spans()).toBe(25);
    expect(rx.got.map((g) => g.body.resourceSpans[0]!.scopeSpans[0]!.spans.length)).toEqual([10, 10, 5]);
    const reasons = rx.got.flatMap((g) =>
      g.body.resourceSpans[0]!.scopeSpans[0]!.spans.map(
        (x) => (x as { attributes: { key: string; value: { stringValue?: string } }[] }).attributes.find((a) => a.key === 'writ.reason')?.value.stringValue,
      ),
    );
    expect(reasons.filter((x) => x === 'ü'.repeat(9000))).toHaveLength(9);
    expect(rx.got[0]!.headers).toMatchObject({ authorization: 'Bearer t', 'content-type': 'application/json' });
    expect(w.dropped).toBe(0);
  });

  it('sends what is queued every delayMs', async () => {
    const rx = await collector();
    cleanup.push(() => close(rx.server));
    const w = new DecisionSpanWriter({ url: rx.url, resource: {}, brand: 'writ', delayMs: 50 });
    cleanup.push(() => w.close());
    w.add(row(1));
    const end = Date.now() + 5000;
    while (rx.spans() < 1 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    expect(rx.spans()).toBe(1);
  });

  it('retries a transient failure (with the Retry-After given), never a refusal', async () => {
    const flaky = await collector([503, 502, 200], { 'retry-after': '0' });
    cleanup.push(() => close(flaky.server));
    const w = new DecisionSpanWriter({ url: flaky.url, resource: {}, brand: 'writ', delayMs: 60_000, retryDelayMs: 60_000 });
    cleanup.push(() => w.close());
    for (let i = 0; i < 3; i++) w.add(row(i));
    await w.flush(); // two retries, each after Retry-After: 0 rather than the 60 s pause
    expect(flaky.got).toHaveLength(3);
    expect(flaky.spans()).toBe(9); // the same three spans, sent three times
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
