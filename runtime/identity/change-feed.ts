/**
 * The identity authority's change feed: committed revocations, agent key bindings, API-key
 * state changes and governed agents' statuses, NOTIFYed by the database itself (the triggers of
 * migrations 0014 and 0018) on
 * `identity_changes_<schema>`, fanned out to the in-memory views (verify-index.ts, the key cache).
 *
 * A view may answer from memory only while the feed is `live()`: subscribed, and (on PostgreSQL,
 * where the LISTEN connection can drop and be re-established by the driver unseen) a ping this
 * replica NOTIFYs itself every `pingMs` came back within `deadMs`. Each change carries `n` from
 * identity_change_seq and each ping the sequence's value when it was sent; NOTIFY delivers in
 * commit order, so a ping arriving with a value above every `n` received means a change may have
 * been lost (or is still in flight). Either way, and after the channel was dead, the epoch moves
 * on and every consumer reloads before it is trusted again; consumers also reload every
 * `resyncMs` as a fallback. On PGlite the notification is delivered in-process before the
 * writing query returns: nothing to lose, no ping.
 */
import { createHash, randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { errMsg, logger } from '../lib/log.js';
import { rowsOf, type Store } from '../store/factory.js';

const log = logger('identity.changes');

/** One committed change, as the trigger sends it. */
export type Change =
  | { kind: 'revoked'; jti: string; tenant: string }
  | { kind: 'agent'; name: string; tenant: string; did: string | null; oldDid: string | null }
  | { kind: 'key'; id: string }
  /** A governed agent's status (null: its record is gone); migration 0018. */
  | { kind: 'governed'; name: string; status: string | null }
  /** Something changed that the payload could not carry: reload. */
  | { kind: 'resync' };

/** A change and its identity_change_seq value. */
type Numbered = Change & { n: number };

export interface ChangeConsumer {
  apply(c: Change): void;
  /** Full reload from the store; called on subscribe, after a gap and every `resyncMs`. */
  resync(): Promise<void>;
}

export interface ChangeFeed {
  /** True while every committed change is known to reach this replica's consumers. */
  live(): boolean;
  /** Increases after every gap; a consumer is current when it reloaded in the present epoch. */
  epoch(): number;
  subscribe(c: ChangeConsumer): void;
  /**
   * Resolves once every change committed before the call has reached this replica's consumers
   * (a ping sent now came back: NOTIFY delivers in commit order) and every other live replica
   * (pinging within `deadMs`) has reported, in its pings, that it applied them too; or after
   * `timeoutMs` (a replica that has not applied them by then is not live, so reads the store).
   * Immediate on PGlite.
   */
  settled(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export interface FeedOptions {
  /** Self-ping period on PostgreSQL (ms, default 250). */
  pingMs?: number;
  /** No ping back for this long (ms, default 1000): the feed is not live. */
  deadMs?: number;
  /** Periodic reload of every consumer (ms; default 30 s on PostgreSQL, off on PGlite; 0 = off). */
  resyncMs?: number;
  /** Dead this long (ms, default 5000): LISTEN is subscribed again. */
  relistenMs?: number;
}

/** The channel the triggers of migration 0014 notify for this store's schema. */
export async function changeChannel(store: Store): Promise<string> {
  const [row] = await rowsOf<{ s: string }>(store.db, sql`select current_schema() as s`);
  const schema = row?.s ?? 'public';
  const ch = `identity_changes_${schema}`;
  return ch.length <= 63 ? ch : `identity_changes_${createHash('md5').update(schema).digest('hex').slice(0, 24)}`;
}

export function parseChange(payload: string): Numbered | undefined {
  let m: Record<string, unknown>;
  try {
    m = JSON.parse(payload) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (!m || typeof m !== 'object') return undefined;
  const s = (v: unknown) => (typeof v === 'string' ? v : null);
  const n = typeof m.n === 'number' ? m.n : 0;
  if (typeof m.r === 'string') return { kind: 'revoked', jti: m.r, tenant: s(m.t) ?? 'default', n };
  if (typeof m.a === 'string') return { kind: 'agent', name: m.a, tenant: s(m.t) ?? 'default', did: s(m.d), oldDid: s(m.o), n };
  if (typeof m.k === 'string') return { kind: 'key', id: m.k, n };
  if (typeof m.g === 'string') return { kind: 'governed', name: m.g, status: s(m.s), n };
  if (m.resync === true) return { kind: 'resync', n };
  return undefined;
}

/**
 * The feed of `store`, returned at once and started in the background (retried every 2 s until
 * LISTEN succeeds); it is not live, so every view reads the store, until then.
 */
export function createChangeFeed(store: Store, o: FeedOptions = {}): ChangeFeed {
  const pg = store.kind === 'postgres';
  const pingMs = o.pingMs ?? 250;
  const deadMs = o.deadMs ?? 1000;
  const relistenMs = o.relistenMs ?? 5000;
  const resyncMs = o.resyncMs ?? (pg ? 30_000 : 0);
  const me = `ping:${randomUUID()}:`;
  let pingSeq = 0;
  const waiters = new Map<number, () => void>();
  const consumers: ChangeConsumer[] = [];
  let channel = '';
  let started = false;
  let closed = false;
  let epoch = 0;
  /** Highest identity_change_seq value received (or covered by a reload). */
  let seen = 0;
  let lastPong = Date.now();
  // On PostgreSQL: dead until this replica's first ping comes back.
  let dead = pg;
  let unlisten: () => Promise<void> = async () => {};
  const timers: NodeJS.Timeout[] = [];

  const reload = (c: ChangeConsumer) =>
    c.resync().catch((e) => {
      log.warn('view reload failed; it answers from the store until a later reload succeeds', { err: errMsg(e) });
    });
  const reloadAll = () => {
    for (const c of consumers) void reload(c);
  };

  /** Not trusted until every consumer reloaded (a gap: the channel was dead, or a change may be lost). */
  const gap = (why: string) => {
    epoch++;
    log.info('reloading the in-memory identity views', { why });
    reloadAll();
  };

  /** Other replicas on the channel: the highest change number each reported applied, and when. */
  const peers = new Map<string, { seen: number; at: number }>();

  const onPayload = (payload: string) => {
    if (payload.startsWith(me)) {
      lastPong = Date.now();
      const [k, , v] = payload.slice(me.length).split(':').map(Number) as [number, number, number];
      for (const [w, done] of waiters) {
        if (w > k) continue;
        waiters.delete(w);
        done();
      }
      if (dead) {
        dead = false;
        seen = Math.max(seen, v);
        gap('change notifications flowing again');
      } else if (v > seen) {
        seen = v;
        gap('a change notification may have been missed');
      }
      return;
    }
    if (payload.startsWith('ping:')) {
      const [id, , peerSeen] = payload.slice(5).split(':');
      if (id && Number.isFinite(Number(peerSeen))) peers.set(id, { seen: Number(peerSeen), at: Date.now() });
      return;
    }
    const c = parseChange(payload);
    if (!c) return;
    seen = Math.max(seen, c.n);
    if (c.kind === 'resync') return reloadAll();
    for (const k of consumers) k.apply(c);
  };

  /** NOTIFYs ping `k`: `ping:<me>:<k>:<seen here>:<the sequence's current value (0 before its first use)>`. */
  const ping = (k: number) =>
    store.db
      .execute(sql`select pg_notify(${channel}, ${`${me}${k}:${seen}:`} || (select case when is_called then last_value else 0 end from identity_change_seq))`)
      .then(
        () => {},
        () => {},
      );

  let relistening = false;
  const relisten = async () => {
    relistening = true;
    try {
      await unlisten().catch(() => {});
      unlisten = await store.listen(channel, onPayload);
    } catch (e) {
      log.warn('LISTEN failed', { err: errMsg(e) });
    } finally {
      relistening = false;
    }
  };

  const tick = () => {
    const quiet = Date.now() - lastPong;
    if (!dead && quiet > deadMs) {
      dead = true;
      log.warn('change notifications stopped; verification reads the store until they are back', { quietMs: quiet });
    }
    if (dead && quiet > relistenMs && !relistening) {
      lastPong = Date.now() - deadMs; // next attempt after another relistenMs - deadMs
      void relisten();
    }
    void ping(++pingSeq);
  };

  const start = async () => {
    if (closed) return;
    try {
      channel = await changeChannel(store);
      unlisten = await store.listen(channel, onPayload);
    } catch (e) {
      if (closed) return;
      log.warn('change feed could not subscribe; retrying in 2 s (views read the store meanwhile)', { err: errMsg(e) });
      const t = setTimeout(() => void start(), 2000);
      t.unref();
      timers.push(t);
      return;
    }
    if (closed) return void unlisten().catch(() => {});
    started = true;
    lastPong = Date.now();
    if (pg) {
      timers.push(setInterval(tick, pingMs));
      void ping(++pingSeq);
    }
    if (resyncMs > 0) timers.push(setInterval(reloadAll, resyncMs));
    for (const t of timers) t.unref();
    // Subscribed: everything committed from now on arrives, so a reload now is complete.
    reloadAll();
  };
  void start();

  return {
    live: () => started && !closed && !dead,
    epoch: () => epoch,
    subscribe(c) {
      consumers.push(c);
      if (started) void reload(c);
    },
    async settled(timeoutMs = 5000) {
      if (!pg || !started || closed) return;
      const end = Date.now() + timeoutMs;
      const n = ++pingSeq;
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => (waiters.delete(n), resolve()), timeoutMs);
        waiters.set(n, () => (clearTimeout(t), resolve()));
        void ping(n);
      });
      // Everything committed before the call has arrived here: wait for the live peers to report it applied.
      const target = seen;
      const behind = () => [...peers.values()].some((p) => p.at > Date.now() - deadMs && p.seen < target);
      while (behind() && Date.now() < end && !closed) await new Promise((r) => setTimeout(r, 10));
    },
    async close() {
      closed = true;
      for (const t of timers) clearInterval(t);
      for (const done of waiters.values()) done();
      waiters.clear();
      await unlisten().catch(() => {});
    },
  };
}
