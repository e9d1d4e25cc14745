/**
 * Agent budget meters (SPEC 2.1, 8): tokens and calls over a sliding hour, USD over a sliding
 * day, all in memory (the hot path never waits on the database). Each window is a ring of
 * buckets; a window of span S with n buckets counts the last n+1 buckets, so an event stays
 * counted for at least S and at most S + S/n (the meter errs towards denying, never towards
 * letting spend through early). Zero or absent ceilings mean no limit on that dimension.
 */
import type { Budget } from './types.js';
import { overBudget } from './decision/egress.js';

export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;

interface Window {
  bucketMs: number;
  idx: Float64Array;
  val: Float64Array;
}

function newWindow(spanMs: number, buckets: number): Window {
  const w = { bucketMs: spanMs / buckets, idx: new Float64Array(buckets + 1), val: new Float64Array(buckets + 1) };
  w.idx.fill(-Infinity);
  return w;
}

function addTo(w: Window, now: number, v: number): void {
  const b = Math.floor(now / w.bucketMs);
  const i = b % w.idx.length;
  if (w.idx[i] !== b) {
    w.idx[i] = b;
    w.val[i] = 0;
  }
  w.val[i] = (w.val[i] ?? 0) + v;
}

function sumOf(w: Window, now: number): number {
  const b = Math.floor(now / w.bucketMs);
  const oldest = b - (w.idx.length - 1);
  let s = 0;
  for (let i = 0; i < w.idx.length; i++) {
    const k = w.idx[i] ?? -Infinity;
    if (k >= oldest && k <= b) s += w.val[i] ?? 0;
  }
  return s;
}

interface AgentMeter {
  tokens: Window;
  calls: Window;
  cost: Window;
}

/** One dimension of an agent's budget now: `limit` 0 means no limit (`remaining` null). */
export interface DimensionStatus {
  limit: number;
  used: number;
  remaining: number | null;
  windowSeconds: number;
}

/** The agent budget's dimensions, keyed by their Budget field. */
export type BudgetStatus = Record<'tokensPerHour' | 'callsPerHour' | 'costUsdPerDay', DimensionStatus>;

const round9 = (n: number) => Math.round(n * 1e9) / 1e9;

/** Limit, use and what is left of each dimension (never negative: an overrun reads 0). */
export function budgetStatus(budget: Budget | undefined, u: BudgetUsage): BudgetStatus {
  const dim = (limit: number | undefined, used: number, spanMs: number): DimensionStatus => {
    const l = limit ?? 0;
    return { limit: l, used: round9(used), remaining: l > 0 ? round9(Math.max(0, l - used)) : null, windowSeconds: spanMs / 1000 };
  };
  return {
    tokensPerHour: dim(budget?.tokensPerHour, u.tokensLastHour, HOUR_MS),
    callsPerHour: dim(budget?.callsPerHour, u.callsLastHour, HOUR_MS),
    costUsdPerDay: dim(budget?.costUsdPerDay, u.costUsdLastDay, DAY_MS),
  };
}

export interface BudgetUsage {
  tokensLastHour: number;
  callsLastHour: number;
  costUsdLastDay: number;
}

/** Nothing used (an agent with no meter yet). */
export const NO_USAGE: Readonly<BudgetUsage> = Object.freeze({ tokensLastHour: 0, callsLastHour: 0, costUsdLastDay: 0 });

/** A meter the budget gauges read: its own usage, and the whole fleet's when it shares a ledger. */
export interface ScrapedMeter {
  usage(agent: string, now: number): BudgetUsage;
  fleetUsage?(): Promise<ReadonlyMap<string, BudgetUsage>>;
}

/**
 * The usage the budget gauges show at a scrape: the fleet's, read from the ledger, when the
 * meter shares one (a replica's own view of an agent it no longer serves goes stale, and a
 * `max` over replicas would keep showing it); undefined when the ledger cannot be read, so the
 * series are left out rather than shown stale.
 */
