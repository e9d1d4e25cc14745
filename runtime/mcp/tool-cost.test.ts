/**
 * A tool's price (issue 42 item 6) through the gateway with real parts: the `everything` entry
 * prices `echo` at 1 USD a call, an agent has 5 USD a day, and 20 concurrent calls over the
 * official SDK client let exactly 5 reach the server: each price is reserved in the shared ledger
 * before the call is forwarded, as the broker's worst case is, and settled once the allow is
 * recorded.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rowsOf } from '../store/factory.js';
import { startMcpHarness, type McpHarness } from './gateway-testing.js';

let h: McpHarness;
beforeAll(async () => {
  h = await startMcpHarness();
  await h.run.cp.plane.registry.upsert({
    name: 'everything',
    upstream: h.everything.upstream,
    kind: 'tool',
    protocol: 'mcp',
    tools: [{ name: 'echo', costUsd: 1 }],
  });
  await h.agent({ name: 'priced', allowTools: ['everything'], budget: { costUsdPerDay: 5 } });
  await h.agent({ name: 'watched', allowTools: ['everything/echo'], budget: { costUsdPerDay: 1, mode: 'audit' } });
}, 120_000);
afterAll(async () => h?.close());

const echoes = () => h.everything.received.filter((m) => m.method === 'tools/call' && m.params?.name === 'echo').length;

describe('MCP gateway: per-tool costUsd against costUsdPerDay', () => {
  it('the registry serves the prices it stores', async () => {
    const entry = (await (await fetch(`${h.mgmt}/v1/registry/services/everything`)).json()) as { tools?: unknown };
    expect(entry.tools).toEqual([{ name: 'echo', costUsd: 1 }]);
  });

  it('20 concurrent priced calls against room for 5 let exactly 5 through; the ledger holds 5 USD', async () => {
    const c = await h.client('priced');
    // An unpriced tool costs nothing: the whole budget is still there after it.
    expect((await c.callTool({ name: 'get-sum', arguments: { a: 1, b: 2 } })).content).toEqual([{ type: 'text', text: 'The sum of 1 and 2 is 3.' }]);
    const results = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => c.callTool({ name: 'echo', arguments: { message: `paid ${i}` } })));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(5);
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(refused).toHaveLength(15);
    for (const r of refused) {
      expect(String((r.reason as Error).message)).toMatch(
        /denied by policy: (costUsdPerDay budget of agent priced: this call needs up to 1 of 5 USD per day and 5 are used or reserved|cost budget exceeded: 5 of 5 USD per day)/,
      );
    }
    expect(echoes()).toBe(5);
    const budget = (await (await fetch(`${h.mgmt}/v1/budgets/priced`)).json()) as { dimensions: { costUsdPerDay: unknown; callsPerHour: unknown } };
    expect(budget.dimensions.costUsdPerDay).toMatchObject({ limit: 5, used: 5, remaining: 0 });
  });

  it('every priced reservation is settled at its price: none is left open to expire', async () => {
    const settled = () =>
      rowsOf<{ state: string; cost_usd: number; settled_cost_usd: number | null }>(
        h.store.db,
        sql`select state, cost_usd, settled_cost_usd from budget_reservations where agent = 'priced'`,
      );
    // The settlement follows the allow's audit record without holding the answer: looked for, not waited on.
    let rows = await settled();
    for (const until = Date.now() + 5000; rows.some((r) => r.state !== 'settled') && Date.now() < until; rows = await settled())
      await new Promise((r) => setTimeout(r, 50));
    expect(rows.map((r) => [r.state, Number(r.cost_usd), Number(r.settled_cost_usd)])).toEqual(Array(5).fill(['settled', 1, 1]));
  });

  it('in audit mode the price is counted, never held: every call passes and the one past the ceiling says so', async () => {
    const c = await h.client('watched');
    for (const m of ['one', 'two', 'three']) await c.callTool({ name: 'echo', arguments: { message: m } });
    const budget = (await (await fetch(`${h.mgmt}/v1/budgets/watched`)).json()) as { dimensions: { costUsdPerDay: unknown } };
    expect(budget.dimensions.costUsdPerDay).toMatchObject({ limit: 1, used: 3 });
    const records = (await (await fetch(`${h.mgmt}/v1/audit?limit=1000`)).json()) as {
      action: string;
      actor?: string;
      allow: boolean;
      reason: string;
      tool?: string;
    }[];
    const calls = records.filter((r) => r.action === 'tool.call' && r.actor === 'watched' && r.tool === 'echo');
    expect(calls.map((r) => r.allow)).toEqual([true, true, true]);
    expect(calls.filter((r) => r.reason.startsWith('over budget (audit mode): cost budget exceeded'))).toHaveLength(2);
  });
});
