/**
 * One agent budget for the whole fleet and across restarts (issue 14): the meters' windows live
 * in the shared ledger (ledger.ts, PostgreSQL or PGlite); each replica keeps, per agent and
 * dimension, the window total it last read (`view`), a lease of calls it charged ahead and serves
 * from memory (`lease`), and what it owes the ledger (`debt`: usage reports, calls allowed while a
 * lease was in flight). A background loop writes debts, returns leases that have aged out of their
 * bucket and refills leases before they run out, so a decision at a steady rate never waits on the
 * database; only a burst that drains a lease before its refill answers waits for it.
 *
 * Overshoot bound (documented and measured in meter.test.ts): a lease is granted only
 * while the window has room, so leased calls never pass the ceiling; a replica allows at most
 * `lease size` calls beyond its lease while a refill is in flight (the debt cap), so the fleet
 * allows at most ceiling + replicas x lease size per window, and a replica that dies loses at most
 * its unwritten debt (again at most one lease size). Lease size: ceil(ceiling x leaseShare), at
 * least 1 (default share 2%: `callsPerHour: 100` -> 2 calls per replica). Decisions that find the
 * lease empty wait together for one take sized for all of them (`refill`), and the background
 * refill runs one at a time: a burst costs the ledger one round trip, not one per decision.
 *
 * Tokens and dollars are leased the same way by the broker's reservations (`take`): a take that
 * the lease cannot serve asks the ledger for its shortfall plus a lease, a lease at half or less
 * is topped up in the background, and a lease unused for a minute goes back. A lease is charged
 * in the ledger, so it never passes the ceiling; near the ceiling one replica may hold what is
 * left (others are refused until it is used or given back).
 */
import { errMsg, logger } from '../../lib/log.js';
import type { LedgerDimension } from '../../store/schema/budget.js';
import { DIMS, giveBackLater, inView, newDim, owed, oweCall, serial, settleOwed, undoOwed, unwritten, usageOf, used, type AgentState } from './lease.js';
import { bucketOf, fleetReader, type BudgetLedger, type TakeResult } from './ledger.js';
import { enforcing, limitOf, NO_USAGE, overBudget, r9, type BudgetUsage } from './policy.js';
import type { BudgetMeter } from './ports.js';
import type { Budget } from '../types.js';

const log = logger('budget');

export interface SharedBudgetOptions {
  ledger: BudgetLedger;
  /** The agent's budget now (the registry). */
  budgetOf: (agent: string) => Budget | undefined;
  now?: () => number;
  /** Background loop period: debts written, leases refilled, active views refreshed (default 250 ms). */
  syncMs?: number;
  /** A decision never uses a view older than this; it waits for a refresh (default 5000 ms). */
  maxStaleMs?: number;
  /** Lease size as a share of the calls ceiling, at least 1 call (default 0.02). */
  leaseShare?: number;
}

export interface SharedBudgetMeter extends BudgetMeter {
  /** The decision's read: at hand, or a promise when the view is missing or stale or the lease is empty. */
  decisionUsage(agent: string, now: number): BudgetUsage | Promise<BudgetUsage>;
  /** Reads the ledger for `agent` now (every dimension), refilling its lease of calls, then its usage. */
  refresh(agent: string): Promise<BudgetUsage>;
  /**
   * The same read without taking a lease (`GET /v1/budgets/{agent}`): a replica asked about an
   * agent it serves no calls of holds none of its budget for it.
   */
  read(agent: string): Promise<BudgetUsage>;
  /** Takes `need` units of `dim` ahead, or as many as fit down to `min` (default all or nothing); the ledger's answer tells the window total and when it frees up. */
  take(agent: string, dim: LedgerDimension, need: number, min?: number): Promise<{ ok: boolean; granted: number; result?: TakeResult }>;
  /** Gives back units taken with `take` (at most the same bucket: else written as a negative charge). */
  giveBack(agent: string, dim: LedgerDimension, n: number, bucket: number): void;
  leaseSize(budget: Budget | undefined): number;
  /**
   * Every agent's usage as the ledger holds it now, for the whole fleet (the metrics scrape):
   * what every replica has written, leases charged ahead included. One read, shared by the calls
   * within FLEET_READ_MS however often /metrics is scraped (`fleetReader`); rejects when the
   * ledger cannot be read.
   */
  fleetUsage(): Promise<ReadonlyMap<string, BudgetUsage>>;
  /** Writes every debt and returns every lease now. */
  flush(): Promise<void>;
  close(): Promise<void>;
}

