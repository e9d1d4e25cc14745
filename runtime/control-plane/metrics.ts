/**
 * Control-plane Prometheus metrics on their own registry (never the global one, so several
 * control planes can live in one process, e.g. in tests). Label values are bounded: callers
 * pass registry names or `unknown`; `label()` maps anything else to `unknown`.
 *
 * The four SPEC 6 series keep their names, types and labels exactly; the decision histogram's
 * buckets start at 10 µs so sub-millisecond decisions resolve. The operator series (README
 * "Metrics") are gauges read from their sources at scrape time (`attach`), plus the
 * identity-authority call histogram and error counter fed by `observeIdentityCall`. The audit
 * shipping and chain series are registered by audit/metrics.ts on the same registry.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { metric } from '../lib/brand.js';
import { UNKNOWN_LABEL } from './decision/outcome.js';
import { scrapedUsage, type ScrapedMeter } from './budget/scrape.js';
import { TallyHistogram } from './tally-histogram.js';
import type { Budget } from './types.js';

/** Decision durations (seconds): 10 µs up to 2.5 s. */
export const DECISION_BUCKETS = [0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
/** Identity-authority call durations (seconds): 100 µs up to the 2 s default timeout and past it. */
export const IDENTITY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5];
/** Approval wait (seconds): a human answering, up to the 24 h longest hold. */
export const APPROVAL_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 900, 3600, 14_400, 86_400];

/** Budget dimensions as labelled (`dimension`), with the Budget field they read. */
export const BUDGET_DIMENSIONS = [
  ['tokens_per_hour', 'tokensPerHour', 'tokensLastHour'],
  ['calls_per_hour', 'callsPerHour', 'callsLastHour'],
  ['cost_usd_per_day', 'costUsdPerDay', 'costUsdLastDay'],
] as const;

/** What the operator gauges read at scrape time; each part is optional. */
export interface MetricSources {
  /** Registry entries (agents with a budget) and the policy version. */
  registry?: { list(): readonly { name: string; kind?: string; budget?: Budget }[]; readonly version?: number };
  budget?: ScrapedMeter;
  /** The egress approval queue (started after the plane: attached later). */
  approvals?: {
    list(o?: { status?: 'pending'; limit?: number }): Promise<readonly ApprovalView[]>;
    /** Each decision this replica makes, once (observed then: a restart or another replica never counts it again). */
    onDecided(listener: (outcome: string, waitedSeconds: number) => void): void;
  };
  now?: () => number;
}

export interface ApprovalView {
  id: string;
  status: string;
  requestedAt: string;
  decidedAt: string | null;
}

export type IdentityOutcome = 'ok' | 'error' | 'timeout' | 'http_error';

export interface ControlPlaneMetrics {
  readonly registry: Registry;
  observeDecision(service: string, allow: boolean, rule: string, seconds: number): void;
  recordUsage(agent: string, model: string, tokens: number, costUsd: number): void;
  /** One call to the identity authority: `operation` is a fixed route name (verify, check, ...). */
  observeIdentityCall(operation: string, seconds: number, outcome: IdentityOutcome): void;
  /** Adds (or replaces) sources of the scrape-time gauges. */
  attach(sources: MetricSources): void;
  /** Prometheus text exposition. */
  text(): Promise<string>;
  readonly contentType: string;
}

export interface MetricsOptions extends MetricSources {
  /** Is this a registry name? Labels outside the registry collapse to `unknown`. */
  known?: (name: string) => boolean;
  /** Also export process metrics (default false). */
  processMetrics?: boolean;
}

/** Approvals are listed at most this often however often /metrics is scraped (the portal polls it). */
const APPROVALS_CACHE_MS = 5000;

