/**
 * Each completion's usage report, which settles its budget reservation: exactly once, after the
 * reply (on the next turn of the event loop: the agent never waits for it), and never lost at
 * shutdown: `settleAll` settles every completion still open with what it has used so far (its
 * `fallback`) and hands every report still waiting to the reporter before the reporter closes.
 * A completion whose provider was never called settles to nothing: its reservation is given
 * back (a zero report).
 */
import type { UsageReport } from '../control-plane/types.js';
import type { ModelEntry } from './config.js';
import type { UsageReporter } from './usage-reporter.js';
import { costUsd, type TokenUsage } from './usage.js';

export interface Settlement {
  /**
   * What the completion has used should it end now without figures (a throw, a shutdown):
   * undefined until the provider is called (nothing used), then at least the prompt.
   */
  fallback: () => TokenUsage | undefined;
  /** Settles to `u`, or to nothing when undefined; only the first call counts. */
  settle(u: TokenUsage | undefined): void;
}

export interface Settlements {
  /**
   * Carries out a completion allowed for `agent` on `entry`, holding `reservation` (undefined:
   * nothing reserved): `work` settles it; should `work` throw, it is settled with its fallback
   * (the reservation given back, or what the provider may have used charged) and the throw goes on.
   */
  run(agent: string, entry: ModelEntry, reservation: string | undefined, work: (s: Settlement) => Promise<void>): Promise<void>;
  /** Gives a reservation back at once (a zero report): one the broker holds no completion for. */
  release(agent: string, model: string, reservation: string): void;
  /** Settles every open completion with its fallback and hands over every report still waiting, now; how many. */
  settleAll(): number;
}

interface Open extends Settlement {
  settled: boolean;
  /** Hands the report over, once (from the next turn of the loop, or from settleAll). */
  deliver(): void;
}

export function createSettlements(usage: UsageReporter): Settlements {
  const waiting = new Set<Open>();
  const release = (agent: string, model: string, reservation: string) => usage.report({ agent, model, tokens: 0, costUsd: 0, reservation });
  const open = (agent: string, entry: ModelEntry, reservation: string | undefined): Open => {
    let report: UsageReport | undefined;
    const s: Open = {
      fallback: () => undefined,
      settled: false,
      settle(u) {
        if (s.settled) return;
        s.settled = true;
        if (u) report = { agent, model: entry.name, tokens: u.totalTokens, costUsd: costUsd(u, entry), reservation };
        else if (reservation) report = { agent, model: entry.name, tokens: 0, costUsd: 0, reservation };
        setImmediate(s.deliver);
      },
      deliver() {
        if (waiting.delete(s) && report) usage.report(report);
      },
    };
    waiting.add(s);
    return s;
  };
  return {
    async run(agent, entry, reservation, work) {
      const s = open(agent, entry, reservation);
      try {
        await work(s);
      } catch (e) {
        s.settle(s.fallback());
        throw e;
      }
    },
    release,
    settleAll() {
      const n = waiting.size;
      for (const s of [...waiting]) {
        if (!s.settled) s.settle(s.fallback());
        s.deliver();
      }
      return n;
    },
  };
}
