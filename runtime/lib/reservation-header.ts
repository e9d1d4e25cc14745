/**
 * The broker's budget reservation riding on its `/authz` call (issue 14): one round trip
 * decides the model call and reserves its worst case. The broker sends
 *
 *   X-Writ-Reserve: prompt=<tokens>; output=<tokens>; input-price=<USD per 1k>; output-price=<USD per 1k>[; partial]
 *
 * and an allowed answer carries `X-Writ-Reservation: id=<uuid or none>; output=<allowance>`; a
 * deny because the worst case does not fit carries `X-Writ-Reservation: refused` and
 * `retry-after` (absent: more than the whole budget, no wait makes it fit), and a deny because the ledger is down `X-Writ-Reservation: unavailable`. Pure.
 */

export interface ReserveAsk {
  /** Upper bound of the prompt's tokens. */
  promptTokens: number;
  /** Output tokens wanted (max_tokens, or the model's output cap). */
  outputTokens: number;
  priceInputPer1k: number;
  priceOutputPer1k: number;
  /** Accept a smaller output allowance (a stream the broker cuts at it). */
  partial?: boolean;
}

export type ReservationAnswer =
  | { kind: 'reserved'; id: string | null; outputTokens: number }
  /** `retryAfterSeconds` absent: the call asks for more than the whole budget and never fits. */
  | { kind: 'refused'; retryAfterSeconds?: number }
  | { kind: 'unavailable' };

/** Most tokens one model call may ask for or report (far beyond any model), and most USD per 1k tokens. */
export const MAX_CALL_TOKENS = 1e9;
export const MAX_PRICE_PER_1K = 1e6;
const INT = /^\d{1,10}$/;
const DECIMAL = /^\d{1,7}(\.\d{1,12})?(e-\d{1,2})?$/;
const ID = /^[A-Za-z0-9-]{1,64}$/;

/** What a price must be to ride in the header as `formatReserve` writes it (JavaScript's own print of the number). */
export const RESERVE_PRICE_RULE = `from 0 to ${MAX_PRICE_PER_1K} USD per 1k tokens, written (as JavaScript prints the number) with at most 12 decimal places, such as 0.0006 or 1.5e-7`;

/**
 * True when `parseReserve` takes the price `formatReserve` writes for `usdPer1k`: a price outside
 * this is refused by every decision, so the broker's model table refuses it when loaded.
 */
export function isReservePrice(usdPer1k: number): boolean {
  return Number.isFinite(usdPer1k) && usdPer1k >= 0 && usdPer1k <= MAX_PRICE_PER_1K && DECIMAL.test(String(usdPer1k));
}

export function formatReserve(a: ReserveAsk): string {
  const s = `prompt=${a.promptTokens}; output=${a.outputTokens}; input-price=${a.priceInputPer1k}; output-price=${a.priceOutputPer1k}`;
  return a.partial ? `${s}; partial` : s;
}

/** `key=value; key; ...` into a map; undefined on a repeated key or an empty part. */
function params(v: string): Map<string, string> | undefined {
  const m = new Map<string, string>();
  for (const part of v.split(';')) {
    const p = part.trim();
    const eq = p.indexOf('=');
    const k = eq === -1 ? p : p.slice(0, eq).trim();
    if (!k || m.has(k)) return undefined;
    m.set(k, eq === -1 ? '' : p.slice(eq + 1).trim());
  }
  return m;
}

/** Seconds a budget refusal asks to wait when the window's end is not known there: a minute. */
export const UNKNOWN_RETRY_SECONDS = 60;

/** The ask, or why the header is malformed (a malformed ask denies). */
export function parseReserve(v: string): ReserveAsk | { error: string } {
  const m = params(v);
  if (!m) return { error: 'empty or repeated parameter' };
  const int = (k: string, min: number): number | string => {
    const s = m.get(k);
    if (s === undefined || !INT.test(s) || Number(s) < min || Number(s) > MAX_CALL_TOKENS) return `${k} must be an integer from ${min} to ${MAX_CALL_TOKENS}`;
    return Number(s);
  };
  const price = (k: string): number | string => {
    const s = m.get(k);
    if (s === undefined || !DECIMAL.test(s) || !(Number(s) <= MAX_PRICE_PER_1K)) return `${k} must be a decimal from 0 to ${MAX_PRICE_PER_1K}`;
    return Number(s);
  };
  const prompt = int('prompt', 0);
  const output = int('output', 1);
  const pin = price('input-price');
  const pout = price('output-price');
  for (const x of [prompt, output, pin, pout]) if (typeof x === 'string') return { error: x };
  const partial = m.get('partial');
  if (partial !== undefined && partial !== '') return { error: 'partial takes no value' };
  for (const k of m.keys()) {
    if (!['prompt', 'output', 'input-price', 'output-price', 'partial'].includes(k)) return { error: `unknown parameter ${JSON.stringify(k.slice(0, 40))}` };
  }
  const ask: ReserveAsk = { promptTokens: prompt as number, outputTokens: output as number, priceInputPer1k: pin as number, priceOutputPer1k: pout as number };
  if (partial !== undefined) ask.partial = true;
  return ask;
}

export function formatReservation(a: ReservationAnswer): string {
  if (a.kind === 'reserved') return `id=${a.id ?? 'none'}; output=${a.outputTokens}`;
  return a.kind;
}

/** The plane's answer; undefined when the header is absent or not one of the three forms. */
export function parseReservation(v: string | undefined, retryAfter?: string): ReservationAnswer | undefined {
  if (v === undefined) return undefined;
  const t = v.trim();
  if (t === 'unavailable') return { kind: 'unavailable' };
  if (t === 'refused') {
    if (retryAfter === undefined) return { kind: 'refused' };
    const n = INT.test(retryAfter.trim()) ? Number(retryAfter.trim()) : UNKNOWN_RETRY_SECONDS;
    return { kind: 'refused', retryAfterSeconds: Math.max(1, n) };
  }
  const m = params(t);
  const id = m?.get('id');
  const out = m?.get('output');
  if (!m || m.size !== 2 || id === undefined || !ID.test(id) || out === undefined || !INT.test(out)) return undefined;
  return { kind: 'reserved', id: id === 'none' ? null : id, outputTokens: Number(out) };
}
