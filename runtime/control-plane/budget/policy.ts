/**
 * The budget policy (SPEC 2.1, 8), pure: the windows, what a budget limits, when usage is over
 * it, what is left, when a refused reservation may fit, and the one rounding every budget figure
 * takes. The decision (`decision/`) and the meters below read it; it reads no meter and no store.
 * Zero or absent ceilings mean no limit on that dimension.
 */
import { UNKNOWN_RETRY_SECONDS } from '../../lib/reservation-header.js';
import type { LedgerDimension } from '../../store/schema/budget.js';
import type { Budget } from '../types.js';

export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;

/** An agent's window totals: tokens and calls over the last hour, USD over the last day. */
export interface BudgetUsage {
  tokensLastHour: number;
  callsLastHour: number;
  costUsdLastDay: number;
}

/** Nothing used (an agent with no meter yet). */
export const NO_USAGE: Readonly<BudgetUsage> = Object.freeze({ tokensLastHour: 0, callsLastHour: 0, costUsdLastDay: 0 });

/** Budget figures are rounded to 9 decimal places (dollars sum without float dust). */
export const r9 = (n: number) => Math.round(n * 1e9) / 1e9;

/** The ceiling of a ledger dimension (0: no limit). */
export const limitOf = (b: Budget | undefined, dim: LedgerDimension): number =>
  (dim === 'calls' ? b?.callsPerHour : dim === 'tokens' ? b?.tokensPerHour : b?.costUsdPerDay) ?? 0;

/** A budget that denies (present and not `mode: audit`). */
export const enforcing = (b: Budget | undefined) => !!b && b.mode !== 'audit';

const fmt = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(4).replace(/0+$/, '').replace(/\.$/, ''));

/** The budget dimension `usage` exceeds, if any (zero or absent ceilings: no limit). */
export function overBudget(usage: BudgetUsage, budget: Budget | undefined, opts: { calls?: boolean } = {}): string | undefined {
  if (!budget) return undefined;
  const { tokensPerHour: tph = 0, callsPerHour: cph = 0, costUsdPerDay: cpd = 0 } = budget;
  if (tph > 0 && usage.tokensLastHour >= tph) return `token budget exceeded: ${fmt(usage.tokensLastHour)} of ${tph} tokens per hour`;
  if (opts.calls !== false && cph > 0 && usage.callsLastHour >= cph) return `call budget exceeded: ${fmt(usage.callsLastHour)} of ${cph} calls per hour`;
  if (cpd > 0 && usage.costUsdLastDay >= cpd) return `cost budget exceeded: ${fmt(usage.costUsdLastDay)} of ${cpd} USD per day`;
  return undefined;
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

/** Limit, use and what is left of each dimension (never negative: an overrun reads 0). */
export function budgetStatus(budget: Budget | undefined, u: BudgetUsage): BudgetStatus {
  const dim = (limit: number | undefined, used: number, spanMs: number): DimensionStatus => {
    const l = limit ?? 0;
    return { limit: l, used: r9(used), remaining: l > 0 ? r9(Math.max(0, l - used)) : null, windowSeconds: spanMs / 1000 };
  };
  return {
    tokensPerHour: dim(budget?.tokensPerHour, u.tokensLastHour, HOUR_MS),
    callsPerHour: dim(budget?.callsPerHour, u.callsLastHour, HOUR_MS),
    costUsdPerDay: dim(budget?.costUsdPerDay, u.costUsdLastDay, DAY_MS),
  };
}

/** A refusal asking for more than the whole budget: no wait makes it fit. */
export const neverFits = (a: { need: number; limit: number }): boolean => a.need > a.limit;

/**
 * Seconds until a refused reservation may fit (`freesAt`), at least 1; a minute when unknown;
 * undefined when it never fits (no `retry-after` is sent: a client would wait for nothing).
 */
export const retryAfterSeconds = (a: { freesAt?: number; need: number; limit: number }, now: number): number | undefined =>
  neverFits(a) ? undefined : a.freesAt ? Math.max(1, Math.ceil((a.freesAt - now) / 1000)) : UNKNOWN_RETRY_SECONDS;
