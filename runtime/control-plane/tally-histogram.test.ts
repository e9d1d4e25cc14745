import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { DECISION_BUCKETS } from './metrics.js';
import { TallyHistogram } from './tally-histogram.js';

describe('TallyHistogram', () => {
  it('exposes what prom-client Histogram exposes for the same observations', async () => {
    const [a, b] = [new Registry(), new Registry()];
    const reference = new Histogram({ name: 'd_seconds', help: 'Time.', labelNames: ['service'] as const, buckets: DECISION_BUCKETS, registers: [a] });
    const tally = new TallyHistogram('d_seconds', 'Time.', 'service', DECISION_BUCKETS, b);
    // Below the first bound, exactly on bounds, between them, above the last one; three services.
    const xs = [0, 0.000003, 0.00001, 0.000011, 0.0004, 0.0005, 0.02, 2.5, 7, 1e-7];
    xs.forEach((x, i) => {
      const service = ['web', 'orders', 'a"b\\c'][i % 3]!;
      reference.observe({ service }, x);
      tally.observe(service, x);
    });
    expect(await b.metrics()).toBe(await a.metrics());
    expect(await b.metrics()).toContain('d_seconds_bucket{le="0.00001",service="web"} 2');
  });

  it('does not count a non-finite value, and reset empties it', async () => {
    const r = new Registry();
    const tally = new TallyHistogram('d_seconds', 'Time.', 'service', [0.1, 1], r);
    tally.observe('web', Number.NaN);
    tally.observe('web', Number.POSITIVE_INFINITY);
    tally.observe('web', 0.5);
    expect(await r.metrics()).toContain('d_seconds_count{service="web"} 1');
    expect(await r.metrics()).toContain('d_seconds_sum{service="web"} 0.5');
    tally.reset();
    expect(await r.metrics()).not.toContain('service="web"');
  });

  it('keeps at most maxSeries label values, starting over past them', async () => {
    const r = new Registry();
    const tally = new TallyHistogram('d_seconds', 'Time.', 'service', [1], r, 2);
    for (const s of ['a', 'b', 'c']) tally.observe(s, 0.5);
    const text = await r.metrics();
    expect(text).toContain('service="c"');
    expect(text).not.toContain('service="a"');
  });
});