export async function scrapedUsage(meter: ScrapedMeter, now: number): Promise<((agent: string) => BudgetUsage) | undefined> {
  if (!meter.fleetUsage) return (agent) => meter.usage(agent, now);
  const fleet = await meter.fleetUsage().catch(() => undefined);
  return fleet && ((agent) => fleet.get(agent) ?? NO_USAGE);
}

/** Egress rate ceilings. `reserveCall` counts one call now; the function it returns undoes it. */
export interface BudgetPort {
  /** Undefined when within budget, else a reason naming the exceeded dimension. */
  check(agent: string, budget: Budget | undefined, now: number): string | undefined;
  reserveCall(agent: string, now: number): () => void;
}

export interface BudgetMeter extends BudgetPort {
  /** Adds a usage report (tokens and USD) to the agent's windows. */
  recordUsage(agent: string, tokens: number, costUsd: number, now: number): void;
  /** Current window totals of an agent (zeros when never seen). */
  usage(agent: string, now: number): BudgetUsage;
  /** Number of agents metered (bounded by maxAgents). */
  size(): number;
}

export interface BudgetMeterOptions {
  /** Buckets per hour window (default 60: one-minute resolution). */
  hourBuckets?: number;
  /** Buckets per day window (default 96: fifteen-minute resolution). */
  dayBuckets?: number;
  /** Bound on metered agents; idle meters are dropped first (default 100 000). */
  maxAgents?: number;
}

export function createBudgetMeter(opts: BudgetMeterOptions = {}): BudgetMeter {
  const hourBuckets = opts.hourBuckets ?? 60;
  const dayBuckets = opts.dayBuckets ?? 96;
  const maxAgents = opts.maxAgents ?? 100_000;
  const meters = new Map<string, AgentMeter>();

  const idle = (m: AgentMeter, now: number) => sumOf(m.tokens, now) === 0 && sumOf(m.calls, now) === 0 && sumOf(m.cost, now) === 0;

  function meterFor(agent: string, now: number): AgentMeter {
    let m = meters.get(agent);
    if (m) return m;
    if (meters.size >= maxAgents) {
      for (const [k, v] of meters) if (idle(v, now)) meters.delete(k);
      // Still full: drop the oldest-created meter rather than grow without bound.
      if (meters.size >= maxAgents) {
        const oldest = meters.keys().next();
        if (!oldest.done) meters.delete(oldest.value);
      }
    }
    m = { tokens: newWindow(HOUR_MS, hourBuckets), calls: newWindow(HOUR_MS, hourBuckets), cost: newWindow(DAY_MS, dayBuckets) };
    meters.set(agent, m);
    return m;
  }

  function usage(agent: string, now: number): BudgetUsage {
    const m = meters.get(agent);
    if (!m) return NO_USAGE;
    return { tokensLastHour: sumOf(m.tokens, now), callsLastHour: sumOf(m.calls, now), costUsdLastDay: sumOf(m.cost, now) };
  }

  return {
    check(agent: string, budget: Budget | undefined, now: number): string | undefined {
      // Audit mode never denies: the decision records what enforce would have denied.
      if (!budget || budget.mode === 'audit' || !meters.has(agent)) return undefined;
      return overBudget(usage(agent, now), budget);
    },
    reserveCall(agent: string, now: number): () => void {
      addTo(meterFor(agent, now).calls, now, 1);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        // Undo in the bucket the call landed in, if it is still in the ring.
        const m = meters.get(agent);
        if (m) {
          const b = Math.floor(now / m.calls.bucketMs);
          const i = b % m.calls.idx.length;
          if (m.calls.idx[i] === b) m.calls.val[i] = Math.max(0, (m.calls.val[i] ?? 0) - 1);
        }
      };
    },
    recordUsage(agent: string, tokens: number, costUsd: number, now: number): void {
      if (!(tokens >= 0) || !(costUsd >= 0) || !Number.isFinite(tokens) || !Number.isFinite(costUsd)) return;
      const m = meterFor(agent, now);
      if (tokens > 0) addTo(m.tokens, now, tokens);
      if (costUsd > 0) addTo(m.cost, now, costUsd);
    },
    usage,
    size: () => meters.size,
  };
}
