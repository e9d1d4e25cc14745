/**
 * The shared budget meter's per-agent state (meter.ts) and the pure arithmetic on it: for
 * each agent and dimension, the window total last read from the ledger (`view`), the lease charged
 * ahead, what goes back (`returning`, `returns`) and what is owed (`debt`, `inflight`); the usage a
 * decision reads from them; what a take writes of the debt; one take at a time per dimension.
 */
import type { LedgerDimension } from '../../store/schema/budget.js';
import { bucketOf, LEDGER_WINDOWS } from './ledger.js';
import { r9, type BudgetUsage } from './policy.js';

export interface DimState {
  dim: LedgerDimension;
  /** The ledger's window total at the last take (every replica, leases included). */
  view: number;
  /** Units charged ahead, not yet used, all in `leaseBucket`. */
  lease: number;
  leaseBucket: number;
  /** Units on their way back (an aged lease, `returns`): still counted in `view` until the take answers. */
  returning: number;
  /** Units used here and not yet written. */
  debt: number;
  /** Debt on its way to the ledger (in a take not yet answered). */
  inflight: number;
  /** The calls in `debt` (allowed beyond the lease) as one group: the take that writes them tells it its bucket. */
  owing?: OwedCalls;
  /** Units to give back to the buckets they were charged in (bucket -> units): counted in `view` until written. */
  returns: Map<number, number>;
  syncedAt: number;
  chain: Promise<unknown>;
  /** Decisions that found the calls lease empty, gathering for the next take (refill). */
  gathering?: { waiting: number; taken: Promise<unknown> };
  /** The background refill started at half a lease, while it is queued or running. */
  prefetching?: Promise<unknown>;
}

/**
 * The calls allowed beyond the lease between two takes: one object per take, not per call (a
 * budget with no calls ceiling owes every call). `bucket` once a take has written them; `undone`
 * while that take ran (given back once it answers); `movedTo` when it failed (the next take
 * writes them, in that group).
 */
export interface OwedCalls {
  bucket?: number;
  undone: number;
  movedTo?: OwedCalls;
}

export interface AgentState {
  calls: DimState;
  tokens: DimState;
  cost: DimState;
  touched: number;
  /** The read of a stale view's other dimensions, shared by the decisions waiting for it. */
  rereading?: Promise<unknown>;
}

export const DIMS: readonly LedgerDimension[] = ['calls', 'tokens', 'cost'];

export const newDim = (dim: LedgerDimension): DimState => ({
  dim,
  view: 0,
  lease: 0,
  leaseBucket: 0,
  returning: 0,
  debt: 0,
  inflight: 0,
  returns: new Map(),
  syncedAt: Number.NEGATIVE_INFINITY,
  chain: Promise.resolve(),
});
/**
 * Whether units charged to `bucket` are in the view: its bucket was in the window when it was
 * read (the ledger drops a give-back that has slid out, and so must the meter).
 */
export const inView = (d: DimState, bucket: number) => Number.isFinite(d.syncedAt) && bucket >= bucketOf(d.dim, d.syncedAt) - LEDGER_WINDOWS[d.dim].buckets;
/** Units in `returns` that the view still counts. */
const returned = (d: DimState) => {
  let n = 0;
  for (const [bucket, units] of d.returns) if (inView(d, bucket)) n += units;
  return n;
};
export const used = (d: DimState) => Math.max(0, d.view - d.lease - d.returning - returned(d) + d.debt + d.inflight);
/** Calls allowed here beyond the lease and not yet in the ledger: capped at one lease size. */
export const unwritten = (d: DimState) => d.debt + d.inflight;
export const usageOf = (st: AgentState): BudgetUsage => ({ callsLastHour: used(st.calls), tokensLastHour: used(st.tokens), costUsdLastDay: used(st.cost) });

/** What a take writes of the debt (which it clears), and the owed calls among it. */
export function owed(d: DimState): { add: number; calls: OwedCalls | undefined } {
  const add = d.debt;
  const calls = d.owing;
  d.debt = 0;
  d.owing = undefined;
  return { add, calls };
}

/** Counts a call allowed beyond the lease: the group it is undone through. */
export function oweCall(d: DimState): OwedCalls {
  d.debt += 1;
  return (d.owing ??= { undone: 0 });
}

/** Units to give back to `bucket` at the next take (counted as free in the view meanwhile; dollars rounded as `r9`). */
export function giveBackLater(d: DimState, bucket: number, n: number): void {
  d.returns.set(bucket, r9((d.returns.get(bucket) ?? 0) + n));
}

/**
 * Undoes an owed call. Not yet written, it is owed no more. Written, it comes off the bucket its
 * take wrote it in: not off a later take's bucket, where a call made since would then leave the
 * window a minute early, nor off the current one, where the ledger floors the charge at zero and
 * the call would stay counted for the hour. In the take running now, it is given back once a take
 * has written it and so knows the bucket (that one, or the next if that one fails).
 */
export function undoOwed(d: DimState, group: OwedCalls): void {
  let g = group;
  while (g.movedTo) g = g.movedTo;
  if (g.bucket !== undefined) giveBackLater(d, g.bucket, 1);
  else if (g === d.owing) d.debt -= 1;
  else g.undone += 1;
}

/** After a take: the owed calls it wrote learn their bucket (those undone meanwhile go back to it), or, failed, move to the next. */
export function settleOwed(d: DimState, calls: OwedCalls | undefined, bucket: number | undefined): void {
  if (!calls) return;
  if (bucket !== undefined) {
    calls.bucket = bucket;
    if (calls.undone > 0) giveBackLater(d, bucket, calls.undone);
    return;
  }
  const next = (d.owing ??= { undone: 0 });
  next.undone += calls.undone;
  calls.movedTo = next;
}

/** Runs `fn` after the dimension's previous take (one take per agent and dimension at a time). */
export function serial<T>(d: DimState, fn: () => Promise<T>): Promise<T> {
  const p = d.chain.then(fn, fn);
  d.chain = p.catch(() => {});
  return p;
}
