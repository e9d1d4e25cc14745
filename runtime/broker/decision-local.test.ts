/**
 * The broker's in-process decisions (the all-in-one) against its `/authz` calls: the same
 * questions asked of one real control plane both ways get the same answers (allow, deny,
 * reservation made or refused) and leave the same audit records; a decision that does not finish
 * in time is `unavailable`, which the broker refuses, and its effects are undone when it finishes
 * (an allow it recorded followed by a record saying the call was not made).
 */
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import type { BudgetUsage } from '../control-plane/budget/policy.js';
import { createDecisionEngine } from '../control-plane/decision/engine.js';
import { engineOf } from '../control-plane/decision/testkit.js';
import { startControlPlane, type RunningControlPlane } from '../control-plane/server.js';
import type { AuditEntry } from '../control-plane/types.js';
import type { Store } from '../store/factory.js';
import { openTestPglite } from '../store/testing.js';
import { createDecisionClient, type DecisionQuery, type DecisionResult } from './decision-client.js';
import { createLocalDecisionClient } from './decision-local.js';
import { deferred } from './server-testing.js';

const reserve = (outputTokens: number) => ({ promptTokens: 10, outputTokens, priceInputPer1k: 0, priceOutputPer1k: 0 });
/**
 * A result with its reservation id reduced to whether there is one (each call reserves anew), and
 * a refusal's retry-after to its type (counted from each call's own second: two calls in a row
 * may straddle a second; `retryAfter` reads the values to compare).
 */
const shape = (r: DecisionResult) =>
  r.kind === 'allow' && r.reservation
    ? { ...r, reservation: { ...r.reservation, id: typeof r.reservation.id } }
    : r.kind === 'refused'
      ? { ...r, retryAfterSeconds: typeof r.retryAfterSeconds }
      : r;
const retryAfter = (r: DecisionResult) => (r.kind === 'refused' ? (r.retryAfterSeconds ?? 0) : 0);

