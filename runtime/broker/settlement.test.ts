/**
 * Settlements over the real usage reporter (delivering in process, as usage-local.ts does): a
 * completion settles exactly once, after the reply; one that throws after its allow gives its
 * reservation back (or is charged what the provider may have used); at shutdown every completion
 * still open is settled with what it used so far.
 */
import { describe, expect, it } from 'vitest';
import type { UsageReport } from '../control-plane/types.js';
import { parseConfig } from './config.js';
import { createSettlements } from './settlement.js';
import { createUsageReporter } from './usage-reporter.js';
import { estimateUsage } from './usage.js';

const entry = parseConfig({ models: [{ name: 'm', model: 'p', priceInputPer1k: 1, priceOutputPer1k: 2 }] }).models[0]!;

function setup() {
  const got: UsageReport[] = [];
  const usage = createUsageReporter({ lingerMs: 0, deliver: async (batch) => (got.push(...batch), 'ok') });
  return { got, usage, settlements: createSettlements(usage) };
}
const turn = () => new Promise((r) => setImmediate(r));

describe('settlements', () => {
  it('settles once, after the reply: later settlements of the same completion are ignored', async () => {
    const { got, usage, settlements } = setup();
    await settlements.run('bot', entry, 'r-1', async (s) => {
      s.settle(estimateUsage(400, 40));
      s.settle(undefined);
      expect(usage.stats().queued + usage.stats().sent).toBe(0); // not before the next turn
    });
    await turn();
    await usage.flush();
    expect(got).toEqual([{ agent: 'bot', model: 'm', tokens: 110, costUsd: 0.12, reservation: 'r-1' }]);
  });

  it('a throw after the allow gives the reservation back, or charges what the provider may have used, and goes on', async () => {
    const { got, usage, settlements } = setup();
    const bug = new Error('a bug after the decision');
    await expect(
      settlements.run('bot', entry, 'r-before-call', async () => {
        throw bug;
      }),
    ).rejects.toBe(bug);
    await expect(
      settlements.run('bot', entry, 'r-after-call', async (s) => {
        s.fallback = () => estimateUsage(80, 0);
        throw bug;
      }),
    ).rejects.toBe(bug);
    await turn();
    await usage.flush();
    expect(got).toEqual([
      { agent: 'bot', model: 'm', tokens: 0, costUsd: 0, reservation: 'r-before-call' },
      { agent: 'bot', model: 'm', tokens: 20, costUsd: 0.02, reservation: 'r-after-call' },
    ]);
  });

  it('settleAll settles what is still open with its fallback and hands over what waits, before the reporter closes', async () => {
    const { got, usage, settlements } = setup();
    let resolveStream!: () => void;
    const streaming = settlements.run('bot', entry, 'r-stream', (s) => {
      s.fallback = () => estimateUsage(40, 20);
      return new Promise<void>((r) => (resolveStream = r));
    });
    await settlements.run('bot', entry, 'r-done', async (s) => s.settle(estimateUsage(4, 0)));
    // Without a reservation and without usage, nothing to report.
    await settlements.run('bot', entry, undefined, async (s) => s.settle(undefined));
    expect(settlements.settleAll()).toBe(3);
    await usage.close();
    expect(got.map((r) => [r.reservation, r.tokens])).toEqual([
      ['r-stream', 15],
      ['r-done', 1],
    ]);
    resolveStream();
    await streaming;
    await turn();
    expect(got).toHaveLength(2);
  });
});
