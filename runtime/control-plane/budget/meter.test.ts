/**
 * One budget across replicas and restarts (issue 14): the shared ledger on PGlite (one process)
 * and, when TEST_DATABASE_URL is set, three control planes on one PostgreSQL schema with load
 * spread across them; the documented overshoot bound (one lease per replica) is asserted and the
 * measured figure printed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../../lib/brand.js';
import type { Store } from '../../store/factory.js';
import { openTestPglite, openTestPostgres, testSchema, TEST_DATABASE_URL } from '../../store/testing.js';
import { HOUR_MS } from './policy.js';
import { createSharedBudgetMeter } from './meter.js';
import { bucketOf, createBudgetLedger, type BudgetLedger } from './ledger.js';
import { startControlPlane, type RunningControlPlane } from '../server.js';
import type { Budget } from '../types.js';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 30);

describe('shared budget ledger (PGlite)', () => {
  let store: Store;
  beforeAll(async () => {
    store = await openTestPglite();
  }, 120_000);
  afterAll(async () => store?.close());

  it('leases never pass the ceiling, a restarted meter sees the hour, the window slides', async () => {
    const ledger = createBudgetLedger(store);
    let now = T0;
    const budgets: Record<string, Budget> = { bot: { callsPerHour: 10 } };
    const meter = () => createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => now, syncMs: 60_000, leaseShare: 0.2 });
    const a = meter();
    const decide = async (m: ReturnType<typeof meter>) => {
      await m.decisionUsage('bot', now);
      const over = m.check('bot', budgets.bot, now);
      if (over) return over;
      m.reserveCall('bot', now);
      return 'allowed';
    };
    const outcomes: string[] = [];
    for (let i = 0; i < 14; i++) outcomes.push(await decide(a));
    expect(outcomes.filter((o) => o === 'allowed')).toHaveLength(10);
    expect(outcomes.at(-1)).toMatch(/call budget exceeded: 10 of 10 calls per hour/);
    await a.close();
    expect(await ledger.read('bot', 'calls', now)).toBe(10);

    // A restart (a new meter on the same store) sees the hour's ten calls.
    const b = meter();
    expect(await decide(b)).toMatch(/call budget exceeded: 10 of 10/);
    expect(await b.refresh('bot')).toMatchObject({ callsLastHour: 10 });
    // Reports are owed whatever the ceiling and reach the ledger.
    b.recordUsage('bot', 500, 0.25, now);
    await b.flush();
    expect(await ledger.read('bot', 'tokens', now)).toBe(500);
    expect(await ledger.read('bot', 'cost', now)).toBe(0.25);
    // An hour (and a bucket) later the calls have slid out.
    now = T0 + HOUR_MS + 61_000;
    expect(await decide(b)).toBe('allowed');
    await b.close();
    expect(await ledger.read('bot', 'calls', now)).toBe(1);
  });

  it('a read takes no lease: replicas asked about an agent agree, however often they are asked', async () => {
    const ledger = createBudgetLedger(store);
    const budgets: Record<string, Budget> = { quiet: { callsPerHour: 100 } };
    const meters = [0, 1, 2].map(() => createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => T0, syncMs: 60_000 }));
    for (let round = 0; round < 3; round++) for (const m of meters) expect(await m.read('quiet')).toMatchObject({ callsLastHour: 0 });
    expect(await ledger.read('quiet', 'calls', T0)).toBe(0);
    // A decision's refresh does take one (a lease of 2 here), which the others then count as used.
    await meters[0]!.refresh('quiet');
    expect(await meters[1]!.read('quiet')).toMatchObject({ callsLastHour: 2 });
    for (const m of meters) await m.close();
  });

  it('a burst that finds the lease empty shares one ledger take, sized for every waiting decision', async () => {
    const real = createBudgetLedger(store);
    let takes = 0;
    // The ledger answering slowly, as a store busy with audit batches does.
    const ledger: typeof real = { ...real, take: async (r) => (takes++, await new Promise((w) => setTimeout(w, 20)), real.take(r)) };
    const budgets: Record<string, Budget> = { burst: { callsPerHour: 1000 } }; // a lease is 20 calls
    const now = T0;
    const m = createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => now, syncMs: 60_000 });
    // As the decision path runs: read, check and reserve in one go unless the read must wait.
    const decide = async () => {
      const usage = m.decisionUsage('burst', now);
      if (usage instanceof Promise) await usage;
      const over = m.check('burst', budgets.burst, now);
      if (over) return over;
      m.reserveCall('burst', now);
      return 'allowed';
    };
    // A first burst on a view never read, then one on a drained lease: 60 decisions at once each.
    for (const round of [1, 2]) {
      const before = takes;
      const outcomes = await Promise.all(Array.from({ length: 60 }, decide));
      expect(
        outcomes.filter((x) => x !== 'allowed'),
        `round ${round}`,
      ).toEqual([]);
      // One take per dimension (calls, tokens, cost) the first time; then the background refill
      // started at half a lease and the waiting decisions' take: never one per decision.
      expect(takes - before, `round ${round}`).toBeLessThanOrEqual(round === 1 ? 3 : 2);
    }
    await m.close();
    expect(await real.read('burst', 'calls', now)).toBe(120);
  });

  it('a lease given back at the turn of a bucket still counts as free while the ledger answers', async () => {
    const real = createBudgetLedger(store);
    let gate: Promise<void> | undefined;
    let open = () => {};
    let entered = () => {};
    const ledger: typeof real = { ...real, take: async (r) => (r.dim === 'calls' && entered(), await gate, real.take(r)) };
    const budgets: Record<string, Budget> = { tight: { callsPerHour: 2 } }; // a lease is 1 call
    let now = T0 + 29_800; // 200 ms before the next minute's bucket
    const m = createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => now, syncMs: 60_000 });
    const decide = async () => {
      await m.decisionUsage('tight', now);
      const over = m.check('tight', budgets.tight, now);
      if (over) return over;
      m.reserveCall('tight', now);
      return 'allowed';
    };
    // The first call takes two (itself and a lease of one): the window is full in the ledger.
    expect(await decide()).toBe('allowed');
    // The next minute's bucket: the lease of one goes back, and the ledger is slow to answer.
    now = T0 + 30_000;
    gate = new Promise((r) => (open = r));
    const inTake = new Promise<void>((r) => (entered = r));
    const returning = m.refresh('tight');
    await inTake;
    const second = decide();
    open();
    gate = undefined;
    await returning;
    // One of two calls used: the second is allowed (it was refused as 2 of 2 while the lease was on its way back).
    expect(await second).toBe('allowed');
    expect(await decide()).toMatch(/call budget exceeded: 2 of 2/);
    await m.close();
  });

  it('tokens given back to the last minute count as free before the ledger has them', async () => {
    const ledger = createBudgetLedger(store);
    const budgets: Record<string, Budget> = { settle: { tokensPerHour: 1000 } };
    let now = T0 + 29_800; // 200 ms before the next minute's bucket
    const m = createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => now, syncMs: 60_000 });
    // A reservation of the whole hour's tokens: the window is full.
    expect(await m.take('settle', 'tokens', 1000)).toMatchObject({ ok: true, granted: 1000 });
    expect(m.check('settle', budgets.settle, now)).toMatch(/token budget exceeded/);
    // It settles in the next minute for 400: 600 go back to the bucket they were charged in.
    now = T0 + 30_000;
    m.giveBack('settle', 'tokens', 600, bucketOf('tokens', T0 + 29_800));
    // Before the background loop writes them (they were read as used, and decisions refused).
    expect(m.usage('settle', now).tokensLastHour).toBe(400);
    expect(m.check('settle', budgets.settle, now)).toBeUndefined();
    await m.flush();
    expect(await ledger.read('settle', 'tokens', now)).toBe(400);
    expect(m.usage('settle', now).tokensLastHour).toBe(400);
    // A give-back to a bucket that has slid out of the window frees nothing (the ledger drops it too).
    m.giveBack('settle', 'tokens', 300, bucketOf('tokens', now - 2 * HOUR_MS));
    expect(m.usage('settle', now).tokensLastHour).toBe(400);
    await m.close();
  });

  it('a reservation whose ledger take crosses into the next minute is granted, not refused with a wrong figure', async () => {
    const real = createBudgetLedger(store);
    const budgets: Record<string, Budget> = { turn: { tokensPerHour: 1000 } };
    let now = T0 + 29_900; // 100 ms before the next minute's bucket
    let crossing = false;
    // The ledger's answer comes back in the next minute (a round trip across the turn).
    const ledger: BudgetLedger = { ...real, take: async (r) => (crossing && ((now = T0 + 30_000), (crossing = false)), real.take(r)) };
    const m = createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => now, syncMs: 60_000 });
    try {
      // 100 of 1000 used, and a lease of 20 (2%) kept for the next reservation.
      expect(await m.take('turn', 'tokens', 100)).toMatchObject({ ok: true, granted: 100 });
      await m.flush();
      crossing = true;
      // 300 more fit easily: the take that fetches them answers after the minute turned.
      expect(await m.take('turn', 'tokens', 300)).toMatchObject({ ok: true, granted: 300 });
      await m.flush();
      // Charged once: 400 of the hour, plus no more than one lease held ahead.
      const used = await real.read('turn', 'tokens', now);
      expect(used).toBeGreaterThanOrEqual(400);
      expect(used).toBeLessThanOrEqual(420);
      expect(m.usage('turn', now).tokensLastHour).toBe(400);
    } finally {
      await m.close();
    }
    expect(await real.read('turn', 'tokens', now)).toBe(400);
  });

  it('a leased call undone after its bucket turned goes back to that bucket', async () => {
    const ledger = createBudgetLedger(store);
    const budgets: Record<string, Budget> = { undo: { callsPerHour: 100 } }; // a lease is 2 calls
    let now = T0 + 29_900;
    const m = createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => now, syncMs: 60_000 });
    await m.refresh('undo'); // a lease of two, charged in this minute's bucket
    expect(await ledger.read('undo', 'calls', now)).toBe(2);
    const release = m.reserveCall('undo', now);
    expect(m.usage('undo', now).callsLastHour).toBe(1);
    // The minute turns while the call waits (a token reservation, the audit record): the background
    // loop gives the rest of the lease back and takes a new one; then the call is undone.
    now = T0 + 30_000;
    await m.refresh('undo');
    release();
    expect(m.usage('undo', now).callsLastHour).toBe(0);
    await m.close();
    expect(await ledger.read('undo', 'calls', now)).toBe(0);
  });

  it('a call owed to the ledger and undone after its bucket turned comes off the bucket it was written in', async () => {
    const ledger = createBudgetLedger(store);
    const budgets: Record<string, Budget> = { owed: { callsPerHour: 100 } }; // a lease is 2 calls
    let now = T0 + 29_900;
    const m = createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => now, syncMs: 60_000 });
    // No lease yet: the call is owed, and the next take writes it (with a lease of two) in this minute.
    const release = m.reserveCall('owed', now);
    await m.refresh('owed');
    expect(await ledger.read('owed', 'calls', now)).toBe(3);
    // The minute turns: the lease goes back to the last minute, a new one is charged in this one;
    // then the call is undone.
    now = T0 + 30_000;
    await m.refresh('owed');
    release();
    expect(m.usage('owed', now).callsLastHour).toBe(0);
    await m.close();
    // Nothing is left counted: the undone call came off the last minute (a -1 in this minute's
    // bucket is floored at zero by the ledger, and the call stayed counted for the hour).
    expect(await ledger.read('owed', 'calls', now)).toBe(0);
    expect(await ledger.read('owed', 'calls', now + HOUR_MS - 30_000)).toBe(0);
  });

  it('a call owed and undone after a later take wrote other owed calls elsewhere comes off its own bucket', async () => {
    const ledger = createBudgetLedger(store);
    const budgets: Record<string, Budget> = { owed2: { callsPerHour: 10 } }; // a lease is 1 call
    let now = T0 + 29_900;
    const m = createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => now, syncMs: 60_000 });
    // No lease yet: call A is owed, and the take it starts writes it in this minute.
    const releaseA = m.reserveCall('owed2', now);
    await m.refresh('owed2');
    // The minute turns. Call B takes the lease; call C, right behind it, finds it empty and is
    // owed: the refill B started writes C in this minute.
    now = T0 + 30_000;
    await m.refresh('owed2');
    m.reserveCall('owed2', now);
    m.reserveCall('owed2', now);
    await m.refresh('owed2');
    // Now A is undone: it comes off the last minute, where it was written, not off this one.
    releaseA();
    expect(m.usage('owed2', now).callsLastHour).toBe(2);
    await m.close();
    expect(await ledger.read('owed2', 'calls', now)).toBe(2);
    // Once the last minute has left the window (an hour of minutes plus the current one), B and C
    // are still counted: had A come off this minute, one of them would leave the window early.
    expect(await ledger.read('owed2', 'calls', now + HOUR_MS)).toBe(2);
  });

  it('a call owed and undone while the take writing it runs: given back once written, even after that take failed', async () => {
    const real = createBudgetLedger(store);
    let gate: Promise<void> | undefined;
    let failures = 0;
    const ledger: BudgetLedger = {
      ...real,
      async take(r) {
        await gate;
        if (failures > 0 && failures--) throw new Error('ledger unavailable');
        return real.take(r);
      },
    };
    const budgets: Record<string, Budget> = { 'flight-ok': { callsPerHour: 10 }, 'flight-fail': { callsPerHour: 10 } }; // a lease is 1 call
    const m = createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => T0, syncMs: 60_000 });
    for (const agent of ['flight-ok', 'flight-fail']) {
      let open!: () => void;
      gate = new Promise<void>((r) => (open = r));
      failures = agent === 'flight-fail' ? 1 : 0;
      // No lease: the call is owed, and the refill it starts takes it along, then waits at the gate.
      const release = m.reserveCall(agent, T0);
      await new Promise((r) => setImmediate(r));
      release();
      open();
      gate = undefined;
      await m.refresh(agent).catch(() => {});
      await m.refresh(agent);
      expect(m.usage(agent, T0).callsLastHour, agent).toBe(0);
    }
    await m.close();
    expect(await real.read('flight-ok', 'calls', T0)).toBe(0);
    expect(await real.read('flight-fail', 'calls', T0)).toBe(0);
  });

  it('audit mode counts past the ceiling and never refuses', async () => {
    const ledger = createBudgetLedger(store);
    const budgets: Record<string, Budget> = { aud: { callsPerHour: 3, mode: 'audit' } };
    const m = createSharedBudgetMeter({ ledger, budgetOf: (a) => budgets[a], now: () => T0, syncMs: 60_000 });
    for (let i = 0; i < 5; i++) {
      await m.decisionUsage('aud', T0);
      expect(m.check('aud', budgets.aud, T0)).toBeUndefined();
      m.reserveCall('aud', T0);
    }
    await m.close();
    expect(await ledger.read('aud', 'calls', T0)).toBe(5);
  });
});

describe.skipIf(!TEST_DATABASE_URL)('three control planes on one PostgreSQL schema (skipped without TEST_DATABASE_URL)', () => {
  const schema = testSchema();
  const planes: { cp: RunningControlPlane; store: Store }[] = [];
  const start = async () => {
    const store = await openTestPostgres({ schema, keepSchema: true, poolSize: 4 });
    const cp = await startControlPlane({ store, durableAudit: false, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    return { cp, store };
  };
  const stop = async (p: { cp: RunningControlPlane; store: Store }) => {
    await p.cp.close();
    await p.store.close();
  };
  afterAll(async () => {
    for (const p of planes) await stop(p).catch(() => {});
    // The schema goes with the last store (a fresh handle drops it).
    const s = await openTestPostgres({ schema });
    await s.close();
  });

  /** `n` decisions spread round-robin over the planes, `concurrency` at a time; the number allowed. */
  async function load(n: number, concurrency: number): Promise<number> {
    let next = 0;
    let allowed = 0;
    const worker = async () => {
      while (next < n) {
        const i = next++;
        const p = planes[i % planes.length]!;
        const r = await fetch(`http://127.0.0.1:${p.cp.decisionPort}/authz`, { headers: { [H.actor]: 'bot', [H.service]: 'search' } });
        await r.arrayBuffer();
        if (r.status === 200) allowed++;
        else expect(r.status).toBe(403);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    return allowed;
  }

  it('callsPerHour 100: allowed <= 100 + one lease per replica, also after a restart mid-hour', async () => {
    for (let i = 0; i < 3; i++) planes.push(await start());
    const mgmt = `http://127.0.0.1:${planes[0]!.cp.mgmtPort}`;
    for (const s of [
      { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' },
      { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowTools: ['search'], budget: { callsPerHour: 100 } },
    ]) {
      const r = await fetch(`${mgmt}/v1/registry/services`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(s) });
      expect(r.status).toBe(200);
    }
    for (const p of planes) await expect.poll(() => p.cp.plane.registry.get('bot')?.budget?.callsPerHour, { timeout: 10_000 }).toBe(100);
    const lease = planes[0]!.cp.plane.budget.leaseSize({ callsPerHour: 100 });
    const bound = 100 + planes.length * lease;

    const first = await load(240, 12);
    // Leases never starve the fleet far below the ceiling either.
    expect(first).toBeGreaterThanOrEqual(100 - planes.length * lease);
    expect(first).toBeLessThanOrEqual(bound);

    // Restart one replica mid-hour: the new one reads the hour's usage from the ledger.
    await stop(planes.shift()!);
    planes.push(await start());
    await expect.poll(() => planes[2]!.cp.plane.registry.get('bot')?.budget?.callsPerHour, { timeout: 10_000 }).toBe(100);
    const second = await load(120, 12);
    const total = first + second;
    expect(total).toBeLessThanOrEqual(bound);
    console.log(
      `budget overshoot (3 replicas, callsPerHour 100, lease ${lease}): ${first} allowed, then ${second} after a restart; total ${total}, bound ${bound}`,
    );
  }, 120_000);
});
