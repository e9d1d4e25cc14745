/**
 * Usage delivered in process (the all-in-one) lands as a post to `POST /v1/usage` does: one real
 * control plane on PGlite gets the same reports from a reporter posting over HTTP (agent `posted`)
 * and from one delivering in process (agent `local`), and its budget view and token counter show
 * the same figures for both. A bad report is refused alone; a recording that throws is retried.
 */
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../lib/brand.js';
import type { Store } from '../store/factory.js';
import { openTestPglite } from '../store/testing.js';
import { startControlPlane, type RunningControlPlane } from '../control-plane/server.js';
import type { UsageReport } from '../control-plane/types.js';
import { deliverUsageLocally } from './usage-local.js';
import { createUsageReporter } from './usage-reporter.js';

type View = { dimensions: Record<string, { used: number }> };

describe('usage delivered in process', () => {
  let store: Store;
  let cp: RunningControlPlane;
  let mgmt = '';
  const dispatcher = new Agent();

  beforeAll(async () => {
    store = await openTestPglite();
    cp = await startControlPlane({ store, durableAudit: false, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    mgmt = `http://127.0.0.1:${cp.mgmtPort}`;
    for (const name of ['posted', 'local'])
      await cp.plane.registry.upsert({ name, upstream: `${name}.agents.svc:8080`, kind: 'agent', budget: { tokensPerHour: 10_000, costUsdPerDay: 5 } });
  }, 180_000);
  afterAll(async () => {
    await dispatcher.close();
    await cp?.close();
    await store?.close();
  });

  const view = async (agent: string) => ((await (await fetch(`${mgmt}/v1/budgets/${agent}`)).json()) as View).dimensions;
  const tokensCounted = async (agent: string) => {
    const text = await (await fetch(`${mgmt}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith(`${metric('token_usage_total')}{`) && l.includes(`agent="${agent}"`));
    return line ? Number(line.split(' ').pop()) : 0;
  };

  it('lands what the same reports posted over HTTP land: budget meters and token counter', async () => {
    const reports = (agent: string): UsageReport[] => [
      { agent, model: 'gpt', tokens: 120, costUsd: 0.25 },
      { agent, model: 'gpt', tokens: 30, costUsd: 0.05 },
      { agent, model: 'mini', tokens: 7, costUsd: 0 },
    ];
    const posted = createUsageReporter({ url: `${mgmt}/v1/usage`, dispatcher, lingerMs: 50 });
    const local = createUsageReporter({ deliver: deliverUsageLocally(cp.plane.recordUsage), lingerMs: 50 });
    for (const r of reports('posted')) posted.report(r);
    for (const r of reports('local')) local.report(r);
    expect(await posted.flush()).toBe(true);
    expect(await local.flush()).toBe(true);
    expect(local.stats()).toMatchObject({ sent: 2, failed: 0, dropped: 0 }); // the two gpt reports were summed
    expect(await view('local')).toEqual(await view('posted'));
    expect((await view('local')).tokensPerHour!.used).toBe(157);
    expect(await tokensCounted('local')).toBe(157);
    expect(await tokensCounted('posted')).toBe(157);
    await Promise.all([posted.close(), local.close()]);
  });

  it('a report the schema refuses is lost alone; the rest of its batch lands', async () => {
    const before = (await view('local')).tokensPerHour!.used;
    const u = createUsageReporter({ deliver: deliverUsageLocally(cp.plane.recordUsage), lingerMs: 50 });
    u.report({ agent: 'local', model: 'gpt', tokens: 5, costUsd: 0 });
    u.report({ agent: 'local', model: 'bad', tokens: 1.5, costUsd: 0 });
    expect(await u.flush()).toBe(true);
    expect(u.stats()).toMatchObject({ sent: 1, failed: 1 });
    expect((await view('local')).tokensPerHour!.used).toBe(before + 5);
    await u.close();
  });

  it('a recording that throws (the ledger unavailable) is retried once', async () => {
    let calls = 0;
    const recorded: UsageReport[] = [];
    const flaky = (r: UsageReport) => {
      if (calls++ === 0) throw new Error('ledger unavailable');
      recorded.push(r);
    };
    const u = createUsageReporter({ deliver: deliverUsageLocally(flaky), lingerMs: 0, retryDelayMs: 10 });
    u.report({ agent: 'local', model: 'gpt', tokens: 3, costUsd: 0 });
    expect(await u.flush()).toBe(true);
    expect(recorded).toEqual([{ agent: 'local', model: 'gpt', tokens: 3, costUsd: 0 }]);
    expect(u.stats()).toMatchObject({ sent: 1, failed: 0 });
    await u.close();
  });

  it('a batch whose settlement cannot be written retries only the settlement: the plain report counts once', async () => {
    let failures = 1;
    const recorded: UsageReport[] = [];
    const record = async (r: UsageReport) => {
      if (r.reservation && failures-- > 0) throw new Error('budget store unavailable');
      recorded.push(r);
    };
    const u = createUsageReporter({ deliver: deliverUsageLocally(record), lingerMs: 20, retryDelayMs: 10 });
    u.report({ agent: 'local', model: 'gpt', tokens: 4, costUsd: 0 });
    u.report({ agent: 'local', model: 'gpt', tokens: 6, costUsd: 0, reservation: 'r1' });
    expect(await u.flush()).toBe(true);
    expect(recorded.map((r) => r.tokens)).toEqual([4, 6]);
    expect(u.stats()).toMatchObject({ sent: 2, failed: 0 });
    await u.close();
  });
});
