/**
 * A reservation's worst case charged to the shared meter (token-lease.ts): the prompt bound plus
 * the output allowance against `tokensPerHour`, priced from the broker's model table (plus a
 * fixed price: a tool call's `costUsd`, alone for a tool) against `costUsdPerDay`; a partial
 * reservation takes as much output as still fits (at least one token), and fewer dollars than
 * asked shrink the allowance to what they buy. A refusal says which dimension, how much was
 * needed and when the window frees up.
 */
import type { SharedBudgetMeter } from './meter.js';
import { neverFits, r9 } from './policy.js';
import type { ReserveAnswer, ReserveRequest } from './ports.js';

/** What a reservation holds: tokens and dollars charged, the output tokens they allow. */
export interface Charged {
  tokens: number;
  cost: number;
  out: number;
}

type Refusal = Extract<ReserveAnswer, { ok: false }>;
type Meter = Pick<SharedBudgetMeter, 'take' | 'giveBack'>;

/** The ceilings a reservation is charged against (0: none). */
export interface Ceilings {
  tph: number;
  cpd: number;
}

const price = (prompt: number, out: number, r: ReserveRequest) => r9((prompt * r.priceInputPer1k + out * r.priceOutputPer1k) / 1000 + (r.costUsd ?? 0));

/** What shrinks a call that never fits: a model call's request, or nothing the caller sends (a tool's fixed price). */
function neverFitsHint(dimension: Refusal['dimension'], tool: boolean): string {
  if (tool) return "the tool's costUsd is more than the agent's whole costUsdPerDay";
  return dimension === 'tokensPerHour'
    ? 'ask for fewer tokens (a lower max_tokens, a shorter prompt)'
    : 'ask for fewer dollars (a lower max_tokens, a cheaper model)';
}

/**
 * The refusal of a worst case that does not fit (`res`: the ledger's answer, when it gave one;
 * `tool`: the worst case is a tool call's fixed price alone).
 */
export function refusal(
  agent: string,
  dimension: Refusal['dimension'],
  limit: number,
  need: number,
  res?: { used: number; freesAt?: number },
  tool = false,
): Refusal {
  const used = res?.used ?? 0;
  const unit = dimension === 'tokensPerHour' ? 'tokens per hour' : 'USD per day';
  const head = `${dimension} budget of agent ${agent}: this call needs up to ${need} of ${limit} ${unit}`;
  if (neverFits({ need, limit })) {
    return { ok: false, dimension, limit, used, need, message: `${head}, more than the whole budget: it never fits; ${neverFitsHint(dimension, tool)}` };
  }
  const frees = res?.freesAt ? `; frees up from ${new Date(res.freesAt).toISOString()}` : '';
  return {
    ok: false,
    dimension,
    limit,
    used,
    need,
    freesAt: res?.freesAt,
    message: `${head} and ${r9(Math.max(0, used))} are used or reserved${frees}`,
  };
}

/** Charges tokens (when `tph` > 0), then dollars (when `cpd` > 0); a refusal of the dollars gives the tokens back. */
export async function chargeWorstCase(meter: Meter, r: ReserveRequest, c: Ceilings, tokensBucket: number): Promise<Charged | Refusal> {
  const minOut = r.partial ? Math.min(1, r.outputTokens) : r.outputTokens;
  const held: Charged = { tokens: 0, cost: 0, out: r.outputTokens };
  // A fixed price alone (a tool call) holds no tokens.
  if (c.tph > 0 && r.promptTokens + r.outputTokens > 0) {
    const t = await meter.take(r.agent, 'tokens', r.promptTokens + held.out, r.promptTokens + minOut);
    if (!t.ok) return refusal(r.agent, 'tokensPerHour', c.tph, r.promptTokens + minOut, t.result);
    held.tokens = t.granted;
    held.out = held.tokens - r.promptTokens;
  }
  if (c.cpd > 0) {
    const need = price(r.promptTokens, held.out, r);
    const t = await meter.take(r.agent, 'cost', need, price(r.promptTokens, minOut, r));
    if (!t.ok) {
      if (held.tokens > 0) meter.giveBack(r.agent, 'tokens', held.tokens, tokensBucket);
      return refusal(r.agent, 'costUsdPerDay', c.cpd, price(r.promptTokens, minOut, r), t.result, r.promptTokens + r.outputTokens === 0);
    }
    held.cost = t.granted;
    if (held.cost < need && r.priceOutputPer1k > 0) shrinkToDollars(meter, r, held, minOut, tokensBucket);
  }
  return held;
}

/** Fewer dollars than asked: the output allowance shrinks to what they buy (the tokens beyond it go back). */
function shrinkToDollars(meter: Meter, r: ReserveRequest, held: Charged, minOut: number, tokensBucket: number): void {
  const fit = Math.max(minOut, Math.floor(((held.cost - (r.costUsd ?? 0)) * 1000 - r.promptTokens * r.priceInputPer1k) / r.priceOutputPer1k + 1e-9));
  if (held.tokens > 0 && fit < held.out) {
    meter.giveBack(r.agent, 'tokens', held.out - fit, tokensBucket);
    held.tokens -= held.out - fit;
  }
  held.out = fit;
}
