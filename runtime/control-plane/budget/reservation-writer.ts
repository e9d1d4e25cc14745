/**
 * Reservation rows written behind their charge (group commit through the audit shipper's queue:
 * ordered, retried, bounded): a row lingers 10 ms to share a write, a settlement waiting on one
 * cuts the linger short. A row that lands on a claim (its usage was already charged as
 * unreserved, reservation-rows.ts) gives its whole worst case back.
 */
import { logger } from '../../lib/log.js';
import { rowsOf, type Db } from '../../store/factory.js';
import { createShipper } from '../audit/shipper.js';
import type { SharedBudgetMeter } from './meter.js';
import { insertRows, type Row } from './reservation-rows.js';

const log = logger('budget');

export interface RowWriter {
  /** Queues a row (its `seq` is given here); throws when too many rows wait for a store that is down. */
  push(row: Omit<Row, 'seq'>): void;
  /** Resolves once the rows of these ids queued so far are stored (at once when none is waiting). */
  stored(ids: readonly string[]): Promise<void>;
  flush(timeoutMs: number): Promise<void>;
  close(timeoutMs: number): Promise<void>;
}

export function createRowWriter(db: Db, meter: Pick<SharedBudgetMeter, 'giveBack'>): RowWriter {
  /** id -> seq of the rows not yet stored. */
  const unwritten = new Map<string, number>();
  let seq = 0;
  const shipper = createShipper<Row>({
    write: async (batch) => {
      const tookOver = (await rowsOf<{ id: string; state: string }>(db, insertRows(batch))).filter((r) => r.state === 'settled');
      if (tookOver.length) giveBackClaimed(meter, batch, new Set(tookOver.map((r) => r.id)));
    },
    lingerMs: 10,
    maxPending: 10_000,
    onStored: (batch) => batch.forEach((r) => unwritten.delete(r.id)),
    log,
    label: 'budget reservation',
  });
  return {
    push(row) {
      const s = ++seq;
      shipper.push({ seq: s, ...row });
      unwritten.set(row.id, s);
    },
    async stored(ids) {
      // Writes are ordered: waiting for the last one suffices.
      const last = Math.max(0, ...ids.map((id) => unwritten.get(id) ?? 0));
      if (last > 0) await shipper.whenStored(last);
    },
    flush: (timeoutMs) => shipper.flush(timeoutMs),
    close: (timeoutMs) => shipper.close(timeoutMs),
  };
}

/** Rows whose usage another settlement charged as unreserved before they were written: their worst case goes back. */
function giveBackClaimed(meter: Pick<SharedBudgetMeter, 'giveBack'>, batch: readonly Row[], ids: ReadonlySet<string>): void {
  for (const r of batch) {
    if (!ids.has(r.id)) continue;
    if (r.tokens > 0) meter.giveBack(r.agent, 'tokens', r.tokens, r.hour);
    if (r.cost > 0) meter.giveBack(r.agent, 'cost', r.cost, r.day);
  }
  log.info('reservations settled before their rows were stored: usage charged as unreserved, worst case given back', { count: ids.size });
}
