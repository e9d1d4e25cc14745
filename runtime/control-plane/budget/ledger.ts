/**
 * The shared budget ledger (migration 0016): one row per agent, dimension and time bucket, summed
 * over the dimension's rolling window. `take` is the only write: under a per-(agent, dimension)
 * transaction lock it gives back a replica's unused lease, adds charges that are owed whatever the
 * ceiling (usage reports, calls a replica allowed ahead of the store), then grants up to `want`
 * more only while the window stays within `limit`. PostgreSQL and PGlite run the same SQL.
 */
import { sql } from 'drizzle-orm';
import { BRAND } from '../../lib/brand.js';
import { rowsOf, type Db, type Store } from '../../store/factory.js';
import { BUDGET_LEDGER_DIMENSIONS, type LedgerDimension } from '../../store/schema/budget.js';
import { DAY_MS, HOUR_MS, r9, type BudgetUsage } from './policy.js';

/** Bucket span and window length (in buckets, plus the current one) of each dimension. */
export const LEDGER_WINDOWS: Record<LedgerDimension, { bucketMs: number; buckets: number }> = {
  calls: { bucketMs: HOUR_MS / 60, buckets: 60 },
  tokens: { bucketMs: HOUR_MS / 60, buckets: 60 },
  cost: { bucketMs: DAY_MS / 96, buckets: 96 },
};

export const bucketOf = (dim: LedgerDimension, now: number): number => Math.floor(now / LEDGER_WINDOWS[dim].bucketMs);

export interface TakeRequest {
  agent: string;
  dim: LedgerDimension;
  now: number;
  /** Owed whatever the ceiling (may be negative: a give-back in the current bucket). */
  add: number;
  /** Units given back to the buckets they were charged in (an unused lease, a settled reservation). */
  giveBack?: readonly { bucket: number; n: number }[];
  /** More units wanted ahead of use, granted only within `limit`. */
  want: number;
  /** The ceiling; 0 means none (`want` is then granted in full). */
  limit: number;
  /** All or nothing: grant nothing unless at least this much fits (reservations). */
  atLeast?: number;
}

export interface TakeResult {
  /** The window's total after this take (every replica's charges, leases included). */
  used: number;
  granted: number;
  /** When the oldest charge still in the window leaves it (epoch ms), if any. */
  freesAt?: number;
}

export interface BudgetLedger {
  take(r: TakeRequest): Promise<TakeResult>;
  /** The window's total now (no write). */
  read(agent: string, dim: LedgerDimension, now: number): Promise<number>;
  /** Every agent's window totals now, in one read (no write): the metrics scrape. Agents with nothing in a window are absent. */
  totals(now: number): Promise<Map<string, Partial<Record<LedgerDimension, number>>>>;
}

export function createBudgetLedger(store: Pick<Store, 'db'>): BudgetLedger {
  const db = store.db;
  return {
    async take(r) {
      const { bucketMs, buckets } = LEDGER_WINDOWS[r.dim];
      const b = Math.floor(r.now / bucketMs);
      const first = b - buckets;
      return db.transaction(async (txn) => {
        const tx = txn as unknown as Db;
        await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${`${BRAND}.budget:${r.agent}:${r.dim}`}))`);
        for (const g of r.giveBack ?? []) {
          if (!(g.n > 0) || g.bucket < first) continue; // slid out of the window already
          await tx.execute(sql`update budget_usage set used = greatest(0, used - ${g.n})
            where agent = ${r.agent} and dimension = ${r.dim} and bucket = ${g.bucket}`);
        }
        await tx.execute(sql`delete from budget_usage where agent = ${r.agent} and dimension = ${r.dim} and bucket < ${first}`);
        const [row] = await rowsOf<{ s: number | string | null; o: number | string | null }>(
          tx,
          sql`select sum(used) as s, min(bucket) filter (where used > 0) as o from budget_usage
            where agent = ${r.agent} and dimension = ${r.dim} and bucket >= ${first}`,
        );
        const before = r9(Number(row?.s ?? 0) + r.add);
        let granted = r.limit > 0 ? Math.max(0, Math.min(r.want, r9(r.limit - before))) : r.want;
        if (r.atLeast !== undefined && granted < r.atLeast) granted = 0;
        const charge = r9(r.add + granted);
        if (charge !== 0) {
          await tx.execute(sql`insert into budget_usage (agent, dimension, bucket, used) values (${r.agent}, ${r.dim}, ${b}, ${Math.max(0, charge)})
            on conflict (agent, dimension, bucket) do update set used = greatest(0, budget_usage.used + ${charge})`);
        }
        const oldest = row?.o === null || row?.o === undefined ? undefined : Number(row.o);
        return { used: Math.max(0, r9(before + granted)), granted, freesAt: oldest === undefined ? undefined : (oldest + buckets + 1) * bucketMs };
      });
    },
    async read(agent, dim, now) {
      const { bucketMs, buckets } = LEDGER_WINDOWS[dim];
      const first = Math.floor(now / bucketMs) - buckets;
      const [row] = await rowsOf<{ s: number | string | null }>(
        db,
        sql`select sum(used) as s from budget_usage where agent = ${agent} and dimension = ${dim} and bucket >= ${first}`,
      );
      return r9(Number(row?.s ?? 0));
    },
    async totals(now) {
      const inWindow = BUDGET_LEDGER_DIMENSIONS.map((dim) => {
        const { bucketMs, buckets } = LEDGER_WINDOWS[dim];
        return sql`(dimension = ${dim} and bucket >= ${Math.floor(now / bucketMs) - buckets})`;
      });
      const rows = await rowsOf<{ agent: string; dimension: LedgerDimension; s: number | string | null }>(
        db,
        sql`select agent, dimension, sum(used) as s from budget_usage where ${sql.join(inWindow, sql` or `)} group by agent, dimension`,
      );
      const out = new Map<string, Partial<Record<LedgerDimension, number>>>();
      for (const r of rows) {
        const t = out.get(r.agent) ?? {};
        t[r.dimension] = r9(Number(r.s ?? 0));
        out.set(r.agent, t);
      }
      return out;
    },
  };
}

/** How long one ledger read of the whole fleet's usage serves the budget gauges. */
export const FLEET_READ_MS = 5000;

/**
 * Every agent's usage from the ledger's window totals (the budget gauges), read at most once per
 * FLEET_READ_MS however often /metrics is scraped (the portal polls it); a failed read is
 * reported to `onError`, rejects, and is not kept.
 */
export function fleetReader(ledger: BudgetLedger, clock: () => number, onError: (e: unknown) => void): () => Promise<ReadonlyMap<string, BudgetUsage>> {
  let last: { at: number; read: Promise<ReadonlyMap<string, BudgetUsage>> } | undefined;
  return () => {
    const now = clock();
    if (last && now - last.at < FLEET_READ_MS) return last.read;
    const read = ledger.totals(now).then(
      (totals) =>
        new Map([...totals].map(([agent, t]) => [agent, { callsLastHour: t.calls ?? 0, tokensLastHour: t.tokens ?? 0, costUsdLastDay: t.cost ?? 0 }])),
      (e: unknown) => {
        onError(e);
        if (last?.read === read) last = undefined;
        throw e;
      },
    );
    last = { at: now, read };
    return read;
  };
}
