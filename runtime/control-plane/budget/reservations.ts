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
import { performance } from 'node:perf_hooks';
import { sql } from 'drizzle-orm';
import { errMsg, logger } from '../../lib/log.js';
import { createShipper } from '../audit/shipper.js';
import { rowsOf, type Store } from '../../store/factory.js';
import { afterMiss, claimStatement, insertRows, lookupStatement, settleStatement, type Figures, type Found, type Row } from './reservation-rows.js';
import { bucketOf } from './ledger.js';
import type { SharedBudgetMeter } from './meter.js';
import { limitOf, neverFits, r9 } from './policy.js';
import type { Reservations, ReserveAnswer, ReserveRequest } from './ports.js';
import type { Budget } from '../types.js';

const log = logger('budget');

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

const price = (prompt: number, out: number, r: ReserveRequest) => r9((prompt * r.priceInputPer1k + out * r.priceOutputPer1k) / 1000);

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

/** A usage report settling its reservation, waiting for its batch. */
interface Settlement extends Figures {
  resolve(first: boolean): void;
  reject(e: unknown): void;
  /** When its update first found no row (performance.now()), while it waits for the row. */
  missedAt?: number;
}

/** How often a settlement waiting for its row looks again (ms). */
const UNSTORED_POLL_MS = 50;