export function createMetrics(opts: MetricsOptions = {}): ControlPlaneMetrics {
  const registry = new Registry();
  const src: MetricSources = { ...opts };
  const now = () => (src.now ?? Date.now)();
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
  // Likewise the decision histogram: plain bucket counts per service, read by the registry as is.
  const duration = new TallyHistogram(
    metric('authz_duration_seconds'),
    'Time to decide, audit included, by target service.',
    'service',
    DECISION_BUCKETS,
    registry,
  );
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

  // --- operator series -----------------------------------------------------------------------
  const utilisation: Gauge<'agent' | 'dimension'> = new Gauge({
    name: metric('agent_budget_utilisation_ratio'),
    help: 'Share of an agent budget used in its rolling window (1 = exhausted), by agent and dimension; only dimensions with a ceiling.',
    labelNames: ['agent', 'dimension'] as const,
    registers: [registry],
    async collect() {
      utilisation.reset();
      const reg = src.registry;
      const usage = src.budget && (await scrapedUsage(src.budget, now()));
      if (!reg || !usage) return;
      for (const s of reg.list()) {
        if (s.kind !== 'agent' || !s.budget) continue;
        const used = usage(s.name);
        for (const [dimension, limit, field] of BUDGET_DIMENSIONS) {
          const max = s.budget[limit];
          if (max) utilisation.set({ agent: s.name, dimension }, used[field] / max);
        }
      }
    },
  });
  const version: Gauge = new Gauge({
    name: metric('policy_version'),
    help: 'Registry (policy snapshot) version this replica serves.',
    registers: [registry],
    collect() {
      const v = src.registry?.version;
      if (typeof v === 'number') version.set(v);
    },
  });
  let approvalsAt = Number.NEGATIVE_INFINITY;
  let approvalsRead: Promise<void> | undefined;
  const pendingGauge = new Gauge({
    name: metric('egress_approvals_pending'),
    help: 'Egress requests held for a human decision.',
    registers: [registry],
  });
  const oldest = new Gauge({
    name: metric('egress_approval_oldest_pending_seconds'),
    help: 'How long the oldest held egress request has been waiting (0 when none).',
    registers: [registry],
  });
  const wait = new Histogram({
    name: metric('egress_approval_wait_seconds'),
    help: 'Time from hold to decision of egress requests, by outcome (approved, denied, expired); observed by the replica that made the decision, when it made it.',
    labelNames: ['outcome'] as const,
    buckets: APPROVAL_BUCKETS,
    registers: [registry],
  });
  const readApprovals = async () => {
    const q = src.approvals;
    if (!q) return;
    const pending = await q.list({ status: 'pending', limit: 10_000 });
    const t = now();
    pendingGauge.set(pending.length);
    const first = pending.reduce((m, r) => Math.min(m, Date.parse(r.requestedAt)), Number.POSITIVE_INFINITY);
    oldest.set(Number.isFinite(first) ? Math.max(0, (t - first) / 1000) : 0);
  };
  const observed = new WeakSet<object>();
  const observeDecisions = (q: MetricSources['approvals']) => {
    if (!q || observed.has(q)) return;
    observed.add(q);
    q.onDecided((outcome, waited) => wait.observe({ outcome }, waited));
  };
  observeDecisions(src.approvals);

  const identityLatency = new Histogram({
    name: metric('identity_authority_request_duration_seconds'),
    help: 'Calls from the control plane to the identity authority, by operation and outcome.',
    labelNames: ['operation', 'outcome'] as const,
    buckets: IDENTITY_BUCKETS,
    registers: [registry],
  });
  const identityErrors = new Counter({
    name: metric('identity_authority_errors_total'),
    help: 'Failed identity-authority calls (network error, timeout or HTTP 5xx), by operation and kind.',
    labelNames: ['operation', 'kind'] as const,
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
      duration.observe(s, seconds);
    },
    recordUsage(agent, model, n, usd) {
      const a = label(agent);
      if (n > 0) tokens.inc({ agent: a, model: label(model) }, n);
      if (usd > 0) cost.inc({ agent: a }, usd);
    },
    observeIdentityCall(operation, seconds, outcome) {
      identityLatency.observe({ operation, outcome }, seconds);
      if (outcome !== 'ok') identityErrors.inc({ operation, kind: outcome });
    },
    attach(more) {
      Object.assign(src, more);
      observeDecisions(more.approvals);
    },
    async text() {
      // The approval queue lives in the store: read it at most every APPROVALS_CACHE_MS, and a
      // failing read leaves the last values (the scrape itself never fails on it).
      if (src.approvals && now() - approvalsAt >= APPROVALS_CACHE_MS) {
        approvalsAt = now();
        approvalsRead ??= readApprovals()
          .catch(() => {})
          .finally(() => (approvalsRead = undefined));
      }
      if (approvalsRead) await approvalsRead;
      return registry.metrics();
    },
  };
}
