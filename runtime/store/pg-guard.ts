/**
 * What the PostgreSQL engine of the store adds around postgres.js so an outage is an error, never
 * a crash, a hang or a late effect (issue 15 items 10 and 11):
 *
 * - Deadlines. Every query has one (`queryMs`, client side, over the server's `statement_timeout`
 *   of the same length): past it the caller gets StoreTimeoutError and the query is cancelled, so a
 *   query still queued for a connection is dropped and never runs after the database is back. Every
 *   transaction has one too (`txMs`): past it the caller gets StoreTimeoutError, further statements
 *   of that transaction throw, and its body can no longer resolve, so COMMIT is never sent after the
 *   caller was told it failed (the transaction rolls back, or dies with its connection).
 * - The dead-connection crash. postgres.js (3.4.x) answers a transaction body that failed because
 *   its connection closed with a ROLLBACK on that same closed connection; the write lands in a
 *   setImmediate with a null socket and throws an uncaught TypeError (`nextWrite`) that kills the
 *   process. A body that failed for a lost connection is therefore left unsettled: postgres.js never
 *   sends that ROLLBACK (the server rolls back on its own when the connection goes), and `begin`
 *   still rejects, through its own connection-close handler. Once `begin` has rejected, a body
 *   still running (between statements when the connection went) gets a CONNECTION_CLOSED error for
 *   every further statement, and neither COMMIT nor ROLLBACK is sent for it: postgres.js would write
 *   them to the dead socket, or to the pool's next socket for that connection, outside any transaction.
 * - LISTEN that survives restarts (`createListener`): one dedicated connection; when it closes,
 *   LISTEN is re-issued for every channel every `retryMs` until it succeeds, then every
 *   subscriber's `onReconnect` runs once (notifications sent meanwhile are lost: resync then).
 */
import postgres from 'postgres';
import { StoreTimeoutError } from '../lib/errors.js';
import { errMsg, logger } from '../lib/log.js';

type Sql = postgres.Sql;
type PendingQuery = postgres.PendingQuery<postgres.Row[]>;

const log = logger('store');

const LOST = new Set(['CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'CONNECTION_ENDED', 'ECONNRESET', 'EPIPE', '57P01', '57P02', '57P03']);

/** Did `e` (or what it wraps) come from the connection going away? */
export function lostConnection(e: unknown): boolean {
  for (let x: unknown = e, i = 0; x && i < 4; x = (x as { cause?: unknown }).cause, i++) {
    const code = (x as { code?: unknown }).code;
    if (typeof code === 'string' && LOST.has(code)) return true;
  }
  return false;
}

/**
 * The calls whose callers still wait for an answer. Closing the store lets them finish first (each
 * within its deadline), then ends the pool at once: postgres.js's `end` otherwise waits out its
 * whole timeout for a connection that lost its server (a query it failed, or a transaction body
 * left unsettled on purpose, above, keeps that connection from ever draining).
 */
export class InFlight {
  #count = 0;
  #waiters: (() => void)[] = [];

  track<T>(p: Promise<T>): Promise<T> {
    this.#count++;
    const done = () => {
      if (--this.#count === 0) for (const w of this.#waiters.splice(0)) w();
    };
    p.then(done, done);
    return p;
  }

  /** Resolves once no call is in flight, or after `ms` (a migration may run for minutes). */
  settled(ms: number): Promise<void> {
    if (this.#count === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.#waiters.push(() => (clearTimeout(timer), resolve()));
    });
  }
}

/** The query, awaited no longer than `ms`: past it the query is cancelled (dropped if still queued). */
function withDeadline(q: PendingQuery, ms: number, inFlight: InFlight): PendingQuery {
  const then = q.then;
  let raced: Promise<unknown> | undefined;
  // drizzle awaits the query (after `.values()`, which returns the query itself): race on first use.
  q.then = function (this: PendingQuery, onOk?: unknown, onErr?: unknown) {
    raced ??= inFlight.track(
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          reject(new StoreTimeoutError(`store query exceeded its ${ms} ms deadline`));
          void Promise.resolve(q.cancel()).catch(() => {});
        }, ms);
        then.call(
          q,
          (v: unknown) => (clearTimeout(timer), resolve(v)),
          (e: unknown) => (clearTimeout(timer), reject(e)),
        );
      }),
    );
    return raced.then(onOk as never, onErr as never);
  } as typeof q.then;
  return q;
}

export interface Deadlines {
  queryMs: number;
  txMs: number;
}

/** The error a statement of a transaction whose connection has closed gets (never sent to postgres.js). */
function connectionClosed(): Error {
  return Object.assign(new Error('store connection closed during the transaction'), { code: 'CONNECTION_CLOSED' });
}

/**
 * A transaction-scoped client whose statements throw once its transaction is past its deadline,
 * or once its connection has closed: postgres.js would write them to the dead socket (the crash).
 */
function expiring(tx: postgres.TransactionSql, expired: () => boolean, dead: () => boolean, ms: number): postgres.TransactionSql {
  return new Proxy(tx, {
    get(t, p, r) {
      if (p !== 'unsafe') return Reflect.get(t, p, r);
      return (...a: Parameters<Sql['unsafe']>) => {
        if (dead()) throw connectionClosed();
        if (expired()) throw new StoreTimeoutError(`store transaction exceeded its ${ms} ms deadline`);
        return t.unsafe(...a);
      };
    },
  });
}

