import { describe, expect, it } from 'vitest';
import { DAY_MS, HOUR_MS } from './policy.js';
import { createBudgetMeter } from './testkit.js';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);

describe('budget meter', () => {
  it('no budget or zero ceilings never deny', () => {
    const m = createBudgetMeter();
    m.recordUsage('a', 1e9, 1e9, T0);
    for (let i = 0; i < 5; i++) m.reserveCall('a', T0);
    expect(m.check('a', undefined, T0)).toBeUndefined();
    expect(m.check('a', {}, T0)).toBeUndefined();
    expect(m.check('a', { tokensPerHour: 0, callsPerHour: 0, costUsdPerDay: 0 }, T0)).toBeUndefined();
  });

  it('tokens per hour: denies at the ceiling, frees after a full hour, not before', () => {
    const m = createBudgetMeter();
    m.recordUsage('a', 60, 0, T0);
    expect(m.check('a', { tokensPerHour: 100 }, T0)).toBeUndefined();
    m.recordUsage('a', 40, 0, T0 + 1000);
    expect(m.check('a', { tokensPerHour: 100 }, T0 + 2000)).toMatch(/token budget exceeded: 100 of 100/);
    // Still counted just before the hour has passed.
    expect(m.check('a', { tokensPerHour: 100 }, T0 + HOUR_MS - 1)).toMatch(/token/);
    // Gone once the window (plus at most one bucket) has passed.
    expect(m.check('a', { tokensPerHour: 100 }, T0 + HOUR_MS + HOUR_MS / 60 + 1001)).toBeUndefined();
    expect(m.usage('a', T0 + 2 * HOUR_MS).tokensLastHour).toBe(0);
  });

  it('calls per hour: counts reservations, a released reservation does not count', () => {
    const m = createBudgetMeter();
    const b = { callsPerHour: 2 };
    m.reserveCall('a', T0);
    const release = m.reserveCall('a', T0);
    expect(m.check('a', b, T0)).toMatch(/call budget exceeded: 2 of 2/);
    release();
    release(); // idempotent
    expect(m.check('a', b, T0)).toBeUndefined();
    expect(m.usage('a', T0).callsLastHour).toBe(1);
    m.reserveCall('a', T0 + 30 * 60_000);
    expect(m.check('a', b, T0 + 30 * 60_000)).toMatch(/call/);
    // The first call has slid out, the second is still in.
    expect(m.usage('a', T0 + HOUR_MS + 2 * 60_000).callsLastHour).toBe(1);
    expect(m.check('a', b, T0 + HOUR_MS + 2 * 60_000)).toBeUndefined();
  });

  it('cost per day: sliding day, fractional dollars', () => {
    const m = createBudgetMeter();
    m.recordUsage('a', 0, 0.75, T0);
    m.recordUsage('a', 0, 0.25, T0 + 12 * HOUR_MS);
    expect(m.check('a', { costUsdPerDay: 1 }, T0 + 12 * HOUR_MS)).toMatch(/cost budget exceeded: 1 of 1 USD/);
    expect(m.check('a', { costUsdPerDay: 1.5 }, T0 + 12 * HOUR_MS)).toBeUndefined();
    // After a day (+ one 15-minute bucket) the first report slid out.
    const later = T0 + DAY_MS + 16 * 60_000;
    expect(m.usage('a', later).costUsdLastDay).toBeCloseTo(0.25);
    expect(m.check('a', { costUsdPerDay: 1 }, later)).toBeUndefined();
  });

  it('agents are metered separately and the meter map is bounded', () => {
    const m = createBudgetMeter({ maxAgents: 3 });
    m.recordUsage('a', 10, 0, T0);
    expect(m.check('b', { tokensPerHour: 10 }, T0)).toBeUndefined();
    expect(m.check('a', { tokensPerHour: 10 }, T0)).toMatch(/token/);
    for (const n of ['b', 'c', 'd', 'e']) m.recordUsage(n, 1, 0, T0);
    expect(m.size()).toBeLessThanOrEqual(3);
  });

  it('ignores non-finite or negative usage', () => {
    const m = createBudgetMeter();
    m.recordUsage('a', -5, Number.NaN, T0);
    m.recordUsage('a', Number.POSITIVE_INFINITY, 1, T0);
    expect(m.usage('a', T0)).toEqual({ tokensLastHour: 0, callsLastHour: 0, costUsdLastDay: 0 });
  });
});
