/**
 * The shared meter's background loop: every `syncMs` it takes (ledger-take.ts) for each agent and
 * dimension that needs it (debt owed, a lease aged or low, an active view getting old), so a
 * decision at a steady rate never waits on the database; an agent idle for two days with nothing
 * owed or held is forgotten.
 */
import type { LedgerDimension } from '../../store/schema/budget.js';
import { DIMS, type AgentState } from './lease.js';
import { sync } from './ledger-take.js';
import { bucketOf } from './ledger.js';
import { active, leaseIdle, type MeterState } from './meter-state.js';
import { enforcing, limitOf } from './policy.js';

/** Does this dimension need a take now (debt owed, lease aged or low, active view old)? */
function due(s: MeterState, agent: string, st: AgentState, dim: LedgerDimension, now: number): boolean {
  const d = st[dim];
  if (d.debt !== 0 || d.returns.size > 0) return true;
  if (d.lease > 0 && (d.leaseBucket !== bucketOf(dim, now) || leaseIdle(st, dim, now))) return true;
  const budget = s.budgetOf(agent);
  if (dim === 'calls' && enforcing(budget) && limitOf(budget, 'calls') > 0 && active(st, now) && d.lease * 2 < s.leaseSize(budget)) return true;
  return limitOf(budget, dim) > 0 && active(st, now) && now - d.syncedAt >= 4 * s.syncMs;
}

/** Starts the loop (its timer does not hold the process open); it skips a turn while the last one runs, and stops once `closed()`. */
export function startSyncLoop(s: MeterState, closed: () => boolean): { stop(): void } {
  let ticking = false;
  const tick = async () => {
    if (ticking || closed()) return;
    ticking = true;
    try {
      const now = s.clock();
      const work: Promise<unknown>[] = [];
      for (const [agent, st] of s.agents) {
        for (const dim of DIMS) if (due(s, agent, st, dim, now)) work.push(sync(s, agent, dim).catch(s.logErr));
        // Idle for a window and nothing owed or held: forget the agent.
        if (now - st.touched > 2 * 86_400_000 && DIMS.every((k) => st[k].debt === 0 && st[k].lease === 0)) s.agents.delete(agent);
      }
      await Promise.all(work);
    } finally {
      ticking = false;
    }
  };
  const timer = setInterval(() => void tick(), s.syncMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