function guardedBegin(sql: Sql, d: Deadlines, inFlight: InFlight) {
  return <T>(fn: (tx: postgres.TransactionSql) => T | Promise<T>): Promise<T> => {
    let expired = false;
    let bodyDone = false;
    // `begin` rejected (its connection closed, or BEGIN failed): nothing more may be written for it.
    let dead = false;
    let timer: NodeJS.Timeout | undefined;
    const timeout = () => new StoreTimeoutError(`store transaction exceeded its ${d.txMs} ms deadline`);
    const work = sql.begin(
      (tx) =>
        new Promise<T>((resolve, reject) => {
          if (expired) return reject(timeout());
          Promise.resolve()
            .then(() =>
              fn(
                expiring(
                  tx,
                  () => expired,
                  () => dead,
                  d.txMs,
                ),
              ),
            )
            .then(
              (v) => {
                // The connection is gone: no COMMIT (the server rolled back); `begin` has rejected.
                if (dead) return;
                // Past the deadline the body may not commit: the caller already has its error.
                if (expired) return reject(timeout());
                bodyDone = true;
                resolve(v);
              },
              (e: unknown) => {
                // Lost connection: stay unsettled so postgres.js sends no ROLLBACK on the dead socket
                // (see the file comment); `begin` rejects through its connection-close handler.
                // The same once it is known closed: a ROLLBACK would be written to the dead socket.
                if (!lostConnection(e) && !dead) reject(e);
              },
            );
        }),
    ) as Promise<T>;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        // Once the body has resolved, COMMIT is on its way: its answer decides, within statement_timeout.
        if (bodyDone) return;
        expired = true;
        reject(timeout());
      }, d.txMs);
    });
    work.catch(() => {
      dead = true;
    });
    return inFlight.track(Promise.race([work, deadline]).finally(() => clearTimeout(timer)));
  };
}

/** The client drizzle is given: the pool with deadlines on queries and transactions. */
export function guardedClient(sql: Sql, d: Deadlines, inFlight: InFlight): Sql {
  const begin = guardedBegin(sql, d, inFlight);
  return new Proxy(sql, {
    get(t, p, r) {
      if (p === 'unsafe') return (...a: Parameters<Sql['unsafe']>) => withDeadline(t.unsafe(...a), d.queryMs, inFlight);
      if (p === 'begin') return (fn: (tx: postgres.TransactionSql) => unknown) => begin(fn);
      return Reflect.get(t, p, r);
    },
  });
}

export interface Listener {
  listen(channel: string, onPayload: (payload: string) => void, onReconnect?: () => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

interface Sub {
  onPayload: (payload: string) => void;
  onReconnect?: () => void;
}

const quoteIdent = (s: string) => `"${s.replace(/"/g, '""')}"`;

/** LISTEN on one dedicated connection, re-established (and announced) after it drops. */
export function createListener(url: string, options: postgres.Options<Record<string, postgres.PostgresType>>, retryMs = 250): Listener {
  const channels = new Map<string, Set<Sub>>();
  let closed = false;
  let lost = false;
  let retry: NodeJS.Timeout | undefined;
  const onnotify = (channel: string, payload: string) => {
    for (const s of channels.get(channel) ?? []) s.onPayload(payload);
  };
  const sql = postgres(url, {
    ...options,
    max: 1,
    idle_timeout: 0,
    max_lifetime: null,
    // Not in the typings, but the connection calls it for every NotificationResponse.
    ...({ onnotify } as object),
    onclose: () => {
      if (closed || lost) return;
      lost = true;
      log.warn('LISTEN connection lost; re-subscribing', { channels: channels.size });
      schedule();
    },
  });
  const relisten = async () => {
    retry = undefined;
    if (closed) return;
    try {
      for (const ch of channels.keys()) await sql.unsafe(`listen ${quoteIdent(ch)}`);
    } catch (e) {
      log.debug('re-LISTEN failed; retrying', { err: errMsg(e) });
      return schedule();
    }
    lost = false;
    log.info('LISTEN re-established', { channels: channels.size });
    for (const subs of channels.values()) {
      for (const s of subs) {
        try {
          s.onReconnect?.();
        } catch (e) {
          log.warn('reconnect callback failed', { err: errMsg(e) });
        }
      }
    }
  };
  const schedule = () => {
    if (!closed && !retry) retry = setTimeout(() => void relisten(), retryMs);
  };
  return {
    async listen(channel, onPayload, onReconnect) {
      const sub: Sub = { onPayload, onReconnect };
      let subs = channels.get(channel);
      if (!subs) {
        subs = new Set();
        channels.set(channel, subs);
        try {
          await sql.unsafe(`listen ${quoteIdent(channel)}`);
        } catch (e) {
          channels.delete(channel);
          throw e;
        }
      }
      subs.add(sub);
      return async () => {
        subs.delete(sub);
        if (subs.size || channels.get(channel) !== subs) return;
        channels.delete(channel);
        if (!lost && !closed) await sql.unsafe(`unlisten ${quoteIdent(channel)}`).catch(() => {});
      };
    },
    async close() {
      closed = true;
      if (retry) clearTimeout(retry);
      await sql.end({ timeout: 2 });
    },
  };
}
