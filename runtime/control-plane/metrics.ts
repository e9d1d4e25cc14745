/**
 * Control-plane Prometheus metrics (SPEC 6) on their own registry (never the global one, so
 * several control planes can live in one process, e.g. in tests). Label values are bounded:
 * callers pass registry names or `unknown`; `label()` maps anything else to `unknown`.
 */
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { metric } from '../lib/brand.js';
import type { DecisionMeter } from './decision/pipeline.js';
import { UNKNOWN_LABEL } from './decision/outcome.js';

export interface ControlPlaneMetrics extends DecisionMeter {
  readonly registry: Registry;
  recordUsage(agent: string, model: string, tokens: number, costUsd: number): void;
  /** Prometheus text exposition. */
  text(): Promise<string>;
  readonly contentType: string;
}

export interface MetricsOptions {
  /** Is this a registry name? Labels outside the registry collapse to `unknown`. */
  known?: (name: string) => boolean;
  /** Also export process metrics (default false). */
  processMetrics?: boolean;
}

export function createMetrics(opts: MetricsOptions = {}): ControlPlaneMetrics {
  const registry = new Registry();
  const label = (v: string) => (v && (!opts.known || opts.known(v)) ? v : UNKNOWN_LABEL);
  // Decision counts are kept in plain per-label-set tallies on the hot path (a prom-client inc
  // hashes and validates its labels on every call) and folded into the counter when it is read.
  const tallies = new Map<string, { labels: { service: string; decision: string; rule: string }; n: number }>();
  const decisions: Counter<'service' | 'decision' | 'rule'> = new Counter({
    name: metric('authz_decisions_total'),
    help: 'Decisions of /authz and the forward proxy, by target service, decision and deciding rule.',
    labelNames: ['service', 'decision', 'rule'] as const,
    registers: [registry],
    collect() {
      for (const t of tallies.values()) decisions.inc(t.labels, t.n);
      tallies.clear();
    },
  });
  /** Histogram label objects by service, reused across observations. */
  const serviceLabels = new Map<string, { service: string }>();
  const duration = new Histogram({
    name: metric('authz_duration_seconds'),
    help: 'Time to decide, audit included, by target service.',
    labelNames: ['service'] as const,
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  const tokens = new Counter({
    name: metric('token_usage_total'),
    help: 'LLM tokens reported through /v1/usage, by agent and model.',
    labelNames: ['agent', 'model'] as const,
    registers: [registry],
  });
  const cost = new Counter({
    name: metric('agent_cost_usd_total'),
    help: 'USD spend reported through /v1/usage, by agent.',
    labelNames: ['agent'] as const,
    registers: [registry],
  });
  if (opts.processMetrics) collectDefaultMetrics({ register: registry, prefix: metric('') });

  return {
    registry,
    contentType: registry.contentType,
    observeDecision(service, allow, rule, seconds) {
      const s = label(service);
      const decision = allow ? 'allow' : 'deny';
      const key = `${s}\u0000${decision}\u0000${rule}`;
      const t = tallies.get(key);
      if (t) t.n++;
      else tallies.set(key, { labels: { service: s, decision, rule }, n: 1 });
      let sl = serviceLabels.get(s);
      if (!sl) {
        // Bounded by the registry's names; a registry that churned through many names starts over.
        if (serviceLabels.size >= 10_000) serviceLabels.clear();
        sl = { service: s };
        serviceLabels.set(s, sl);
      }
      duration.observe(sl, seconds);
    },
    recordUsage(agent, model, n, usd) {
      const a = label(agent);
      if (n > 0) tokens.inc({ agent: a, model: label(model) }, n);
      if (usd > 0) cost.inc({ agent: a }, usd);
    },
    text: () => registry.metrics(),
  };
}
