/**
 * The identity authority's change feed: committed revocations, agent key bindings, API-key
 * state changes, governed agents' statuses and directory humans' standing, NOTIFYed by the
 * database itself (the triggers of migrations 0014, 0018 and 0028) on
 * `identity_changes_<schema>`, fanned out to the in-memory views (verify-index.ts, the key cache).
 *
 * A view may answer from memory only while the feed is `live()`: subscribed, and (on PostgreSQL,
 * where the LISTEN connection can drop and be re-established by the driver unseen) a ping this
 * replica NOTIFYs itself every `pingMs` came back, and was sent less than `deadMs` ago. Each
 * change carries `n` from identity_change_seq and each ping the sequence's value when it was sent;
 * NOTIFY delivers in commit order, so a ping arriving with a value above every `n` received means
 * a change may have been lost (or is still in flight). Either way, and after the channel was
 * dead, the epoch moves on and every consumer reloads before it is trusted again; consumers also
 * reload every `resyncMs` as a fallback. On PGlite the notification is delivered in-process
 * before the writing query returns: nothing to lose, no ping.
 *
 * `settled()` is a barrier across replicas: the writer NOTIFYs `sync`, every replica that
 * receives it (after every change committed before it: commit order) answers `ack`, and the
 * writer waits for the ack of every replica it heard a ping from within `deadMs`. A replica it
 * did not hear from for that long cannot be trusting its memory either, because a replica's trust
 * is counted from when it *sent* its last returned ping, and the writer received that ping no
 * earlier. So a change is refused everywhere once `settled()` resolves.
 *
 * A replica that answers `sync` says so at the end of its pings (`:ack`). One that does not (a
 * replica of an older release, during a rolling upgrade) is waited for as that release waited:
 * until its pings report every change up to the sequence's value when `settled()` began.
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
  /** Directory humans a statement touched, each with its state now (migration 0028). */
  | { kind: 'humans'; humans: HumanChange[] }
  /** Something changed that the payload could not carry: reload. */
  | { kind: 'resync' };

/** A human reference (employee subject or email): every row it names inactive, tokens issued at or before `notBefore` (s) inactive. */
export interface HumanChange {
  ref: string;
  deactivated: boolean;
  notBefore: number | null;
}

function humansOf(v: unknown[]): HumanChange[] | undefined {
  const out: HumanChange[] = [];
  for (const h of v) {
    if (!Array.isArray(h) || typeof h[0] !== 'string' || typeof h[1] !== 'boolean') return undefined;
    out.push({ ref: h[0], deactivated: h[1], notBefore: typeof h[2] === 'number' ? h[2] : null });
  }
  return out;
}

