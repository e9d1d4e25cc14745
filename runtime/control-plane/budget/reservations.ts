/**
 * Reserve, then settle (issue 14): the broker reserves a model call's worst case (prompt bound
 * plus the output allowance, priced from its model table) against the agent's `tokensPerHour`
 * and `costUsdPerDay` before it calls the provider; the usage report settles the reservation to
 * the real figures. The worst case is charged to the shared ledger at once (so a reservation that
 * fits can never be overspent by another replica), and the reservation row (migration 0017) makes
 * settlement exactly-once from any replica: `open -> settled`, or `open -> expired` past its
 * deadline (its worst case stays charged: never forgiven) and `expired -> settled` when a late
 * report still comes (the give-back or the excess applied once).
 *
 * Streams may ask for a partial reservation: at least the prompt and one output token, and as
 * much output as the budget still holds; the broker cuts the stream at that allowance.
 *
 * The charge is what holds the ceiling, and it is taken before the answer; the reservation row
 * is written behind it, batched (group commit through the audit shipper's queue: ordered,
 * retried, bounded), so a reservation costs the broker no store round trip. A settlement of a
 * row this replica has not yet written waits for it. One naming an id no row holds yet (another
 * replica reserved it and has not written it) looks again for up to `unstoredWaitMs` (1 s), then
 * claims the id: its usage is charged as unreserved, and the reservation's row, if it lands
 * later, takes the claim over and gives its whole worst case back (reservation-rows.ts),
 * so the call is charged once however late the row comes. A crash before the row is written
 * loses only the row: its worst case stays charged (never forgiven), and a report for it is
 * charged as unreserved.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { errMsg, logger } from '../../lib/log.js';
import { rowsOf, type Store } from '../../store/factory.js';
import type { Budget } from '../types.js';
import { bucketOf } from './ledger.js';
import type { SharedBudgetMeter } from './meter.js';
import { enforcing, limitOf } from './policy.js';
import type { Reservations, ReserveAnswer, ReserveRequest } from './ports.js';
import { createRowWriter, type RowWriter } from './reservation-writer.js';
import { createSettler } from './settlements.js';
import { chargeWorstCase, type Charged } from './worst-case.js';

export { UnknownReservation } from './settlements.js';

const log = logger('budget');

export interface ReservationOptions {
  store: Pick<Store, 'db'>;
  meter: SharedBudgetMeter;
  budgetOf: (agent: string) => Budget | undefined;
  now: () => number;
  /** Default settlement deadline (ms). */
  ttlMs: number;
  /** How often expired reservations are reconciled (default 30 s; 0: only on `expire()`). */
  sweepMs?: number;
  /**
   * How long a settlement naming an id no row holds yet looks for the row before it claims the
   * id (default 1000 ms: a healthy writer stores a row within its 10 ms linger and one insert;
   * kept under the broker's 2 s usage post timeout). Past it the outcome is still exactly once.
   */
  unstoredWaitMs?: number;
}

export function createReservations(o: ReservationOptions): Reservations {
  const db = o.store.db;
  const rows = createRowWriter(db, o.meter);
  const settle = createSettler({ db, meter: o.meter, rows, now: o.now, unstoredWaitMs: o.unstoredWaitMs ?? 1000 });

  async function reserve(r: ReserveRequest): Promise<ReserveAnswer> {
    const b = o.budgetOf(r.agent);
    const tph = enforcing(b) ? limitOf(b, 'tokens') : 0;
    const cpd = enforcing(b) ? limitOf(b, 'cost') : 0;
    const now = o.now();
    if (tph === 0 && cpd === 0) {
      // Nothing to hold (no ceiling, or audit mode); a fixed price is the call's real cost: recorded as a usage report is.
      if (r.costUsd && r.promptTokens + r.outputTokens === 0) o.meter.recordUsage(r.agent, 0, r.costUsd, now);
      return { ok: true, id: null, outputTokens: r.outputTokens };
    }
    const held = await chargeWorstCase(o.meter, r, { tph, cpd }, bucketOf('tokens', now));
    if ('ok' in held) return held;
    const id = randomUUID();
    record(rows, o.meter, { id, r, held, now, ttlMs: r.ttlMs ?? o.ttlMs });
    return { ok: true, id, outputTokens: held.out };
  }

  async function expire(): Promise<number> {
    await rows.flush(5000);
    const now = new Date(o.now()).toISOString();
    const expired = await rowsOf<{ id: string; agent: string }>(
      db,
      sql`update budget_reservations set state = 'expired' where state = 'open' and expires_at < ${now} returning id, agent`,
    );
    if (expired.length)
      log.warn('reservations expired unsettled: their worst case stays charged', { count: expired.length, ids: expired.slice(0, 20).map((r) => r.id) });
    // Settled and expired rows are kept two days (a late report still finds its reservation).
    await db.execute(sql`delete from budget_reservations where state <> 'open' and expires_at < ${new Date(o.now() - 2 * 86_400_000).toISOString()}`);
    return expired.length;
  }

  const sweepMs = o.sweepMs ?? 30_000;
  const timer =
    sweepMs > 0 ? setInterval(() => void expire().catch((e: unknown) => log.warn('reservation sweep failed', { err: errMsg(e) })), sweepMs) : undefined;
  timer?.unref();
  return {
    reserve,
    settle,
    expire,
    async close() {
      clearInterval(timer);
      await rows.close(5000).catch((e: unknown) => log.error('reservations not stored at close: their worst case stays charged', { err: errMsg(e) }));
    },
  };
}

/** Queues the reservation's row; too many rows waiting for a store that is down: refused, and the charge given back. */
function record(
  rows: RowWriter,
  meter: Pick<SharedBudgetMeter, 'giveBack'>,
  a: { id: string; r: ReserveRequest; held: Charged; now: number; ttlMs: number },
): void {
  const { id, r, held, now } = a;
  try {
    rows.push({
      id,
      agent: r.agent,
      tokens: held.tokens,
      cost: held.cost,
      hour: bucketOf('tokens', now),
      day: bucketOf('cost', now),
      createdAt: new Date(now).toISOString(),
      expiresAt: new Date(now + a.ttlMs).toISOString(),
    });
  } catch (e) {
    if (held.tokens > 0) meter.giveBack(r.agent, 'tokens', held.tokens, bucketOf('tokens', now));
    if (held.cost > 0) meter.giveBack(r.agent, 'cost', held.cost, bucketOf('cost', now));
    throw new Error(`reservations cannot be recorded: ${errMsg(e)}`, { cause: e });
  }
}
