/**
 * A budget meter for tests (SPEC 2.1, 8): tokens and calls over a sliding hour, USD over a
 * sliding day, all in memory, one process. The plane meters with the shared lease meter
 * (`meter.ts`); this one stands in for it where a test needs a meter and no ledger (decision,
 * metrics and broker tests). Each window is a ring of buckets; a window of span S with n buckets
 * counts the last n+1 buckets, so an event stays counted for at least S and at most S + S/n (the
 * meter errs towards denying, never towards letting spend through early). Zero or absent
 * ceilings mean no limit on that dimension.
 */
import type { Budget } from '../types.js';
import { DAY_MS, HOUR_MS, NO_USAGE, overBudget, type BudgetUsage } from './policy.js';
import type { BudgetMeter } from './ports.js';

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