/** identity_change_seq's current value, 0 before its first use (a scalar subquery). */
const SEQUENCE_VALUE = sql`(select case when is_called then last_value else 0 end from identity_change_seq)`;

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
   * Resolves once every change committed before the call has reached this replica's consumers (a
   * ping sent now came back: NOTIFY delivers in commit order), or after `timeoutMs`. Immediate on
   * PGlite.
   */
  caughtUp(timeoutMs?: number): Promise<void>;
  /**
   * Resolves once every change committed before the call has reached this replica and every
   * other live replica (see above), so none answers from memory without it; after `timeoutMs`
   * (logged) it resolves anyway. Immediate on PGlite.
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
  if (Array.isArray(m.hu)) {
    const humans = humansOf(m.hu);
    return humans ? { kind: 'humans', humans, n } : { kind: 'resync', n };
  }
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
  // One clock for every duration here: monotonic, so a wall-clock step cannot extend a trust.
  const now = () => performance.now();
  const id = randomUUID();
  const me = `ping:${id}:`;
  let pingSeq = 0;
  /** When each of this replica's pings in flight was sent, by number. */
  const sent = new Map<number, number>();
  const waiters = new Map<number, () => void>();
  const consumers: ChangeConsumer[] = [];
  let channel = '';
  let started = false;
  let closed = false;
  let epoch = 0;
  /** Highest identity_change_seq value received (or covered by a reload). */
  let seen = 0;
  let lastPong = now();
  /** Memory is trusted until then: `deadMs` after the last returned ping was sent. */
  let trustedUntil = -Infinity;
  // On PostgreSQL: dead until this replica's first ping comes back.
  let dead = pg;
  let unlisten: () => Promise<void> = async () => {};
  const timers: NodeJS.Timeout[] = [];
  /** Other replicas on the channel, by id: when their last ping arrived here, whether they ack, the change they reported applied. */
  const peers = new Map<string, { at: number; acks: boolean; seen: number }>();
  /** This replica's `settled()` barriers in flight: whether the sync came back, who acked. */
  const barriers = new Map<number, { home: boolean; acks: Set<string>; wake: () => void }>();
  let syncSeq = 0;
  /** When LISTEN last took effect (start, re-subscribe, reconnect): pings sent before then were not heard here. */
  let listeningSince = Infinity;

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

  const send = (payload: string) => store.notify(channel, payload).catch(() => {});
  /** identity_change_seq's value now (every change committed so far has a number up to it); Infinity when unreadable. */
  const sequenceNow = async () =>
    Number((await rowsOf<{ v: number | string }>(store.db, sql`select ${SEQUENCE_VALUE} as v`).catch(() => []))[0]?.v ?? Infinity);

  const onPong = (rest: string) => {
    lastPong = now();
    const [k, , v] = rest.split(':').map(Number) as [number, number, number];
    const at = sent.get(k);
    if (at !== undefined) trustedUntil = Math.max(trustedUntil, at + deadMs);
    for (const w of sent.keys()) if (w <= k) sent.delete(w);
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
  };

  /** `sync:<origin>:<n>` (answered `ack:<origin>:<n>:<id>`), `ack:…`, `bye:<id>`: the settle barrier. */
  const onBarrier = (kind: string, [origin, n, from]: string[]) => {
    if (kind === 'bye') return void peers.delete(origin!);
    if (origin !== id) return void (kind === 'sync' && send(`ack:${origin}:${n}:${id}`));
    const b = barriers.get(Number(n));
    if (!b) return;
    if (kind === 'sync') b.home = true;
    else if (from) b.acks.add(from);
    b.wake();
  };

  const onPayload = (payload: string) => {
    if (payload.startsWith(me)) return onPong(payload.slice(me.length));
    if (payload.startsWith('ping:')) {
      const [peer, , peerSeen, , acks] = payload.slice(5).split(':');
      if (peer) peers.set(peer, { at: now(), acks: acks === 'ack', seen: Number(peerSeen) || 0 });
      return;
    }
    const kind = payload.slice(0, payload.indexOf(':'));
    if (kind === 'sync' || kind === 'ack' || kind === 'bye') return onBarrier(kind, payload.slice(kind.length + 1).split(':'));
    const c = parseChange(payload);
    if (!c) return;
    seen = Math.max(seen, c.n);
    if (c.kind === 'resync') return reloadAll();
    for (const k of consumers) k.apply(c);
  };

  /** NOTIFYs ping `k`: `ping:<id>:<k>:<seen here>:<the sequence's current value (0 before its first use)>:ack`. */
  const ping = (k: number) => {
    sent.set(k, now());
    if (sent.size > 64) sent.delete(sent.keys().next().value!);
    return store.db.execute(sql`select pg_notify(${channel}, ${`${me}${k}:${seen}:`} || ${SEQUENCE_VALUE} || ':ack')`).then(
      () => {},
      () => {},
    );
  };

  /** The driver re-established LISTEN after its connection closed: whatever was sent meanwhile is lost. */
  const onReconnect = () => {
    listeningSince = now();
    gap('LISTEN re-established');
  };

  let relistening = false;
  const relisten = async () => {
    relistening = true;
    try {
      await unlisten().catch(() => {});
      unlisten = await store.listen(channel, onPayload, onReconnect);
      listeningSince = now();
    } catch (e) {
      log.warn('LISTEN failed', { err: errMsg(e) });
    } finally {
      relistening = false;
    }
  };

  const tick = () => {
    const quiet = now() - lastPong;
    if (!dead && quiet > deadMs) {
      dead = true;
      log.warn('change notifications stopped; verification reads the store until they are back', { quietMs: Math.round(quiet) });
    }
    if (dead && quiet > relistenMs && !relistening) {
      lastPong = now() - deadMs; // next attempt after another relistenMs - deadMs
      void relisten();
    }
    for (const [p, { at }] of peers) if (now() - at > 60 * deadMs) peers.delete(p); // gone without a bye
    void ping(++pingSeq);
  };

  const start = async () => {
    if (closed) return;
    try {
      channel = await changeChannel(store);
      unlisten = await store.listen(channel, onPayload, onReconnect);
      listeningSince = now();
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
    lastPong = now();
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
    live: () => started && !closed && !dead && (!pg || now() < trustedUntil),
    epoch: () => epoch,
    subscribe(c) {
      consumers.push(c);
      if (started) void reload(c);
    },
    async caughtUp(timeoutMs = 5000) {
      if (!pg || !started || closed) return;
      const n = ++pingSeq;
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => (waiters.delete(n), resolve()), timeoutMs);
        waiters.set(n, () => (clearTimeout(t), resolve()));
        void ping(n);
      });
    },
    async settled(timeoutMs = 5000) {
      if (!pg || closed) return;
      const end = now() + timeoutMs;
      // Not listening yet: other replicas cannot be counted; wait for LISTEN first.
      while (!started && !closed && now() < end) await new Promise((r) => setTimeout(r, 20));
      if (!started) return void (closed || log.warn('a change was not confirmed by other replicas: not listening', { timeoutMs }));
      const n = ++syncSeq;
      const b = { home: false, acks: new Set<string>(), wake: () => {} };
      barriers.set(n, b);
      // A replica that does not ack (an older release) has what its pings report applied.
      const upTo = [...peers.values()].some((p) => !p.acks) ? await sequenceNow() : 0;
      const has = (p: string, r: { acks: boolean; seen: number }) => (r.acks ? b.acks.has(p) : r.seen >= upTo);
      // Every replica heard from within deadMs has acked: the sync came back here after every ping
      // sent before it, and any ping sent before LISTEN took effect gives its sender no trust by now.
      const done = () => b.home && now() - listeningSince >= deadMs && [...peers].every(([p, r]) => has(p, r) || now() - r.at >= deadMs);
      try {
        void send(`sync:${id}:${n}`);
        while (!closed && !done()) {
          const left = end - now();
          if (left <= 0) {
            const waiting = [...peers].filter(([p, r]) => !has(p, r) && now() - r.at < deadMs);
            return log.warn('a change was not confirmed by every replica in time', { home: b.home, replicas: waiting.length, timeoutMs });
          }
          await new Promise<void>((r) => {
            const t = setTimeout(r, Math.min(20, left));
            b.wake = () => (clearTimeout(t), r());
          });
        }
      } finally {
        barriers.delete(n);
      }
    },
    async close() {
      closed = true;
      for (const t of timers) clearInterval(t);
      for (const done of waiters.values()) done();
      waiters.clear();
      for (const b of barriers.values()) b.wake();
      if (started && pg) await send(`bye:${id}`);
      await unlisten().catch(() => {});
    },
  };
}
