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
 * row not yet written waits for it. A crash before the row is written loses only the row: its
 * worst case stays charged (never forgiven), and a report for it settles nothing.
 */
import { randomUUID } from 'node:crypto';
import { sql, type SQL } from 'drizzle-orm';
import { errMsg, logger } from '../lib/log.js';
import { UNKNOWN_RETRY_SECONDS } from '../lib/reservation-header.js';
import { createShipper } from './audit/shipper.js';
import { rowsOf, type Store } from '../store/factory.js';
import { limitOf } from './budget-lease.js';
import { bucketOf } from './budget-store.js';
import type { SharedBudgetMeter } from './budget-shared.js';
import type { Budget } from './types.js';

const log = logger('budget');

export interface ReserveRequest {
  agent: string;
  /** Upper bound of the prompt's tokens. */
  promptTokens: number;
  /** Output tokens wanted (max_tokens, or the model's output cap). */
  outputTokens: number;
  priceInputPer1k: number;
  priceOutputPer1k: number;
  /** Accept fewer output tokens than asked (a stream the broker can cut). */
  partial?: boolean;
  /** Deadline of the settlement (default the store's reservation TTL). */
  ttlMs?: number;
}

export type ReserveAnswer =
  | { ok: true; id: string | null; outputTokens: number }
  | { ok: false; dimension: 'tokensPerHour' | 'costUsdPerDay'; limit: number; used: number; need: number; freesAt?: number; message: string };

export interface Reservations {
  reserve(r: ReserveRequest): Promise<ReserveAnswer>;
  /** Settles to the real figures; false when unknown or already settled (nothing applied). */
  /**
   * Settles reservation `id` of `agent` to the real figures: true the first time, false for a
   * repeat (already settled); rejects with UnknownReservation when `agent` never held `id`.
   */
  settle(id: string, agent: string, tokens: number, costUsd: number): Promise<boolean>;
  /** Marks reservations past their deadline expired (their worst case stays charged); how many. */
  expire(): Promise<number>;
  /** Writes the reservations not yet stored (bounded), then stops. */
  close(): Promise<void>;
}

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

/** Seconds until a refused reservation may fit (`freesAt`), at least 1; a minute when unknown. */
export const retryAfterSeconds = (freesAt: number | undefined, now: number): number =>
  freesAt ? Math.max(1, Math.ceil((freesAt - now) / 1000)) : UNKNOWN_RETRY_SECONDS;

const r9 = (n: number) => Math.round(n * 1e9) / 1e9;
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
}

/** A reservation row on its way to `budget_reservations` (seq orders the write queue). */
interface Row {
  seq: number;
  id: string;
  agent: string;
  tokens: number;
  cost: number;
  hour: number;
  day: number;
  createdAt: string;
  expiresAt: string;
}

/** A usage report settling its reservation, waiting for its batch. */
interface Settlement {
  id: string;
  agent: string;
  tokens: number;
  cost: number;
  resolve(first: boolean): void;
  reject(e: unknown): void;
}

/** One statement per batch; a retried batch finds its rows there (ids are unique). */
function insertRows(db: Pick<Store, 'db'>['db'], batch: Row[]) {
  return db.execute(sql`insert into budget_reservations (id, agent, tokens, cost_usd, hour_bucket, day_bucket, state, created_at, expires_at)
    select id, agent, tokens, cost, hour, day, 'open', "createdAt"::timestamptz, "expiresAt"::timestamptz
    from jsonb_to_recordset(${JSON.stringify(batch)}::jsonb) as x(id text, agent text, tokens double precision, cost double precision,
      hour bigint, day bigint, "createdAt" text, "expiresAt" text)
    on conflict (id) do nothing`);
}

/**
 * Settles a batch in one update, each row once (`state <> 'settled'`). The ids are also a list,
 * so the rows are found through the primary key whatever the planner believes of the table's
 * size: without statistics (PGlite gathered none before pglite-maintenance.ts, and they lag a
 * growing table) it hashed a scan of every row kept (two days of them) against the batch:
 * 1.5-4.2 ms a batch of 14 at 5k-20k rows (two runs), against 0.65-0.99 ms this way.
 */
export function settleStatement(batch: readonly { id: string; agent: string; tokens: number; cost: number }[]): SQL {
  return sql`update budget_reservations r set state = 'settled', settled_tokens = x.tokens, settled_cost_usd = x.cost
    from jsonb_to_recordset(${JSON.stringify(batch.map(({ id, agent, tokens, cost }) => ({ id, agent, tokens, cost })))}::jsonb)
      as x(id text, agent text, tokens double precision, cost double precision)
    where r.id in ${batch.map((s) => s.id)} and r.id = x.id and r.agent = x.agent and r.state <> 'settled'
    returning r.id, r.tokens, r.cost_usd, r.hour_bucket, r.day_bucket`;
}

export function createReservations(o: ReservationOptions): Reservations {
  const db = o.store.db;
  /** id -> seq of the rows not yet stored. */
  const unwritten = new Map<string, number>();
  let seq = 0;
  const writer = createShipper<Row>({
    write: async (batch) => void (await insertRows(db, batch)),
    // Rows linger to share a write; a settlement waiting on one cuts the linger short.
    lingerMs: 10,
    maxPending: 10_000,
    onStored: (batch) => batch.forEach((r) => unwritten.delete(r.id)),
    log,
    label: 'budget reservation',
  });

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
      const frees = res?.freesAt ? `; frees up from ${new Date(res.freesAt).toISOString()}` : '';
      return {
        ok: false,
        dimension,
        limit,
        used,
        need,
        freesAt: res?.freesAt,
        message: `${dimension} budget of agent ${r.agent}: this call needs up to ${need} of ${limit} ${unit} and ${r9(Math.max(0, used))} are used or reserved${frees}`,
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
      // Not settled now: settled before (a repeated report: nothing to do), or no reservation of this agent at all.
      const missed = batch.filter((s) => !byId.has(s.id)).map((s) => s.id);
      const known = missed.length
        ? new Map(
            (
              await rowsOf<{ id: string; agent: string }>(
                db,
                sql`select id, agent from budget_reservations where id in (${sql.join(
                  missed.map((id) => sql`${id}`),
                  sql`, `,
                )})`,
              )
            ).map((r) => [r.id, r.agent]),
          )
        : undefined;
      for (const s of batch) {
        const row = byId.get(s.id);
        if (!row) {
          if (known?.get(s.id) === s.agent) s.resolve(false);
          else s.reject(new UnknownReservation(s.id, s.agent));
          continue;
        }
        const dt = r9(s.tokens - Number(row.tokens));
        const dc = r9(s.cost - Number(row.cost_usd));
        // Past the worst case (an estimate the provider beat): owed. Under it: given back.
        o.meter.recordUsage(s.agent, Math.max(0, dt), Math.max(0, dc), now);
        if (dt < 0) o.meter.giveBack(s.agent, 'tokens', -dt, Number(row.hour_bucket));
        if (dc < 0) o.meter.giveBack(s.agent, 'cost', -dc, Number(row.day_bucket));
        s.resolve(true);
      }
    } catch (e) {
      for (const s of batch) s.reject(e);
    }
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
