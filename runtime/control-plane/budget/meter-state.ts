/**
 * What the parts of the shared meter (meter.ts) hold in common: the options, the clock, every
 * agent's state (lease.ts), the lease sizes, when a view is fresh and an agent idle, and the
 * ledger-unavailable log (at most one line per 5 s).
 */
import { errMsg, logger } from '../../lib/log.js';
import type { LedgerDimension } from '../../store/schema/budget.js';
import type { Budget } from '../types.js';
import { DIMS, newDim, type AgentState } from './lease.js';
import type { BudgetLedger } from './ledger.js';
import { limitOf, r9 } from './policy.js';

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

/** An agent not seen this long is idle: no refills, and its token and dollar leases go back. */
const IDLE_MS = 60_000;

export interface MeterState {
  readonly ledger: BudgetLedger;
  readonly budgetOf: (agent: string) => Budget | undefined;
  readonly clock: () => number;
  readonly syncMs: number;
  readonly agents: Map<string, AgentState>;
  /** The agent's state, created on first use. */
  stateOf(agent: string): AgentState;
  /** Lease size per dimension: ceil(ceiling x share), at least 1; dollars as they are. */
  leaseOf(b: Budget | undefined, dim: LedgerDimension): number;
  /** The calls lease size. */
  leaseSize(b: Budget | undefined): number;
  /** The dimensions with a ceiling (the only ones a decision reads) were read from the ledger lately. */
  fresh(st: AgentState, b: Budget | undefined, now: number): boolean;
  logErr(e: unknown): void;
}

export function createMeterState(o: SharedBudgetOptions): MeterState {
  const clock = o.now ?? Date.now;
  const maxStaleMs = o.maxStaleMs ?? 5000;
  const share = o.leaseShare ?? 0.02;
  const agents = new Map<string, AgentState>();
  let lastErrLog = 0;
  const leaseOf = (b: Budget | undefined, dim: LedgerDimension) =>
    dim === 'cost' ? r9(limitOf(b, 'cost') * share) : Math.max(1, Math.ceil(limitOf(b, dim) * share));
  return {
    ledger: o.ledger,
    budgetOf: o.budgetOf,
    clock,
    syncMs: o.syncMs ?? 250,
    agents,
    stateOf(agent) {
      let st = agents.get(agent);
      if (!st) {
        st = { calls: newDim('calls'), tokens: newDim('tokens'), cost: newDim('cost'), touched: clock() };
        agents.set(agent, st);
      }
      return st;
    },
    leaseOf,
    leaseSize: (b) => leaseOf(b, 'calls'),
    fresh: (st, b, now) => DIMS.every((k) => limitOf(b, k) === 0 || now - st[k].syncedAt <= maxStaleMs),
    logErr(e) {
      const t = Date.now();
      if (t - lastErrLog < 5000) return;
      lastErrLog = t;
      log.error('budget ledger unavailable: decisions deny once leases run out or views go stale', { err: errMsg(e) });
    },
  };
}

/** An agent seen within the idle time (its calls lease is kept filled, its views fresh). */
export const active = (st: AgentState, now: number) => now - st.touched < IDLE_MS;

/** Tokens and dollars are leased by reservations: an idle agent's lease goes back to the fleet. */
export const leaseIdle = (st: AgentState, dim: LedgerDimension, now: number) => dim !== 'calls' && now - st.touched > IDLE_MS;
