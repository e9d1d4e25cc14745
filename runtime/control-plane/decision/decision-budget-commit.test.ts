/**
 * Budgets in the egress decision and its commit (SPEC 4.1 and the choices in ../README.md): calls,
 * tokens and cost per window counted by the in-memory budget meter under an injected clock, and
 * the commit that appends the audit row before the metrics (an audit failure denies).
 */
import { describe, expect, it } from 'vitest';
import type { Service } from '../types.js';
import { HOUR_MS } from '../budget/policy.js';
import { createBudgetMeter } from '../budget/testkit.js';
import { authorize } from './engine.js';
import { engineOf } from './testkit.js';
import { base, check, opa, run, SERVICES, T0 } from './table-testing.js';

describe('budgets in the egress decision', () => {
  const withBudget = (budget: Service['budget']) => SERVICES.map((s) => (s.name === 'bot' ? { ...s, budget } : s));

  it('calls per hour: each allowed decision counts, denied ones do not, the window slides', async () => {
    let now = T0;
    const budget = createBudgetMeter();
    const d = { services: withBudget({ callsPerHour: 2 }), budget, now: () => now };
    expect((await run({ ...base, target: 'notes' }, d)).decision.status).toBe(403); // not allowlisted: not counted
    expect((await run(base, d)).decision.status).toBe(200);
    expect((await run(base, d)).decision.status).toBe(200);
    const over = await run(base, d);
    check(over, { status: 403, rule: 'inline', reason: /call budget exceeded: 2 of 2 calls per hour/ });
    now = T0 + HOUR_MS - 1;
    expect((await run(base, d)).decision.status).toBe(403);
    now = T0 + HOUR_MS + HOUR_MS / 60 + 1;
    expect((await run(base, d)).decision.status).toBe(200);
  });

  it('a call denied by a later layer (OPA) is not counted', async () => {
    const budget = createBudgetMeter();
    const d = { services: withBudget({ callsPerHour: 1 }), budget };
    expect((await run(base, { ...d, opa: opa(false) })).decision.status).toBe(403);
    expect(budget.usage('bot', T0).callsLastHour).toBe(0);
    expect((await run(base, d)).decision.status).toBe(200);
    expect(budget.usage('bot', T0).callsLastHour).toBe(1);
  });

  it('a budget store that cannot answer denies, and its own words stay out of the answer', async () => {
    const budget = createBudgetMeter();
    const down = Object.assign(Object.create(budget) as typeof budget, {
      usage: () => Promise.reject(new Error('database "ledger_prod" is not currently accepting connections')),
    });
    const d = await run(base, { services: withBudget({ callsPerHour: 5 }), budget: down });
    check(d, { status: 403, rule: 'inline', reason: /^decision error: budget usage unavailable \(budget store unreachable\)$/ });
  });

  it('a reservation the ledger cannot take denies without the ledger words', async () => {
    const e = engineOf(withBudget({ tokensPerHour: 1000 }), { now: () => T0 });
    const reservations = { reserve: () => Promise.reject(new Error('connect ECONNREFUSED 10.0.0.7:5432')), settle: async () => true };
    const engine = { ...e, sinks: { ...e.sinks, reservations } };
    const ask = { promptTokens: 10, outputTokens: 20, priceInputPer1k: 0, priceOutputPer1k: 0 };
    const d = await authorize(engine, { ...base, target: 'gpt', targetKind: 'model', reserve: ask });
    check(d, { status: 403, rule: 'inline', reason: /^budget ledger unavailable$/ });
    expect(e.audit.at(-1)).toMatchObject({ allow: false, reason: 'budget ledger unavailable' });
  });

  it('tokens per hour from usage reports, with expiry', async () => {
    let now = T0;
    const budget = createBudgetMeter();
    const d = { services: withBudget({ tokensPerHour: 1000 }), budget, now: () => now };
    budget.recordUsage('bot', 999, 0, now);
    expect((await run(base, d)).decision.status).toBe(200);
    budget.recordUsage('bot', 1, 0, now);
    check(await run(base, d), { status: 403, rule: 'inline', reason: /token budget exceeded: 1000 of 1000/ });
    now += HOUR_MS + 2 * 60_000;
    expect((await run(base, d)).decision.status).toBe(200);
  });

  it('USD per day from usage reports, with expiry', async () => {
    let now = T0;
    const budget = createBudgetMeter();
    const d = { services: withBudget({ costUsdPerDay: 2.5 }), budget, now: () => now };
    budget.recordUsage('bot', 10, 2.5, now);
    check(await run(base, d), { status: 403, rule: 'inline', reason: /cost budget exceeded: 2.5 of 2.5 USD per day/ });
    now += 23 * HOUR_MS;
    expect((await run(base, d)).decision.status).toBe(403);
    now = T0 + 24 * HOUR_MS + 16 * 60_000;
    expect((await run(base, d)).decision.status).toBe(200);
  });

  it('zero ceilings are no limit', async () => {
    const budget = createBudgetMeter();
    budget.recordUsage('bot', 1e9, 1e9, T0);
    const d = { services: withBudget({ tokensPerHour: 0, callsPerHour: 0, costUsdPerDay: 0 }), budget };
    expect((await run(base, d)).decision.status).toBe(200);
  });

  it('budget is checked after the allowlist', async () => {
    const budget = createBudgetMeter();
    budget.recordUsage('bot', 5000, 0, T0);
    const d = { services: withBudget({ tokensPerHour: 10 }), budget };
    expect((await run({ ...base, target: 'notes' }, d)).decision.reason).toMatch(/allowTools/);
  });
});

describe('commit: audit then metrics', () => {
  it('appends the audit row and observes the decision', async () => {
    const observed: unknown[] = [];
    const e = engineOf(SERVICES, { now: () => T0 });
    const withMeter = { ...e, sinks: { ...e.sinks, meter: { observeDecision: (...a: unknown[]) => observed.push(a.slice(0, 3)) } } };
    await authorize(withMeter, { kind: 'ingress', service: 'web' });
    await authorize(withMeter, { ...base, target: 'nowhere' });
    expect(e.audit.map((r) => [r.action, r.allow])).toEqual([
      ['authz', true],
      ['egress', false],
    ]);
    expect(observed).toEqual([
      ['web', true, 'inline'],
      ['unknown', false, 'registry'],
    ]);
  });

  it('an audit failure turns an allow into a deny', async () => {
    const e = engineOf(SERVICES);
    const failing = {
      ...e,
      sinks: {
        ...e.sinks,
        audit: {
          append: () => {
            throw new Error('disk full');
          },
        },
      },
    };
    const out = await authorize(failing, { kind: 'ingress', service: 'web' });
    expect(out.decision).toMatchObject({ allow: false, status: 403 });
    expect(out.decision.reason).toMatch(/audit unavailable: disk full/);
    expect(out.decision.headers).toEqual({});
  });
});