export function createSharedBudgetMeter(o: SharedBudgetOptions): SharedBudgetMeter {
  const clock = o.now ?? Date.now;
  const syncMs = o.syncMs ?? 250;
  /** An agent not seen this long is idle: no refills, and its token and dollar leases go back. */
  const IDLE_MS = 60_000;
  const active = (st: AgentState, now: number) => now - st.touched < IDLE_MS;
  /** Tokens and dollars are leased by reservations: an idle agent's lease goes back to the fleet. */
  const leaseIdle = (st: AgentState, dim: LedgerDimension, now: number) => dim !== 'calls' && now - st.touched > IDLE_MS;
  const maxStaleMs = o.maxStaleMs ?? 5000;
  const share = o.leaseShare ?? 0.02;
  const agents = new Map<string, AgentState>();
  let closed = false;
  let lastErrLog = 0;

  /** Lease size per dimension: ceil(ceiling x share), at least 1; dollars as they are. */
  const leaseOf = (b: Budget | undefined, dim: LedgerDimension) =>
    dim === 'cost' ? r9(limitOf(b, 'cost') * share) : Math.max(1, Math.ceil(limitOf(b, dim) * share));
  const leaseSize = (b: Budget | undefined) => leaseOf(b, 'calls');
  const stateOf = (agent: string): AgentState => {
    let st = agents.get(agent);
    if (!st) {
      st = { calls: newDim('calls'), tokens: newDim('tokens'), cost: newDim('cost'), touched: clock() };
      agents.set(agent, st);
    }
    return st;
  };
  /** The dimensions with a ceiling (the only ones a decision reads) were read from the ledger lately. */
  const fresh = (st: AgentState, b: Budget | undefined, now: number) => DIMS.every((k) => limitOf(b, k) === 0 || now - st[k].syncedAt <= maxStaleMs);

  /**
   * One ledger take: writes the debt, returns an aged lease, refills (or tops the lease up to
   * `ask.upTo`, all or nothing below `ask.atLeast`; nothing when `lease` is false: a read), reads
   * the window. The ask is reckoned here, on the lease kept after aging at the take's own clock:
   * a lease that left its minute since the caller looked goes back whole and is asked for again.
   */
  async function takeNow(agent: string, dim: LedgerDimension, ask?: { upTo: number; atLeast?: number }, lease = true): Promise<TakeResult> {
    const st = stateOf(agent);
    const d = st[dim];
    const now = clock();
    const b = bucketOf(dim, now);
    const budget = o.budgetOf(agent);
    const limit = enforcing(budget) ? limitOf(budget, dim) : 0;
    const giveBack = [...d.returns].map(([bucket, n]) => ({ bucket, n }));
    d.returns.clear();
    const { add, calls } = owed(d);
    d.inflight += add;
    let aged: { bucket: number; n: number } | undefined;
    const idle = !ask && leaseIdle(st, dim, now);
    if (d.lease > 0 && (d.leaseBucket !== b || (dim === 'calls' && limit === 0) || idle)) {
      aged = { bucket: d.leaseBucket, n: d.lease };
      giveBack.push(aged);
      d.lease = 0;
    }
    // What goes back counts as free while the take runs (the view still counts it): a decision
    // in that moment must not read the window fuller than it is.
    const back = giveBack.reduce((n, g) => (inView(d, g.bucket) ? n + g.n : n), 0);
    d.returning += back;
    const want = ask ? Math.max(0, r9(ask.upTo - d.lease)) : lease && dim === 'calls' && limit > 0 ? Math.max(0, leaseSize(budget) - d.lease) : 0;
    const atLeast = ask?.atLeast === undefined ? undefined : Math.max(0, r9(ask.atLeast - d.lease));
    try {
      const r = await o.ledger.take({ agent, dim, now, add, giveBack, want, limit, atLeast });
      d.inflight -= add;
      d.returning -= back;
      settleOwed(d, calls, b);
      if (r.granted > 0) {
        // Any lease still held is of bucket `b`: older ones were given back above.
        d.lease += r.granted;
        d.leaseBucket = b;
      }
      d.view = r.used;
      d.syncedAt = now;
      return r;
    } catch (e) {
      d.inflight -= add;
      d.debt += add;
      // Not written: owed still (those undone meanwhile are written and given back by the next take).
      settleOwed(d, calls, undefined);
      d.returning -= back;
      for (const g of giveBack) if (g !== aged) giveBackLater(d, g.bucket, g.n);
      if (aged) {
        d.lease += aged.n;
        d.leaseBucket = aged.bucket;
      }
      throw e;
    }
  }

  const sync = (agent: string, dim: LedgerDimension, lease = true) => serial(stateOf(agent)[dim], () => takeNow(agent, dim, undefined, lease));
  const refresh = async (agent: string, lease = true): Promise<BudgetUsage> => {
    await Promise.all(DIMS.map((k) => sync(agent, k, lease)));
    return usageOf(stateOf(agent));
  };

  const logErr = (e: unknown) => {
    const t = Date.now();
    if (t - lastErrLog < 5000) return;
    lastErrLog = t;
    log.error('budget ledger unavailable: decisions deny once leases run out or views go stale', { err: errMsg(e) });
  };

  /** Does this dimension need a take now (debt owed, lease aged or low, active view old)? */
  function due(agent: string, st: AgentState, dim: LedgerDimension, now: number): boolean {
    const d = st[dim];
    if (d.debt !== 0 || d.returns.size > 0) return true;
    if (d.lease > 0 && (d.leaseBucket !== bucketOf(dim, now) || leaseIdle(st, dim, now))) return true;
    const budget = o.budgetOf(agent);
    if (dim === 'calls' && enforcing(budget) && limitOf(budget, 'calls') > 0 && active(st, now) && d.lease * 2 < leaseSize(budget)) return true;
    return limitOf(budget, dim) > 0 && active(st, now) && now - d.syncedAt >= 4 * syncMs;
  }

  let ticking = false;
  const tick = async () => {
    if (ticking || closed) return;
    ticking = true;
    try {
      const now = clock();
      const work: Promise<unknown>[] = [];
      for (const [agent, st] of agents) {
        for (const dim of DIMS) if (due(agent, st, dim, now)) work.push(sync(agent, dim).catch(logErr));
        // Idle for a window and nothing owed or held: forget the agent.
        if (now - st.touched > 2 * 86_400_000 && DIMS.every((k) => st[k].debt === 0 && st[k].lease === 0)) agents.delete(agent);
      }
      await Promise.all(work);
    } finally {
      ticking = false;
    }
  };
  const timer = setInterval(() => void tick(), syncMs);
  timer.unref();

  /**
   * Waits for the calls lease to be refilled. Every decision that finds it empty joins the group
   * gathering for the next take, which asks for all of them plus a lease once it runs (after the
   * take in flight): one ledger round trip per burst, not one per decision queued behind each
   * other (measured on the all-in-one: 32 connections on an agent whose lease a burst drained
   * waited up to 7 s, each decision adding its own take to the queue).
   */
  function refill(agent: string, st: AgentState): Promise<unknown> {
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
      return takeNow(agent, 'calls', { upTo: leaseSize(o.budgetOf(agent)) + g.waiting });
    });
    return g.taken;
  }

  /**
   * A stale (or never read) view, read again once for every decision waiting on it: the calls
   * take is the refill the waiting decisions share (sized for them), the other dimensions are
   * read by one take each.
   */
  function reread(agent: string, st: AgentState, cph: number): Promise<unknown> {
    st.rereading ??= Promise.all(DIMS.filter((k) => k !== 'calls' || cph === 0).map((k) => sync(agent, k))).finally(() => {
      st.rereading = undefined;
    });
    return cph > 0 ? Promise.all([refill(agent, st), st.rereading]) : st.rereading;
  }

  /** Starts a refill in the background when the calls lease is at half or less. */
  function prefetch(agent: string, st: AgentState, budget: Budget | undefined): void {
    const c = st.calls;
    // One at a time: every call below half a lease asking for its own would queue a take each,
    // and decisions waiting for a refill would wait behind all of them.
    if (c.prefetching || !enforcing(budget) || limitOf(budget, 'calls') <= 0 || c.lease * 2 > leaseSize(budget)) return;
    c.prefetching = sync(agent, 'calls')
      .catch(logErr)
      .finally(() => {
        c.prefetching = undefined;
      });
  }

  return {
    leaseSize,
    refresh: (agent) => refresh(agent),
    read: (agent) => refresh(agent, false),
    decisionUsage(agent, now) {
      const st = stateOf(agent);
      st.touched = now;
      const budget = o.budgetOf(agent);
      const cph = enforcing(budget) ? limitOf(budget, 'calls') : 0;
      if (!fresh(st, budget, now)) return reread(agent, st, cph).then(() => usageOf(st));
      const c = st.calls;
      // Empty lease: wait for the refill (a burst outran the background loop), unless the
      // window was just read full (a denial needs no round trip).
      if (cph > 0 && c.lease < 1 && !(used(c) >= cph && now - c.syncedAt < syncMs)) return refill(agent, st).then(() => usageOf(st));
      return usageOf(st);
    },
    usage(agent) {
      const st = agents.get(agent);
      return st ? usageOf(st) : NO_USAGE;
    },
    check(agent, budget, now) {
      if (!budget || budget.mode === 'audit') return undefined;
      const st = agents.get(agent);
      if (!st) return undefined;
      const over = overBudget(usageOf(st), budget);
      if (over) return over;
      const cph = budget.callsPerHour ?? 0;
      if (cph > 0 && st.calls.lease < 1 && unwritten(st.calls) >= leaseSize(budget)) {
        return `call budget: this replica's share is used up until the shared meter answers (${fmtAt(now)})`;
      }
      return undefined;
    },
    reserveCall(agent, now) {
      const st = stateOf(agent);
      st.touched = now;
      const d = st.calls;
      const fromLease = d.lease >= 1;
      const bucket = d.leaseBucket;
      const owedCall = fromLease ? undefined : oweCall(d);
      if (fromLease) d.lease -= 1;
      prefetch(agent, st, o.budgetOf(agent));
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
    recordUsage(agent, tokens, costUsd, now) {
      if (!(tokens >= 0) || !(costUsd >= 0) || !Number.isFinite(tokens) || !Number.isFinite(costUsd)) return;
      const st = stateOf(agent);
      st.touched = now;
      st.tokens.debt += tokens;
      st.cost.debt += costUsd;
    },
    async take(agent, dim, need, min = need) {
      const st = stateOf(agent);
      st.touched = clock();
      const d = st[dim];
      const held = () => (d.leaseBucket === bucketOf(dim, clock()) ? d.lease : 0);
      const grab = (n: number) => {
        d.lease = r9(d.lease - n);
        return { ok: true, granted: n };
      };
      const budget = o.budgetOf(agent);
      const lease = enforcing(budget) ? leaseOf(budget, dim) : 0;
      if (held() >= need) {
        const g = grab(need);
        // At half a lease or less: refill in the background, so the next reservation finds one.
        if (held() * 2 <= lease) serial(d, () => (held() * 2 <= lease ? takeNow(agent, dim, { upTo: lease }) : Promise.resolve(undefined))).catch(logErr);
        return g;
      }
      return serial(d, async () => {
        if (held() >= need) return grab(need);
        // This call and a lease for the ones after it (the ledger grants what fits, at least `min` held).
        for (let first = true; ; first = false) {
          const result = await takeNow(agent, dim, { upTo: r9(need + lease), atLeast: min });
          const have = held();
          if (have >= min && have > 0) return { ...grab(Math.min(have, need)), result };
          // The minute turned as the ledger answered: what it granted is of the last one. Once more, in this one.
          if (first && d.lease >= min && d.lease > 0) continue;
          // Refused: the window's use as the agent sees it (this replica's unused lease is not use).
          return { ok: false, granted: 0, result: { ...result, used: Math.max(0, r9(result.used - have)) } };
        }
      });
    },
    giveBack(agent, dim, n, bucket) {
      if (!(n > 0)) return;
      const d = stateOf(agent)[dim];
      if (d.leaseBucket === bucket && bucket === bucketOf(dim, clock())) d.lease = r9(d.lease + n);
      else giveBackLater(d, bucket, n);
    },
    size: () => agents.size,
    fleetUsage: fleetReader(o.ledger, clock, logErr),
    async flush() {
      await Promise.all([...agents.keys()].flatMap((a) => DIMS.map((k) => sync(a, k).catch(logErr))));
    },
    async close() {
      if (closed) return;
      // Give every lease back and write every debt, so a restart starts from the truth.
      for (const st of agents.values()) st.touched = 0;
      const pending: Promise<unknown>[] = [];
      for (const [agent, st] of agents) {
        for (const dim of DIMS) {
          const d = st[dim];
          if (d.debt === 0 && d.lease === 0 && d.returns.size === 0) continue;
          pending.push(
            serial(d, async () => {
              const b = bucketOf(dim, clock());
              const giveBack = [...d.returns].map(([bucket, n]) => ({ bucket, n }));
              if (d.lease > 0 && d.leaseBucket <= b) giveBack.push({ bucket: d.leaseBucket, n: d.lease });
              d.returns.clear();
              const { add } = owed(d);
              await o.ledger.take({ agent, dim, now: clock(), add, giveBack, want: 0, limit: 0 });
              d.lease = 0;
            }).catch(logErr),
          );
        }
      }
      closed = true;
      clearInterval(timer);
      await Promise.all(pending);
    },
  };
}

const fmtAt = (now: number) => `at ${new Date(now).toISOString()}`;
