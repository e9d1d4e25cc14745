/**
 * Tokens and dollars taken ahead for the broker's reservations (reservations.ts): a take that
 * this replica's lease cannot serve asks the ledger for its shortfall plus a lease, a lease at
 * half or less is topped up in the background, and what a settlement gives back returns to the
 * lease (or to the bucket it was charged in).
 */
import type { LedgerDimension } from '../../store/schema/budget.js';
import { giveBackLater, serial } from './lease.js';
import { takeNow } from './ledger-take.js';
import { bucketOf, type TakeResult } from './ledger.js';
import type { MeterState } from './meter-state.js';
import { enforcing, r9 } from './policy.js';

export interface TokenLease {
  /** Takes `need` units of `dim` ahead, or as many as fit down to `min` (default all or nothing); the ledger's answer tells the window total and when it frees up. */
  take(agent: string, dim: LedgerDimension, need: number, min?: number): Promise<{ ok: boolean; granted: number; result?: TakeResult }>;
  /** Gives back units taken with `take` (at most the same bucket: else written as a negative charge). */
  giveBack(agent: string, dim: LedgerDimension, n: number, bucket: number): void;
}

export function tokenLease(s: MeterState): TokenLease {
  return {
    async take(agent, dim, need, min = need) {
      const st = s.stateOf(agent);
      st.touched = s.clock();
      const d = st[dim];
      const held = () => (d.leaseBucket === bucketOf(dim, s.clock()) ? d.lease : 0);
      const grab = (n: number) => {
        d.lease = r9(d.lease - n);
        return { ok: true, granted: n };
      };
      const budget = s.budgetOf(agent);
      const lease = enforcing(budget) ? s.leaseOf(budget, dim) : 0;
      if (held() >= need) {
        const g = grab(need);
        // At half a lease or less: refill in the background, so the next reservation finds one.
        if (held() * 2 <= lease) serial(d, () => (held() * 2 <= lease ? takeNow(s, agent, dim, { upTo: lease }) : Promise.resolve(undefined))).catch(s.logErr);
        return g;
      }
      return serial(d, async () => {
        if (held() >= need) return grab(need);
        // This call and a lease for the ones after it (the ledger grants what fits, at least `min` held).
        for (let first = true; ; first = false) {
          const result = await takeNow(s, agent, dim, { upTo: r9(need + lease), atLeast: min });
          const have = held();
          if (have >= min && have > 0) return { ...grab(Math.min(have, need)), result };
          // The minute turned as the ledger answered: what it granted is of the last one. Once more, in this one.
          if (first && d.lease >= min && d.lease > 0) continue;
          // Refused: the window's use as the agent sees it (this replica's unused lease is not use).
          return { ok: false, granted: 0, result: { ...result, used: Math.max(0, r9(result.used - have)) } };
        }
      });
    },
    giveBack(agent, dim, n, bucket) {
      if (!(n > 0)) return;
      const d = s.stateOf(agent)[dim];
      if (d.leaseBucket === bucket && bucket === bucketOf(dim, s.clock())) d.lease = r9(d.lease + n);
      else giveBackLater(d, bucket, n);
    },
  };
}
