/**
 * Settlements of reservations by the broker's usage reports: asked at any moment, sent together
 * (one statement per batch of up to 500; an id asked twice waits for the next batch, the first
 * settles it), after the rows this replica has not yet written. The difference from the worst
 * case is applied once: past it, owed; under it, given back to the buckets it was charged in. A
 * settlement that finds no open row follows `afterMiss` (reservation-rows.ts): a repeat, another
 * agent's id, or a row not there yet (looked for again every 50 ms, then the id is claimed).
 */
import { performance } from 'node:perf_hooks';
import { rowsOf, type Db } from '../../store/factory.js';
import { bucketOf } from './ledger.js';
import type { SharedBudgetMeter } from './meter.js';
import { r9 } from './policy.js';
import { afterMiss, claimStatement, lookupStatement, settleStatement, type Figures, type Found } from './reservation-rows.js';
import type { RowWriter } from './reservation-writer.js';

/** A settlement naming a reservation this agent never held (unknown id, or another agent's). */
export class UnknownReservation extends Error {
  constructor(
    readonly id: string,
    readonly agent: string,
  ) {
    super(`no reservation ${id} of agent ${agent}`);
    this.name = 'UnknownReservation';
  }
}

/** A usage report settling its reservation, waiting for its batch. */
interface Settlement extends Figures {
  resolve(first: boolean): void;
  reject(e: unknown): void;
  /** When its update first found no row (performance.now()), while it waits for the row. */
  missedAt?: number;
}

/** How often a settlement waiting for its row looks again (ms). */
const UNSTORED_POLL_MS = 50;

export interface SettlerOptions {
  db: Db;
  meter: Pick<SharedBudgetMeter, 'recordUsage' | 'giveBack'>;
  rows: RowWriter;
  now: () => number;
  /** How long a settlement naming an id no row holds yet looks for the row before it claims the id. */
  unstoredWaitMs: number;
}

type SettledRow = { id: string; tokens: number | string; cost_usd: number | string; hour_bucket: number | string; day_bucket: number | string };

/** The settlement queue: `settle` resolves true the first time, false for a repeat; rejects with UnknownReservation. */
export function createSettler(o: SettlerOptions): (id: string, agent: string, tokens: number, costUsd: number) => Promise<boolean> {
  /** Settlements asked for and not yet sent; they go out together, one statement per batch. */
  let asked: Settlement[] = [];
  let scheduled = false;
  const schedule = () => {
    if (scheduled || asked.length === 0) return;
    scheduled = true;
    setImmediate(() => void settleBatch());
  };

  /** Asks again: at once, or after a poll interval (`later`) while it waits for its row. */
  function askAgain(s: Settlement, later: boolean): void {
    if (!later) {
      asked.push(s);
      return schedule();
    }
    setTimeout(() => {
      asked.push(s);
      schedule();
    }, UNSTORED_POLL_MS).unref();
  }

  /** Settles what was asked this turn in one update; an id asked twice waits for the next batch (the first settles it). */
  async function settleBatch(): Promise<void> {
    scheduled = false;
    const ids = new Set<string>();
    const batch: Settlement[] = [];
    const later: Settlement[] = [];
    for (const s of asked.splice(0, 500)) {
      (ids.has(s.id) ? later : batch).push(s);
      ids.add(s.id);
    }
    asked = later.concat(asked);
    schedule();
    try {
      // Rows still on their way to the store are written first.
      await o.rows.stored(batch.map((s) => s.id));
      const rows = await rowsOf<SettledRow>(o.db, settleStatement(batch));
      const byId = new Map(rows.map((r) => [r.id, r]));
      applyDifferences(batch, byId);
      const missed = batch.filter((s) => !byId.has(s.id));
      if (missed.length) await afterMisses(missed);
    } catch (e) {
      for (const s of batch) s.reject(e);
    }
  }

  /** The settled rows: the difference from the worst case applied (past it: owed; under it: given back). */
  function applyDifferences(batch: readonly Settlement[], byId: ReadonlyMap<string, SettledRow>): void {
    const now = o.now();
    for (const s of batch) {
      const row = byId.get(s.id);
      if (!row) continue;
      const dt = r9(s.tokens - Number(row.tokens));
      const dc = r9(s.cost - Number(row.cost_usd));
      // Past the worst case (an estimate the provider beat): owed. Under it: given back.
      o.meter.recordUsage(s.agent, Math.max(0, dt), Math.max(0, dc), now);
      if (dt < 0) o.meter.giveBack(s.agent, 'tokens', -dt, Number(row.hour_bucket));
      if (dc < 0) o.meter.giveBack(s.agent, 'cost', -dc, Number(row.day_bucket));
      s.resolve(true);
    }
  }

  /**
   * Settlements the update did not apply: a repeat, another agent's id, a row not there yet
   * (afterMiss). The statements run before any settlement is answered or asked again, so a
   * failure rejects each of them once.
   */
  async function afterMisses(missed: Settlement[]): Promise<void> {
    const found = new Map((await rowsOf<Found & { id: string }>(o.db, lookupStatement(missed.map((s) => s.id)))).map((r) => [r.id, r]));
    const t = performance.now();
    const next = missed.map((s) => afterMiss(found.get(s.id), s.agent, t - (s.missedAt ?? t), o.unstoredWaitMs));
    const claims = missed.filter((_, i) => next[i] === 'claim');
    const now = o.now();
    const claimed = claims.length
      ? new Set(
          (await rowsOf<{ id: string }>(o.db, claimStatement(claims, bucketOf('tokens', now), bucketOf('cost', now), new Date(now).toISOString()))).map(
            (r) => r.id,
          ),
        )
      : undefined;
    missed.forEach((s, i) => {
      const n = next[i];
      // Claimed: the caller charges it as unreserved. A claim that conflicted: the row landed meanwhile.
      if (n === 'foreign' || (n === 'claim' && claimed?.has(s.id))) s.reject(new UnknownReservation(s.id, s.agent));
      else if (n === 'repeat') s.resolve(false);
      else if (n === 'wait') askAgain(Object.assign(s, { missedAt: s.missedAt ?? t }), true);
      else askAgain(s, false);
    });
  }

  return (id, agent, tokens, costUsd) =>
    new Promise<boolean>((resolve, reject) => {
      asked.push({ id, agent, tokens, cost: costUsd, resolve, reject });
      schedule();
    });
}
