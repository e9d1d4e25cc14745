/**
 * The shared meter's one write to the ledger, a take (ledger.ts): it writes the debt, gives back
 * what goes back (an aged lease, `returns`), refills the lease or tops it up, and reads the
 * window. A take that fails leaves everything owed and held as it was, to be written by the next.
 */
import type { LedgerDimension } from '../../store/schema/budget.js';
import { DIMS, giveBackLater, inView, owed, serial, settleOwed, usageOf, type DimState, type OwedCalls } from './lease.js';
import { bucketOf, type TakeRequest, type TakeResult } from './ledger.js';
import { leaseIdle, type MeterState } from './meter-state.js';
import { enforcing, limitOf, r9, type BudgetUsage } from './policy.js';

/** What a take asks for beyond the calls lease: the lease topped up to `upTo`, all or nothing below `atLeast`. */
export interface TakeAsk {
  upTo: number;
  atLeast?: number;
}

/** A take on its way: the request, and what to set right once it answers or fails. */
interface Pending {
  request: TakeRequest;
  bucket: number;
  calls: OwedCalls | undefined;
  giveBack: { bucket: number; n: number }[];
  /** The lease given back because it aged (restored if the take fails). */
  aged?: { bucket: number; n: number };
  /** Units given back that the view still counts. */
  back: number;
}

/**
 * Takes the debt and the give-backs off the state (in flight now) and reckons the ask: on the
 * lease kept after aging at the take's own clock, so a lease that left its minute since the
 * caller looked goes back whole and is asked for again.
 */
function prepare(s: MeterState, agent: string, dim: LedgerDimension, ask: TakeAsk | undefined, lease: boolean): Pending {
  const st = s.stateOf(agent);
  const d = st[dim];
  const now = s.clock();
  const bucket = bucketOf(dim, now);
  const budget = s.budgetOf(agent);
  const limit = enforcing(budget) ? limitOf(budget, dim) : 0;
  const giveBack = [...d.returns].map(([b, n]) => ({ bucket: b, n }));
  d.returns.clear();
  const { add, calls } = owed(d);
  d.inflight += add;
  let aged: { bucket: number; n: number } | undefined;
  const idle = !ask && leaseIdle(st, dim, now);
  if (d.lease > 0 && (d.leaseBucket !== bucket || (dim === 'calls' && limit === 0) || idle)) {
    aged = { bucket: d.leaseBucket, n: d.lease };
    giveBack.push(aged);
    d.lease = 0;
  }
  // What goes back counts as free while the take runs (the view still counts it): a decision
  // in that moment must not read the window fuller than it is.
  const back = giveBack.reduce((n, g) => (inView(d, g.bucket) ? n + g.n : n), 0);
  d.returning += back;
  const want = ask ? Math.max(0, r9(ask.upTo - d.lease)) : lease && dim === 'calls' && limit > 0 ? Math.max(0, s.leaseSize(budget) - d.lease) : 0;
  const atLeast = ask?.atLeast === undefined ? undefined : Math.max(0, r9(ask.atLeast - d.lease));
  return { request: { agent, dim, now, add, giveBack, want, limit, atLeast }, bucket, calls, giveBack, aged, back };
}

/** The ledger answered: the debt is written, the lease grows by what was granted, the view is the window now. */
function landed(d: DimState, p: Pending, r: TakeResult): void {
  d.inflight -= p.request.add;
  d.returning -= p.back;
  settleOwed(d, p.calls, p.bucket);
  if (r.granted > 0) {
    // Any lease still held is of this bucket: older ones were given back by `prepare`.
    d.lease += r.granted;
    d.leaseBucket = p.bucket;
  }
  d.view = r.used;
  d.syncedAt = p.request.now;
}

/** The take failed: what it carried is owed and held again. */
function failed(d: DimState, p: Pending): void {
  const add = p.request.add;
  d.inflight -= add;
  d.debt += add;
  // Not written: owed still (those undone meanwhile are written and given back by the next take).
  settleOwed(d, p.calls, undefined);
  d.returning -= p.back;
  for (const g of p.giveBack) if (g !== p.aged) giveBackLater(d, g.bucket, g.n);
  if (p.aged) {
    d.lease += p.aged.n;
    d.leaseBucket = p.aged.bucket;
  }
}

/**
 * One ledger take: writes the debt, returns an aged lease, refills (or tops the lease up to
 * `ask.upTo`, all or nothing below `ask.atLeast`; nothing when `lease` is false: a read), reads
 * the window. Callers run it through `serial` (one take per agent and dimension at a time).
 */
export async function takeNow(s: MeterState, agent: string, dim: LedgerDimension, ask?: TakeAsk, lease = true): Promise<TakeResult> {
  const d = s.stateOf(agent)[dim];
  const p = prepare(s, agent, dim, ask, lease);
  try {
    const r = await s.ledger.take(p.request);
    landed(d, p, r);
    return r;
  } catch (e) {
    failed(d, p);
    throw e;
  }
}

/** A take after the dimension's previous one, asking for nothing beyond the calls lease (none when `lease` is false). */
export const sync = (s: MeterState, agent: string, dim: LedgerDimension, lease = true) =>
  serial(s.stateOf(agent)[dim], () => takeNow(s, agent, dim, undefined, lease));

/** Reads every dimension of `agent` from the ledger (refilling its calls lease unless `lease` is false), then its usage. */
export async function refresh(s: MeterState, agent: string, lease = true): Promise<BudgetUsage> {
  await Promise.all(DIMS.map((k) => sync(s, agent, k, lease)));
  return usageOf(s.stateOf(agent));
}

/** Gives every lease back and writes every debt (at close, so a restart starts from the truth). */
export function returnAll(s: MeterState): Promise<unknown>[] {
  for (const st of s.agents.values()) st.touched = 0;
  const pending: Promise<unknown>[] = [];
  for (const [agent, st] of s.agents) {
    for (const dim of DIMS) {
      const d = st[dim];
      if (d.debt === 0 && d.lease === 0 && d.returns.size === 0) continue;
      pending.push(
        serial(d, async () => {
          const b = bucketOf(dim, s.clock());
          const giveBack = [...d.returns].map(([bucket, n]) => ({ bucket, n }));
          if (d.lease > 0 && d.leaseBucket <= b) giveBack.push({ bucket: d.leaseBucket, n: d.lease });
          d.returns.clear();
          const { add } = owed(d);
          await s.ledger.take({ agent, dim, now: s.clock(), add, giveBack, want: 0, limit: 0 });
          d.lease = 0;
        }).catch(s.logErr),
      );
    }
  }
  return pending;
}
