/**
 * What the decision asks of budgets, as types only: the call meter it checks and reserves a
 * call on, and the broker's token and cost reservations. `decision/` imports these and
 * `policy.ts`, never a meter; the meters (`meter.ts`, `testkit.ts`) and `reservations.ts`
 * implement them.
 */
import type { Budget } from '../types.js';
import type { BudgetUsage } from './policy.js';

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

export interface ReserveRequest {
  agent: string;
  /** Upper bound of the prompt's tokens. */
  promptTokens: number;
  /** Output tokens wanted (max_tokens, or the model's output cap). */
  outputTokens: number;
  priceInputPer1k: number;
  priceOutputPer1k: number;
  /** Accept fewer output tokens than asked (a stream the broker can cut). */
  partial?: boolean;
  /** A fixed price charged whole on top of the tokens' (a tool call's `costUsd`); a reservation of it alone is settled at once. */
  costUsd?: number;
  /** Deadline of the settlement (default the store's reservation TTL). */
  ttlMs?: number;
}

export type ReserveAnswer =
  | { ok: true; id: string | null; outputTokens: number }
  | { ok: false; dimension: 'tokensPerHour' | 'costUsdPerDay'; limit: number; used: number; need: number; freesAt?: number; message: string };

export interface Reservations {
  reserve(r: ReserveRequest): Promise<ReserveAnswer>;
  /**
   * Settles reservation `id` of `agent` to the real figures: true the first time, false for a
   * repeat (already settled); rejects with UnknownReservation when `agent` never held `id`.
   */
  settle(id: string, agent: string, tokens: number, costUsd: number): Promise<boolean>;
  /** Marks reservations past their deadline expired (their worst case stays charged); how many. */
  expire(): Promise<number>;
  /** Writes the reservations not yet stored (bounded), then stops. */
  close(): Promise<void>;
}
