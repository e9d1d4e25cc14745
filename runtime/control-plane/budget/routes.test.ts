/**
 * Audit-mode budgets and budget visibility over real sockets: a control plane on PGlite, /authz
 * decisions, `GET /v1/budgets/{agent}` and the `budget_remaining` gauge on /metrics.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H, metric } from '../../lib/brand.js';
import type { Store } from '../../store/factory.js';
import { openTestPglite } from '../../store/testing.js';
import { createReservations } from './reservations.js';
import { budgetRoutes } from './routes.js';
import { createSharedBudgetMeter } from './meter.js';
import { createBudgetLedger } from './ledger.js';
import { startControlPlane, type RunningControlPlane } from '../server.js';
import type { Budget } from '../types.js';

describe('budget mode and visibility', () => {
  let store: Store;
  let cp: RunningControlPlane;
  let mgmt = '';
  let authz = '';
  const post = (url: string, body: unknown) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const decide = (actor: string) => fetch(`${authz}/authz`, { headers: { [H.actor]: actor, [H.service]: 'search' } });

  beforeAll(async () => {
    store = await openTestPglite();
    cp = await startControlPlane({ store, durableAudit: false, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    mgmt = `http://127.0.0.1:${cp.mgmtPort}`;
    authz = `http://127.0.0.1:${cp.decisionPort}`;
    for (const s of [
      { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' },
      { name: 'strict', upstream: 'strict.agents.svc:8080', kind: 'agent', allowTools: ['search'], budget: { callsPerHour: 2 } },
      {
        name: 'watched',
        upstream: 'watched.agents.svc:8080',
        kind: 'agent',
        allowTools: ['search'],
        budget: { callsPerHour: 2, tokensPerHour: 1000, mode: 'audit' },
      },
    ])
      expect((await post(`${mgmt}/v1/registry/services`, s)).status).toBe(200);
  }, 180_000);
  afterAll(async () => {
    await cp?.close();
    await store?.close();
  });

  it('the registry keeps the mode; a bad mode is a 400', async () => {
    const s = (await (await fetch(`${mgmt}/v1/registry/services/watched`)).json()) as { budget: unknown };
    expect(s.budget).toEqual({ tokensPerHour: 1000, callsPerHour: 2, mode: 'audit' });
    const bad = await post(`${mgmt}/v1/registry/services`, { name: 'x', upstream: 'x.svc:80', kind: 'agent', budget: { callsPerHour: 1, mode: 'warn' } });
    expect(bad.status).toBe(400);
  });

  it('enforce denies past the ceiling; audit allows and records what would have been denied', async () => {
    for (let i = 0; i < 2; i++) expect((await decide('strict')).status).toBe(200);
    const over = await decide('strict');
    expect(over.status).toBe(403);
    for (let i = 0; i < 2; i++) expect((await decide('watched')).status).toBe(200);
    const audited = await decide('watched');
    expect(audited.status).toBe(200);
    const rows = (await (await fetch(`${mgmt}/v1/audit?limit=1000`)).json()) as { actor?: string; allow: boolean; reason: string }[];
    const watched = rows.filter((r) => r.actor === 'watched');
    expect(watched).toHaveLength(3);
    expect(watched.every((r) => r.allow)).toBe(true);
    expect(watched[2]!.reason).toMatch(/^over budget \(audit mode\): call budget exceeded: 2 of 2 calls per hour/);
    expect(watched[0]!.reason).not.toMatch(/over budget/);
    // Audit mode still counts: the meter shows 3 calls against 2.
    const view = (await (await fetch(`${mgmt}/v1/budgets/watched`)).json()) as {
      mode: string;
      dimensions: Record<string, { limit: number; used: number; remaining: number | null }>;
    };
    expect(view.mode).toBe('audit');
    expect(view.dimensions.callsPerHour).toMatchObject({ limit: 2, used: 3, remaining: 0 });
  });

  it('GET /v1/budgets/{agent}: every dimension, null remaining when unlimited, 404 for a non-agent', async () => {
    cp.plane.recordUsage({ agent: 'watched', model: 'gpt', tokens: 250, costUsd: 0.5 });
    const r = await fetch(`${mgmt}/v1/budgets/watched`);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({
      agent: 'watched',
      mode: 'audit',
      dimensions: {
        tokensPerHour: { limit: 1000, used: 250, remaining: 750, windowSeconds: 3600 },
        callsPerHour: { limit: 2, used: 3, remaining: 0, windowSeconds: 3600 },
        costUsdPerDay: { limit: 0, used: 0.5, remaining: null, windowSeconds: 86400 },
      },
    });
    expect(((await (await fetch(`${mgmt}/v1/budgets/strict`)).json()) as { mode: string }).mode).toBe('enforce');
    for (const name of ['search', 'ghost']) {
      const nf = await fetch(`${mgmt}/v1/budgets/${name}`);
      expect(nf.status).toBe(404);
      expect(await nf.json()).toEqual({ error: `agent "${name}" not found` });
    }
  });

  it('a reservation with figures no call makes is a 400 and charges nothing', async () => {
    const before = await (await fetch(`${mgmt}/v1/budgets/watched`)).json();
    const ok = { promptTokens: 1, outputTokens: 1, priceInputPer1k: 0, priceOutputPer1k: 0 };
    for (const bad of [{ priceOutputPer1k: 1e308 }, { priceInputPer1k: 2e6 }, { outputTokens: 2e9 }]) {
      const r = await post(`${mgmt}/v1/budgets/watched/reservations`, { ...ok, ...bad });
      expect(r.status, JSON.stringify(bad)).toBe(400);
    }
    expect(await (await fetch(`${mgmt}/v1/budgets/watched`)).json()).toEqual(before);
  });

  it('a refused reservation says when it may fit; one over the whole budget says it never will, with no retry-after', async () => {
    const tight = { name: 'tight', upstream: 'tight.agents.svc:8080', kind: 'agent', budget: { tokensPerHour: 100 } };
    expect((await post(`${mgmt}/v1/registry/services`, tight)).status).toBe(200);
    const ask = (outputTokens: number) =>
      post(`${mgmt}/v1/budgets/tight/reservations`, { promptTokens: 10, outputTokens, priceInputPer1k: 0, priceOutputPer1k: 0 });
    const never = await ask(200);
    expect(never.status).toBe(429);
    expect(never.headers.get('retry-after')).toBeNull();
    expect(await never.json()).toMatchObject({
      error: expect.stringMatching(/needs up to 210 of 100 tokens per hour, more than the whole budget: it never fits; ask for fewer tokens/),
      need: 210,
      limit: 100,
      freesAt: null,
      retryAfterSeconds: null,
    });
    expect((await ask(80)).status).toBe(200);
    const later = await ask(80);
    expect(later.status).toBe(429);
    const body = (await later.json()) as { retryAfterSeconds: number; freesAt: string; error: string };
    expect(later.headers.get('retry-after')).toBe(String(body.retryAfterSeconds));
    expect(body.retryAfterSeconds).toBeGreaterThan(0);
    expect(body.error).toMatch(/needs up to 90 of 100 tokens per hour and 90 are used or reserved; frees up from /);
  });

  it('/metrics: budget_remaining per agent and dimension with a ceiling', async () => {
    const text = await (await fetch(`${mgmt}/metrics`)).text();
    const name = metric('budget_remaining');
    expect(text).toContain(`# TYPE ${name} gauge`);
    expect(text).toContain(`${name}{agent="watched",dimension="tokens_per_hour"} 750`);
    expect(text).toContain(`${name}{agent="watched",dimension="calls_per_hour"} 0`);
    expect(text).toContain(`${name}{agent="strict",dimension="calls_per_hour"} 0`);
    expect(text).not.toMatch(new RegExp(`${name}\\{agent="watched",dimension="cost_usd_per_day"\\}`));
  });

  it('usage naming a reservation the agent does not hold is charged as unreserved, not dropped', async () => {
    const used = async () =>
      ((await (await fetch(`${mgmt}/v1/budgets/watched`)).json()) as { dimensions: { tokensPerHour: { used: number } } }).dimensions.tokensPerHour.used;
    const before = await used();
    const r = await post(`${mgmt}/v1/usage`, { agent: 'watched', model: 'gpt', tokens: 90, costUsd: 0, reservation: '00000000-0000-4000-8000-00000000abcd' });
    expect(r.status).toBe(200);
    expect(await used()).toBe(before + 90);
  });
});

describe('budget routes while the store is down', () => {
  it('a reservation the ledger cannot take is a 503 with a fixed message, never the database text', async () => {
    const store = await openTestPglite();
    const budget: Budget = { tokensPerHour: 10_000 };
    const registry = { get: (n: string) => (n === 'bot' ? { kind: 'agent', budget } : undefined), list: () => [{ name: 'bot', kind: 'agent', budget }] };
    const meter = createSharedBudgetMeter({ ledger: createBudgetLedger(store), budgetOf: () => budget, now: () => Date.now(), syncMs: 60_000 });
    const reservations = createReservations({ store, meter, budgetOf: () => budget, now: () => Date.now(), ttlMs: 60_000, sweepMs: 0 });
    await store.close();
    const app = budgetRoutes({ registry, budget: meter, reservations, now: () => Date.now() });
    const r = await app.request('/v1/budgets/bot/reservations', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ promptTokens: 10, outputTokens: 10, priceInputPer1k: 0, priceOutputPer1k: 0 }),
    });
    expect(r.status).toBe(503);
    expect(await r.json()).toEqual({ error: 'budget store unavailable' });
    await reservations.close();
    await meter.close().catch(() => {});
  });

  it('usage while the store is down: the plain report is recorded, the settlement is a 503 naming it for the retry', async () => {
    const store = await openTestPglite();
    const cp = await startControlPlane({ store, durableAudit: false, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    try {
      await cp.plane.registry.upsert({ name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', budget: { tokensPerHour: 10_000 } });
      const mgmt = `http://127.0.0.1:${cp.mgmtPort}`;
      const reserved = (await (
        await fetch(`${mgmt}/v1/budgets/bot/reservations`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ promptTokens: 10, outputTokens: 90, priceInputPer1k: 0, priceOutputPer1k: 0 }),
        })
      ).json()) as { id: string };
      await cp.plane.reservations.expire(); // the row is written
      await store.close();
      const before = cp.plane.budget.usage('bot', Date.now()).tokensLastHour;
      const r = await fetch(`${mgmt}/v1/usage`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify([
          { agent: 'bot', model: 'gpt', tokens: 7, costUsd: 0 },
          { agent: 'bot', model: 'gpt', tokens: 40, costUsd: 0, reservation: reserved.id },
        ]),
      });
      expect(r.status).toBe(503);
      expect(await r.json()).toEqual({ error: 'budget store unavailable', unsettled: [1] });
      expect(cp.plane.budget.usage('bot', Date.now()).tokensLastHour).toBe(before + 7);
    } finally {
      await cp.close().catch(() => {});
    }
  });
});
