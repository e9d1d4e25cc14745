/**
 * The shared meter on the decision path: the usage a decision reads (at hand, or after one take
 * shared by every decision waiting on it), the budget check, and the call counted from this
 * replica's lease of calls (beyond it, owed while a refill is in flight, at most one lease size).
 */
import type { Budget } from '../types.js';
import { DIMS, giveBackLater, oweCall, serial, undoOwed, unwritten, usageOf, used, type AgentState } from './lease.js';
import { sync, takeNow } from './ledger-take.js';
import type { MeterState } from './meter-state.js';
import { enforcing, limitOf, overBudget, type BudgetUsage } from './policy.js';
import type { BudgetPort } from './ports.js';

export interface CallLease extends BudgetPort {
  /** The decision's read: at hand, or a promise when the view is missing or stale or the lease is empty. */
  decisionUsage(agent: string, now: number): BudgetUsage | Promise<BudgetUsage>;
}

/**
 * Waits for the calls lease to be refilled. Every decision that finds it empty joins the group
 * gathering for the next take, which asks for all of them plus a lease once it runs (after the
 * take in flight): one ledger round trip per burst, not one per decision queued behind each
 * other (measured on the all-in-one: 32 connections on an agent whose lease a burst drained
 * waited up to 7 s, each decision adding its own take to the queue).
 */
function refill(s: MeterState, agent: string, st: AgentState): Promise<unknown> {
  const c = st.calls;
  if (c.gathering) {
    c.gathering.waiting++;
    return c.gathering.taken;
  }
  const g = { waiting: 1, taken: Promise.resolve() as Promise<unknown> };
  c.gathering = g;
  g.taken = serial(c, () => {
    // From now on, decisions that find the lease empty gather for the take after this one.
    if (c.gathering === g) c.gathering = undefined;
    return takeNow(s, agent, 'calls', { upTo: s.leaseSize(s.budgetOf(agent)) + g.waiting });
  });
  return g.taken;
}

/**
 * A stale (or never read) view, read again once for every decision waiting on it: the calls
 * take is the refill the waiting decisions share (sized for them), the other dimensions are
 * read by one take each.
 */
function reread(s: MeterState, agent: string, st: AgentState, cph: number): Promise<unknown> {
  st.rereading ??= Promise.all(DIMS.filter((k) => k !== 'calls' || cph === 0).map((k) => sync(s, agent, k))).finally(() => {
    st.rereading = undefined;
  });
  return cph > 0 ? Promise.all([refill(s, agent, st), st.rereading]) : st.rereading;
}

/** Starts a refill in the background when the calls lease is at half or less. */
function prefetch(s: MeterState, agent: string, st: AgentState, budget: Budget | undefined): void {
  const c = st.calls;
  // One at a time: every call below half a lease asking for its own would queue a take each,
  // and decisions waiting for a refill would wait behind all of them.
  if (c.prefetching || !enforcing(budget) || limitOf(budget, 'calls') <= 0 || c.lease * 2 > s.leaseSize(budget)) return;
  c.prefetching = sync(s, agent, 'calls')
    .catch(s.logErr)
    .finally(() => {
      c.prefetching = undefined;
    });
}

const fmtAt = (now: number) => `at ${new Date(now).toISOString()}`;

export function callLease(s: MeterState): CallLease {
  return {
    decisionUsage(agent, now) {
      const st = s.stateOf(agent);
      st.touched = now;
      const budget = s.budgetOf(agent);
      const cph = enforcing(budget) ? limitOf(budget, 'calls') : 0;
      if (!s.fresh(st, budget, now)) return reread(s, agent, st, cph).then(() => usageOf(st));
      const c = st.calls;
      // Empty lease: wait for the refill (a burst outran the background loop), unless the
      // window was just read full (a denial needs no round trip).
      if (cph > 0 && c.lease < 1 && !(used(c) >= cph && now - c.syncedAt < s.syncMs)) return refill(s, agent, st).then(() => usageOf(st));
      return usageOf(st);
    },
    check(agent, budget, now) {
      if (!budget || budget.mode === 'audit') return undefined;
      const st = s.agents.get(agent);
      if (!st) return undefined;
      const over = overBudget(usageOf(st), budget);
      if (over) return over;
      const cph = budget.callsPerHour ?? 0;
      if (cph > 0 && st.calls.lease < 1 && unwritten(st.calls) >= s.leaseSize(budget)) {
        return `call budget: this replica's share is used up until the shared meter answers (${fmtAt(now)})`;
      }
      return undefined;
    },
    reserveCall(agent, now) {
      const st = s.stateOf(agent);
      st.touched = now;
      const d = st.calls;
      const fromLease = d.lease >= 1;
      const bucket = d.leaseBucket;
      const owedCall = fromLease ? undefined : oweCall(d);
      if (fromLease) d.lease -= 1;
      prefetch(s, agent, st, s.budgetOf(agent));
      let released = false;
      return () => {
        if (released) return;
        released = true;
        // A leased call goes back to the bucket its lease was charged in (the lease itself, unless
        // that bucket has turned since); a call owed comes off its bucket if written (`undoOwed`).
        if (owedCall) undoOwed(d, owedCall);
        else if (d.leaseBucket === bucket) d.lease += 1;
        else giveBackLater(d, bucket, 1);
      };
    },
  };
}
