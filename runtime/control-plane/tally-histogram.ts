/**
 * A Prometheus histogram with one label, kept as plain bucket counts per label value. Observing
 * is a bound search and three increments; prom-client's `Histogram.observe` converts, validates
 * and hashes its label object on every call, which was the largest metric cost of an `/authz`
 * decision. Registered on a prom-client `Registry` like any metric: `get()` answers what
 * prom-client's histogram answers (buckets cumulative, `+Inf`, `_sum`, `_count`), so the
 * exposition text is the same.
 */
import type { Metric, Registry } from 'prom-client';

/** One sample as prom-client's registry formats it. */
interface Sample {
  metricName: string;
  labels: Record<string, string | number>;
  value: number;
}

interface Series {
  counts: Float64Array;
  sum: number;
  count: number;
}

export class TallyHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly series = new Map<string, Series>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly label: string,
    private readonly bounds: readonly number[],
    registry: Registry,
    /** Label values kept at most; past it the series start over (label values are registry names). */
    private readonly maxSeries = 10_000,
  ) {
    registry.registerMetric(this as unknown as Metric);
  }

  /** Counts `x` for label value `value`; a non-finite `x` is not counted (prom-client throws). */
  observe(value: string, x: number): void {
    if (!Number.isFinite(x)) return;
    let s = this.series.get(value);
    if (!s) {
      if (this.series.size >= this.maxSeries) this.series.clear();
      s = { counts: new Float64Array(this.bounds.length), sum: 0, count: 0 };
      this.series.set(value, s);
    }
    const b = this.bounds;
    let i = 0;
    while (i < b.length && x > b[i]!) i++;
    if (i < b.length) s.counts[i]!++;
    s.sum += x;
    s.count++;
  }

  get(): Promise<{ name: string; help: string; type: 'histogram'; values: Sample[]; aggregator: 'sum' }> {
    const values: Sample[] = [];
    const bucket = `${this.name}_bucket`;
    for (const [v, s] of this.series) {
      let acc = 0;
      this.bounds.forEach((le, i) => {
        acc += s.counts[i]!;
        values.push({ metricName: bucket, labels: { le, [this.label]: v }, value: acc });
      });
      values.push({ metricName: bucket, labels: { le: '+Inf', [this.label]: v }, value: s.count });
      values.push({ metricName: `${this.name}_sum`, labels: { [this.label]: v }, value: s.sum });
      values.push({ metricName: `${this.name}_count`, labels: { [this.label]: v }, value: s.count });
    }
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator });
  }

  reset(): void {
    this.series.clear();
  }
}