describe('broker decisions in process', () => {
  let store: Store;
  let cp: RunningControlPlane;
  const dispatcher = new Agent();

  beforeAll(async () => {
    store = await openTestPglite();
    cp = await startControlPlane({ store, durableAudit: false, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    await cp.plane.registry.upsert({ name: 'm', upstream: 'broker.default.svc:8080', kind: 'model' });
    await cp.plane.registry.upsert({ name: 'other', upstream: 'broker.default.svc:8080', kind: 'model' });
    await cp.plane.registry.upsert({ name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowModels: ['m'], budget: { tokensPerHour: 1000 } });
  }, 180_000);
  afterAll(async () => {
    await dispatcher.close();
    await cp?.close();
    await store?.close();
  });

  it('answers what /authz answers, and audits it the same', async () => {
    const http = createDecisionClient({ url: `http://127.0.0.1:${cp.decisionPort}/authz`, timeoutMs: 2000, dispatcher });
    const local = createLocalDecisionClient(cp.plane.engine, { timeoutMs: 2000 });
    const cases: [string, DecisionQuery, DecisionResult['kind']][] = [
      ['allowed, nothing reserved', { actor: 'bot', model: 'm', passthrough: {} }, 'allow'],
      ['allowed with a reservation that fits', { actor: 'bot', model: 'm', passthrough: {}, reserve: reserve(100) }, 'allow'],
      ['a reservation over the whole budget', { actor: 'bot', model: 'm', passthrough: {}, reserve: reserve(5000) }, 'refused'],
      ['a reservation over what is left of the budget', { actor: 'bot', model: 'm', passthrough: {}, reserve: reserve(900) }, 'refused'],
      ['a model the agent may not use', { actor: 'bot', model: 'other', passthrough: {} }, 'deny'],
      ['an actor nobody registered', { actor: 'nobody', model: 'm', passthrough: {} }, 'deny'],
      ['a scoping header the client repeated (its lines)', { actor: 'bot', model: 'm', passthrough: { [H.task]: ['t-1', 't-2'] } }, 'deny'],
      ['one task value with a comma in it', { actor: 'bot', model: 'm', passthrough: { [H.task]: 't-1, part 2' } }, 'allow'],
    ];
    for (const [what, q, kind] of cases) {
      const before = cp.plane.audit.recent(1)[0]?.seq ?? 0;
      const overHttp = await http.decide(q);
      const viaHttp = cp.plane.audit.recent(1)[0]!;
      const inProcess = await local.decide(q);
      const viaLocal = cp.plane.audit.recent(1)[0]!;
      expect(overHttp.kind, what).toBe(kind);
      expect(shape(inProcess), what).toEqual(shape(overHttp));
      // Asked a moment later, in-process: the same retry-after, or one second less.
      expect(retryAfter(overHttp) - retryAfter(inProcess), what).toBeGreaterThanOrEqual(0);
      expect(retryAfter(overHttp) - retryAfter(inProcess), what).toBeLessThanOrEqual(1);
      // One record each, alike but for their place in the chain.
      expect([viaHttp.seq, viaLocal.seq], what).toEqual([before + 1, before + 2]);
      const { seq: _s1, time: _t1, prevHash: _p1, hash: _h1, ...httpRecord } = viaHttp;
      const { seq: _s2, time: _t2, prevHash: _p2, hash: _h2, ...localRecord } = viaLocal;
      expect(localRecord, what).toEqual(httpRecord);
    }
  });

  it('a decision not finished in time is unavailable (the broker refuses it)', async () => {
    const test = engineOf([
      { name: 'm', upstream: 'broker.default.svc:8080', kind: 'model' },
      { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowModels: ['m'], budget: { callsPerHour: 10 } },
    ]);
    // A budget ledger whose usage never comes: the decision waits on it forever.
    const ports = { ...test.ports, budget: { usage: () => new Promise<never>(() => {}) } };
    const local = createLocalDecisionClient(createDecisionEngine({ policy: test.policy, ports, sinks: test.sinks }), { timeoutMs: 50 });
    expect(await local.decide({ actor: 'bot', model: 'm', passthrough: {} })).toEqual({ kind: 'unavailable', why: 'decision timed out after 50 ms' });
  });

  it('a decision that allows after the broker gave up is undone: its call not counted, its reservation given back, its allow followed by a record that the call was not made', async () => {
    await cp.plane.registry.upsert({
      name: 'tardy',
      upstream: 'tardy.agents.svc:8080',
      kind: 'agent',
      allowModels: ['m'],
      budget: { tokensPerHour: 1000, callsPerHour: 10 },
    });
    const e = cp.plane.engine;
    const finished = deferred();
    // The budget usage answers after 150 ms: the decision allows then, and commits its effects.
    const usage = e.ports.budget.usage.bind(e.ports.budget);
    const ports = {
      ...e.ports,
      budget: { usage: (agent: string, now: number) => new Promise<BudgetUsage>((r) => setTimeout(() => r(usage(agent, now)), 150)) },
    };
    const audit = { ...e.sinks.audit, append: (entry: AuditEntry) => (entry.actor === 'tardy' && finished.resolve(), e.sinks.audit.append(entry)) };
    const slow = createDecisionEngine({ policy: e.policy, ports, sinks: { ...e.sinks, audit } });
    const local = createLocalDecisionClient(slow, { timeoutMs: 20 });
    expect(await local.decide({ actor: 'tardy', model: 'm', passthrough: {}, reserve: reserve(100) })).toEqual({
      kind: 'unavailable',
      why: 'decision timed out after 20 ms',
    });
    await finished.promise;
    await expect.poll(() => cp.plane.budget.usage('tardy', Date.now()), { timeout: 5000 }).toMatchObject({ callsLastHour: 0, tokensLastHour: 0 });
    // The chain keeps the allow it recorded, and says right after it that the call was not made.
    const [allowed, abandoned] = cp.plane.audit.recent(2);
    expect(allowed).toMatchObject({ action: 'model.invoke', actor: 'tardy', service: 'm', allow: true });
    expect(abandoned).toMatchObject({
      seq: allowed!.seq + 1,
      action: 'model.invoke',
      actor: 'tardy',
      service: 'm',
      allow: false,
      reason: `decision answered after the broker's deadline; call not made (the allow of audit record ${allowed!.seq})`,
    });
    expect(abandoned!.rule).toBeUndefined();
    expect(cp.plane.audit.verify()).toEqual({ ok: true, brokenAtSeq: -1 });
  });
});
