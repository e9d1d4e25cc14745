/**
 * The statements on `budget_reservations` (migrations 0017, 0020) and the pure rule a settlement
 * that found no open row follows. Every outcome is decided by one statement, so any number of
 * replicas settling, claiming and writing the same id apply it once:
 * - the row's write (`insertRows`) inserts it `open`, or takes over a claim of the same agent
 *   (`unreserved` -> `settled`: the usage was charged as unreserved, the writer gives the whole
 *   worst case back);
 * - a settlement (`settleStatement`) moves `open` or `expired` to `settled`;
 * - a settlement that waited for a row in vain claims the id (`claimStatement`): inserted, its
 *   usage is charged as unreserved; a conflict means the row landed meanwhile (settle it).
 */
import { sql, type SQL } from 'drizzle-orm';

/** A reservation row on its way to `budget_reservations` (seq orders the write queue). */
export interface Row {
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

/** A usage report's figures for its reservation. */
export interface Figures {
  id: string;
  agent: string;
  tokens: number;
  cost: number;
}

const recordset = (batch: readonly Figures[]) =>
  sql`jsonb_to_recordset(${JSON.stringify(batch.map(({ id, agent, tokens, cost }) => ({ id, agent, tokens, cost })))}::jsonb)
    as x(id text, agent text, tokens double precision, cost double precision)`;

/**
 * One statement per batch; a retried batch finds its rows there (ids are unique). Returns the
 * rows that took over a claim (`state = 'settled'`): their worst case is the writer's to give back.
 */
export function insertRows(batch: readonly Row[]): SQL {
  return sql`insert into budget_reservations (id, agent, tokens, cost_usd, hour_bucket, day_bucket, state, created_at, expires_at)
    select id, agent, tokens, cost, hour, day, 'open', "createdAt"::timestamptz, "expiresAt"::timestamptz
    from jsonb_to_recordset(${JSON.stringify(batch)}::jsonb) as x(id text, agent text, tokens double precision, cost double precision,
      hour bigint, day bigint, "createdAt" text, "expiresAt" text)
    on conflict (id) do update set tokens = excluded.tokens, cost_usd = excluded.cost_usd, hour_bucket = excluded.hour_bucket,
      day_bucket = excluded.day_bucket, created_at = excluded.created_at, expires_at = excluded.expires_at, state = 'settled'
      where budget_reservations.state = 'unreserved' and budget_reservations.agent = excluded.agent
    returning id, state`;
}

/**
 * Settles a batch in one update, each row once (`open` or `expired` only). The ids are also a
 * list, so the rows are found through the primary key whatever the planner believes of the
 * table's size: without statistics (PGlite gathered none before pglite-maintenance.ts, and they
 * lag a growing table) it hashed a scan of every row kept (two days of them) against the batch:
 * 1.5-4.2 ms a batch of 14 at 5k-20k rows (two runs), against 0.65-0.99 ms this way.
 */
export function settleStatement(batch: readonly Figures[]): SQL {
  return sql`update budget_reservations r set state = 'settled', settled_tokens = x.tokens, settled_cost_usd = x.cost
    from ${recordset(batch)}
    where r.id in ${batch.map((s) => s.id)} and r.id = x.id and r.agent = x.agent and r.state in ('open', 'expired')
    returning r.id, r.tokens, r.cost_usd, r.hour_bucket, r.day_bucket`;
}

/** What the store holds of these ids, whatever their state. */
export function lookupStatement(ids: readonly string[]): SQL {
  return sql`select id, agent, state from budget_reservations where id in ${ids}`;
}

/**
 * Claims ids no row holds yet (their usage charged as unreserved); returns the ids claimed. A
 * claim is kept as long as a settled row (two days past `now`, expire()'s sweep).
 */
export function claimStatement(batch: readonly Figures[], hour: number, day: number, now: string): SQL {
  return sql`insert into budget_reservations (id, agent, tokens, cost_usd, hour_bucket, day_bucket, state, created_at, expires_at, settled_tokens, settled_cost_usd)
    select x.id, x.agent, 0, 0, ${hour}, ${day}, 'unreserved', ${now}::timestamptz, ${now}::timestamptz, x.tokens, x.cost
    from ${recordset(batch)}
    on conflict (id) do nothing
    returning id`;
}

/** The store's row of an id a settlement did not settle. */
export interface Found {
  agent: string;
  state: string;
}

/**
 * What becomes of a settlement its update did not apply (pure):
 * - `foreign`: the id is another agent's (unknown to this agent);
 * - `repeat`: settled or claimed before (nothing to do);
 * - `again`: the row landed, or expired, between the update and the look-up: settle it now;
 * - `wait`: no row yet, and the wait for it is not over: try again shortly;
 * - `claim`: no row after the whole wait: claim the id.
 */
export function afterMiss(found: Found | undefined, agent: string, waitedMs: number, waitMs: number): 'foreign' | 'repeat' | 'again' | 'wait' | 'claim' {
  if (found) {
    if (found.agent !== agent) return 'foreign';
    return found.state === 'settled' || found.state === 'unreserved' ? 'repeat' : 'again';
  }
  return waitedMs < waitMs ? 'wait' : 'claim';
}
