/** The reservation's header codec: what the broker sends parses back whole; anything else is refused by name. */
import { describe, expect, it } from 'vitest';
import { formatReservation, formatReserve, isReservePrice, parseReservation, parseReserve } from './reservation-header.js';

describe('X-Writ-Reserve and X-Writ-Reservation', () => {
  it('round-trips what the broker sends, tiny prices included', () => {
    for (const ask of [
      { promptTokens: 120, outputTokens: 4096, priceInputPer1k: 0.00015, priceOutputPer1k: 0.0006 },
      { promptTokens: 0, outputTokens: 1, priceInputPer1k: 0, priceOutputPer1k: 1.5e-7, partial: true },
      { promptTokens: 1e9, outputTokens: 1e9, priceInputPer1k: 1e6, priceOutputPer1k: 12.5 },
    ]) {
      expect(parseReserve(formatReserve(ask))).toEqual(ask);
    }
    expect(parseReserve(' output=5 ;prompt=3; input-price=1 ; output-price=2;partial ')).toEqual({
      promptTokens: 3,
      outputTokens: 5,
      priceInputPer1k: 1,
      priceOutputPer1k: 2,
      partial: true,
    });
  });

  it('names what is wrong with a malformed ask', () => {
    const err = (v: string) => (parseReserve(v) as { error?: string }).error;
    const ok = 'prompt=1; output=2; input-price=0.1; output-price=0.2';
    expect(err('')).toMatch(/empty/);
    expect(err(`${ok}; prompt=3`)).toMatch(/repeated/);
    expect(err(`${ok};`)).toMatch(/empty/);
    expect(err('output=2; input-price=0.1; output-price=0.2')).toMatch(/^prompt must be an integer/);
    expect(err(ok.replace('output=2', 'output=0'))).toMatch(/^output must be an integer from 1/);
    expect(err(ok.replace('prompt=1', 'prompt=-1'))).toMatch(/^prompt/);
    expect(err(ok.replace('prompt=1', 'prompt=1.5'))).toMatch(/^prompt/);
    expect(err(ok.replace('prompt=1', 'prompt=1000000001'))).toMatch(/^prompt/);
    expect(err(ok.replace('input-price=0.1', 'input-price=NaN'))).toMatch(/^input-price must be a decimal/);
    expect(err(ok.replace('input-price=0.1', 'input-price=-0.1'))).toMatch(/^input-price/);
    expect(err(ok.replace('output-price=0.2', 'output-price=1e21'))).toMatch(/^output-price/);
    expect(err(ok.replace('output-price=0.2', 'output-price=2000000'))).toMatch(/^output-price/);
    expect(err(`${ok}; partial=yes`)).toMatch(/partial takes no value/);
    expect(err(`${ok}; ttl=5`)).toMatch(/unknown parameter "ttl"/);
  });

  it('tells which prices the header carries: exactly those that round-trip', () => {
    const ask = (p: number) => ({ promptTokens: 1, outputTokens: 1, priceInputPer1k: p, priceOutputPer1k: 0 });
    for (const p of [0, 0.0006, 1.5e-7, 1.234567890123e-7, 0.000123456789, 999_999.5, 1e6]) {
      expect(isReservePrice(p), String(p)).toBe(true);
      expect(parseReserve(formatReserve(ask(p))), String(p)).toEqual(ask(p));
    }
    for (const p of [0.00001234567890123, 0.1 + 0.2, 2_000_000, 1e21, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(isReservePrice(p), String(p)).toBe(false);
      expect(parseReserve(formatReserve(ask(p))), String(p)).toHaveProperty('error');
    }
  });

  it('reads the three answers and nothing else', () => {
    const id = '3f1c6a52-2a9e-4a52-9d5e-1f0a9c3b7e11';
    expect(parseReservation(formatReservation({ kind: 'reserved', id, outputTokens: 77 }))).toEqual({ kind: 'reserved', id, outputTokens: 77 });
    expect(parseReservation(formatReservation({ kind: 'reserved', id: null, outputTokens: 5 }))).toEqual({ kind: 'reserved', id: null, outputTokens: 5 });
    expect(parseReservation(formatReservation({ kind: 'refused', retryAfterSeconds: 9 }), '9')).toEqual({ kind: 'refused', retryAfterSeconds: 9 });
    // No retry-after: it never fits; one that is not a number of seconds: a minute.
    expect(parseReservation('refused')).toStrictEqual({ kind: 'refused' });
    expect(parseReservation('refused', 'soon')).toEqual({ kind: 'refused', retryAfterSeconds: 60 });
    expect(parseReservation('unavailable')).toEqual({ kind: 'unavailable' });
    for (const bad of [undefined, '', 'ok', 'id=a b; output=1', 'id=x', 'id=x; output=-1', 'id=x; output=1; more=2', `id=${'a'.repeat(65)}; output=1`]) {
      expect(parseReservation(bad)).toBeUndefined();
    }
  });
});