export function createReservations(o: ReservationOptions): Reservations {
  const db = o.store.db;
  /** id -> seq of the rows not yet stored. */
  const unwritten = new Map<string, number>();
  let seq = 0;
  const unstoredWaitMs = o.unstoredWaitMs ?? 1000;
  const writer = createShipper<Row>({
    write: async (batch) => {
      const tookOver = (await rowsOf<{ id: string; state: string }>(db, insertRows(batch))).filter((r) => r.state === 'settled');
      if (tookOver.length) giveBackClaimed(batch, new Set(tookOver.map((r) => r.id)));
    },
    // Rows linger to share a write; a settlement waiting on one cuts the linger short.
    lingerMs: 10,
    maxPending: 10_000,
    onStored: (batch) => batch.forEach((r) => unwritten.delete(r.id)),
    log,
    label: 'budget reservation',
  });

  /** Rows whose usage another settlement charged as unreserved before they were written: their worst case goes back. */
  function giveBackClaimed(batch: readonly Row[], ids: ReadonlySet<string>): void {
    for (const r of batch) {
      if (!ids.has(r.id)) continue;
      if (r.tokens > 0) o.meter.giveBack(r.agent, 'tokens', r.tokens, r.hour);
      if (r.cost > 0) o.meter.giveBack(r.agent, 'cost', r.cost, r.day);
    }
    log.info('reservations settled before their rows were stored: usage charged as unreserved, worst case given back', { count: ids.size });
  }

  async function reserve(r: ReserveRequest): Promise<ReserveAnswer> {
    const b = o.budgetOf(r.agent);
    const enforce = !!b && b.mode !== 'audit';
    const tph = enforce ? limitOf(b, 'tokens') : 0;
    const cpd = enforce ? limitOf(b, 'cost') : 0;
    if (tph === 0 && cpd === 0) return { ok: true, id: null, outputTokens: r.outputTokens };
    const now = o.now();
    const minOut = r.partial ? Math.min(1, r.outputTokens) : r.outputTokens;
    let out = r.outputTokens;
    let tokens = 0;
    let cost = 0;
    const refuse = (dimension: 'tokensPerHour' | 'costUsdPerDay', limit: number, need: number, res?: { used: number; freesAt?: number }): ReserveAnswer => {
      const used = res?.used ?? 0;
      const unit = dimension === 'tokensPerHour' ? 'tokens per hour' : 'USD per day';
      const head = `${dimension} budget of agent ${r.agent}: this call needs up to ${need} of ${limit} ${unit}`;
      if (neverFits({ need, limit })) {
        const fewer = dimension === 'tokensPerHour' ? 'tokens (a lower max_tokens, a shorter prompt)' : 'dollars (a lower max_tokens, a cheaper model)';
        return { ok: false, dimension, limit, used, need, message: `${head}, more than the whole budget: it never fits; ask for fewer ${fewer}` };
      }
      const frees = res?.freesAt ? `; frees up from ${new Date(res.freesAt).toISOString()}` : '';
      return {
        ok: false,
        dimension,
        limit,
        used,
        need,
        freesAt: res?.freesAt,
        message: `${head} and ${r9(Math.max(0, used))} are used or reserved${frees}`,
      };
    };
    if (tph > 0) {
      const t = await o.meter.take(r.agent, 'tokens', r.promptTokens + out, r.promptTokens + minOut);
      if (!t.ok) return refuse('tokensPerHour', tph, r.promptTokens + minOut, t.result);
      tokens = t.granted;
      out = tokens - r.promptTokens;
    }
    if (cpd > 0) {
      const need = price(r.promptTokens, out, r);
      const t = await o.meter.take(r.agent, 'cost', need, price(r.promptTokens, minOut, r));
      if (!t.ok) {
        if (tokens > 0) o.meter.giveBack(r.agent, 'tokens', tokens, bucketOf('tokens', now));
        return refuse('costUsdPerDay', cpd, price(r.promptTokens, minOut, r), t.result);
      }
      cost = t.granted;
      if (cost < need && r.priceOutputPer1k > 0) {
        // Fewer dollars than asked: the output allowance shrinks to what they buy.
        const fit = Math.max(minOut, Math.floor((cost * 1000 - r.promptTokens * r.priceInputPer1k) / r.priceOutputPer1k + 1e-9));
        if (tokens > 0 && fit < out) {
          o.meter.giveBack(r.agent, 'tokens', out - fit, bucketOf('tokens', now));
          tokens -= out - fit;
        }
        out = fit;
      }
    }
    const id = randomUUID();
    try {
      writer.push({
        seq: ++seq,
        id,
        agent: r.agent,
        tokens,
        cost,
        hour: bucketOf('tokens', now),
        day: bucketOf('cost', now),
        createdAt: new Date(now).toISOString(),
        expiresAt: new Date(now + (r.ttlMs ?? o.ttlMs)).toISOString(),
      });
    } catch (e) {
      // Too many rows waiting for a store that is down: refused, and the charge given back.
      if (tokens > 0) o.meter.giveBack(r.agent, 'tokens', tokens, bucketOf('tokens', now));
      if (cost > 0) o.meter.giveBack(r.agent, 'cost', cost, bucketOf('cost', now));
      throw new Error(`reservations cannot be recorded: ${errMsg(e)}`, { cause: e });
    }
    unwritten.set(id, seq);
    return { ok: true, id, outputTokens: out };
  }

  /** Settlements asked for and not yet sent; they go out together, one statement per batch. */
  let asked: Settlement[] = [];
  let scheduled = false;
  const schedule = () => {
    if (scheduled || asked.length === 0) return;
    scheduled = true;
    setImmediate(() => void settleBatch());
  };

  function settle(id: string, agent: string, tokens: number, costUsd: number): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      asked.push({ id, agent, tokens, cost: costUsd, resolve, reject });
      schedule();
    });
  }

  /** Asks again: at once (`again`), or after a poll interval while it waits for its row. */
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
      // Rows still on their way to the store are written first (writes are ordered: the last one suffices).
      const seqs = batch.map((s) => unwritten.get(s.id) ?? 0);
      const last = Math.max(0, ...seqs);
      if (last > 0) await writer.whenStored(last);
      const rows = await rowsOf<{ id: string; tokens: number | string; cost_usd: number | string; hour_bucket: number | string; day_bucket: number | string }>(
        db,
        settleStatement(batch),
      );
      const byId = new Map(rows.map((r) => [r.id, r]));
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
      const missed = batch.filter((s) => !byId.has(s.id));
      if (missed.length) await afterMisses(missed);
    } catch (e) {
      for (const s of batch) s.reject(e);
    }
  }

  /**
   * Settlements the update did not apply: a repeat, another agent's id, a row not there yet
   * (afterMiss). The statements run before any settlement is answered or asked again, so a
   * failure rejects each of them once.
   */
  async function afterMisses(missed: Settlement[]): Promise<void> {
    const found = new Map((await rowsOf<Found & { id: string }>(db, lookupStatement(missed.map((s) => s.id)))).map((r) => [r.id, r]));
    const t = performance.now();
    const next = missed.map((s) => afterMiss(found.get(s.id), s.agent, t - (s.missedAt ?? t), unstoredWaitMs));
    const claims = missed.filter((_, i) => next[i] === 'claim');
    const now = o.now();
    const claimed = claims.length
      ? new Set(
          (await rowsOf<{ id: string }>(db, claimStatement(claims, bucketOf('tokens', now), bucketOf('cost', now), new Date(now).toISOString()))).map(
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

  async function expire(): Promise<number> {
    await writer.flush(5000);
    const now = new Date(o.now()).toISOString();
    const rows = await rowsOf<{ id: string; agent: string }>(
      db,
      sql`update budget_reservations set state = 'expired' where state = 'open' and expires_at < ${now} returning id, agent`,
    );
    if (rows.length)
      log.warn('reservations expired unsettled: their worst case stays charged', { count: rows.length, ids: rows.slice(0, 20).map((r) => r.id) });
    // Settled and expired rows are kept two days (a late report still finds its reservation).
    await db.execute(sql`delete from budget_reservations where state <> 'open' and expires_at < ${new Date(o.now() - 2 * 86_400_000).toISOString()}`);
    return rows.length;
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
      await writer.close(5000).catch((e: unknown) => log.error('reservations not stored at close: their worst case stays charged', { err: errMsg(e) }));
    },
  };
}
