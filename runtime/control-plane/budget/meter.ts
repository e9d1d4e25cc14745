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
 *
 * The parts: meter-state.ts (what they share), ledger-take.ts (the one write), sync-loop.ts (the
 * background loop), call-lease.ts (the decision path, `refill`), token-lease.ts (`take`).
 */
import { callLease, type CallLease } from './call-lease.js';
import { DIMS, usageOf } from './lease.js';
import { refresh, returnAll, sync } from './ledger-take.js';
import { fleetReader } from './ledger.js';
import { createMeterState, type SharedBudgetOptions } from './meter-state.js';
import { NO_USAGE, type BudgetUsage } from './policy.js';
import type { BudgetMeter } from './ports.js';
import { startSyncLoop } from './sync-loop.js';
import { tokenLease, type TokenLease } from './token-lease.js';
import type { Budget } from '../types.js';

export interface SharedBudgetMeter extends BudgetMeter, CallLease, TokenLease {
  /** Reads the ledger for `agent` now (every dimension), refilling its lease of calls, then its usage. */
  refresh(agent: string): Promise<BudgetUsage>;
  /**
   * The same read without taking a lease (`GET /v1/budgets/{agent}`): a replica asked about an
   * agent it serves no calls of holds none of its budget for it.
   */
  read(agent: string): Promise<BudgetUsage>;
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

/** The shared meter, composed: its state, the decision path, the reservations' leases, the background loop. */
export function createSharedBudgetMeter(o: SharedBudgetOptions): SharedBudgetMeter {
  const s = createMeterState(o);
  let closed = false;
  const loop = startSyncLoop(s, () => closed);
  return {
    ...callLease(s),
    ...tokenLease(s),
    leaseSize: s.leaseSize,
    refresh: (agent) => refresh(s, agent),
    read: (agent) => refresh(s, agent, false),
    usage(agent) {
      const st = s.agents.get(agent);
      return st ? usageOf(st) : NO_USAGE;
    },
    recordUsage(agent, tokens, costUsd, now) {
      if (!(tokens >= 0) || !(costUsd >= 0) || !Number.isFinite(tokens) || !Number.isFinite(costUsd)) return;
      const st = s.stateOf(agent);
      st.touched = now;
      st.tokens.debt += tokens;
      st.cost.debt += costUsd;
    },
    size: () => s.agents.size,
    fleetUsage: fleetReader(s.ledger, s.clock, s.logErr),
    async flush() {
      await Promise.all([...s.agents.keys()].flatMap((a) => DIMS.map((k) => sync(s, a, k).catch(s.logErr))));
    },
    async close() {
      if (closed) return;
      // Give every lease back and write every debt, so a restart starts from the truth.
      const pending = returnAll(s);
      closed = true;
      loop.stop();
      await Promise.all(pending);
    },
  };
}
