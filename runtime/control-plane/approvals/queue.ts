/**
 * The egress approval queue (SPEC 2.4, 3.2). The forward proxy `create`s a pending request and
 * `hold`s the client connection until a human approves or denies it on the management API, the
 * hold times out (ApprovalTimeout, default 120 s), or the client goes away; the last two expire
 * the request (fail closed).
 *
 * Rows are durable (`egress_requests`), and every status change is one guarded
 * `update ... where status = 'pending'`, so exactly one of approve / deny / expire wins even across
 * replicas. A decision wakes the hold in this process directly and in other replicas through
 * NOTIFY; a slow poll of the held ids covers a lost notification (a listener reconnecting; the
 * holds themselves: waiters.ts).
 * A decision is used once: the connection that takes it sets `used_at` in a guarded update.
 *
 * Restart (issue 15, item 9): a held connection dies with its process, its request does not.
 * Closing releases this process's holds (the client is told the request stays pending); a crashed
 * process's holds are released by any queue once its heartbeat lapses (holders.ts), with the
 * `egress.proxy` record its proxy would have written. A released request stays pending until its
 * deadline and can still be approved or denied; the agent's next identical request (same actor,
 * DID, target, service, action, resource) adopts it: it is held again if still pending, or gets
 * the decision at once, once. A decision is good for one retry within ApprovalTimeout of it.
 * Expiry always denies.
 */
import { randomUUID } from 'node:crypto';
import { and, count, desc, eq, gte, isNull, lt, sql } from 'drizzle-orm';
import { BRAND } from '../../lib/brand.js';
import { DEFAULTS } from '../../lib/settings.js';
import { ApiError, conflict, notFound } from '../../lib/errors.js';
import { errMsg, logger } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import { egressRequests } from '../../store/schema/egress.js';
import type { AuditSink } from '../decision/types.js';
import { DEFAULT_HOLDER_TTL_MS, adoptUnheld, holderGone, lostHoldRecord, releaseWhere, startHeartbeat } from './holders.js';
import {
  EGRESS_STATUSES,
  UUID_RE,
  clip,
  heldFields,
  toRecord,
  type EgressRequest,
  type EgressRequestInput,
  type EgressStatus,
  type HoldResult,
} from './record.js';
import { createWaiters } from './waiters.js';

const log = logger('approvals');

/** NOTIFY channel carrying `{id, status}` of every decision. */
export const EGRESS_CHANNEL = `${BRAND}_egress_requests`;
export const DEFAULT_LIST_LIMIT = 200;
export const MAX_LIST_LIMIT = 1000;

export interface ApprovalQueueOptions {
  store: Store;
  audit: AuditSink;
  /** Clock, epoch ms (default Date.now). */
  now?: () => number;
  /** Hold timeout (ApprovalTimeout); default EGRESS_APPROVAL_TIMEOUT's default, 120 s. */
  timeoutMs?: number;
  /** This replica's stable id; default the host name (the gateway passes EGRESS_REPLICA_ID's). */
  replicaId?: string;
  /** Safety re-read of held requests, in case a notification is lost (default 5000 ms). */
  pollMs?: number;
  /** Heartbeat time-to-live of this process's holds (default 15 s): a holder silent this long is gone. */
  holderTtlMs?: number;
  /** Requests one agent may have waiting for a human at once (default EGRESS_MAX_PENDING_PER_AGENT's default, 100). */
  maxPendingPerAgent?: number;
}

export interface ListOptions {
  status?: EgressStatus;
  /** Newest first; default 200, at most 1000. */
  limit?: number;
}

export interface ApprovalQueue {
  readonly timeoutMs: number;
  readonly replicaId: string;
  /**
   * Holds a request in this process: adopts the newest identical request no connection waits on
   * (pending, or decided and not yet used, within its deadline), else inserts a pending one.
   */
  create(input: EgressRequestInput): Promise<EgressRequest>;
  /**
   * Waits for the decision and takes it (once). Resolves (never rejects once the request exists)
   * with 'approved' or 'denied', 'expired' (deadline, client gone, or the decision was already
   * used), or 'released' (this queue closed; the request stays pending for a retry). Rejects with
   * a 404 ApiError for an unknown id.
   */
  hold(id: string, signal?: AbortSignal): Promise<HoldResult>;
  /** 404 ApiError unknown, 409 not pending, 503 audit unavailable. Appends an `egress.approval` row. */
  approve(id: string, approver: string): Promise<EgressRequest>;
  deny(id: string, approver: string, reason: string): Promise<EgressRequest>;
  get(id: string): Promise<EgressRequest | undefined>;
  list(opts?: ListOptions): Promise<EgressRequest[]>;
  /** Expires pending rows past their deadline; returns how many. */
  sweep(): Promise<number>;
  /** Number of holds waiting in this process. */
  holding(): number;
  /**
   * Calls `listener` for each decision this replica makes (approve, deny, a hold's or the sweep's
   * expiry) with how long the request waited: each decision reaches one replica's listener, once.
   */
  onDecided(listener: (outcome: Exclude<EgressStatus, 'pending'>, waitedSeconds: number) => void): void;
  /** Releases this process's held requests (their holds answer 'released'; the requests stay) and unsubscribes. */
  close(): Promise<void>;
}

export async function createApprovalQueue(opts: ApprovalQueueOptions): Promise<ApprovalQueue> {
  const { store, audit } = opts;
  const now = opts.now ?? Date.now;
  const timeoutMs = opts.timeoutMs ?? DEFAULTS.proxy.approvalTimeoutMs;
  if (!Number.isFinite(timeoutMs) || timeoutMs < 1) throw new Error('approval timeoutMs must be a positive number');
  const replicaId = opts.replicaId ?? DEFAULTS.proxy.replicaId;
  const pollMs = opts.pollMs ?? 5000;
  const maxPending = opts.maxPendingPerAgent ?? DEFAULTS.proxy.maxPendingPerAgent;
  const db = store.db;
  const t = egressRequests;
  let closed = false;

  const stamp = () => new Date(now()).toISOString();

  // getRow and expireOne are defined below; a hold calls them only once the queue is made.
  const waiters = createWaiters({
    db,
    now,
    timeoutMs,
    pollMs,
    closed: () => closed,
    getRow: (id) => getRow(id),
    expireOne: (id, why) => expireOne(id, why),
  });
  const { wake } = waiters;

  const decidedListeners: ((outcome: Exclude<EgressStatus, 'pending'>, waitedSeconds: number) => void)[] = [];
  /** Tells this replica's listeners of a decision it made (`requestedAt` of the request). */
  const decided = (status: Exclude<EgressStatus, 'pending'>, requestedAt: string) => {
    const waited = (now() - Date.parse(requestedAt)) / 1000;
    if (!(waited >= 0)) return;
    for (const l of decidedListeners) {
      try {
        l(status, waited);
      } catch (e) {
        log.warn('egress decision listener failed', { err: errMsg(e) });
      }
    }
  };
  const announce = async (id: string, status: EgressStatus) => {
    wake(id, status);
    try {
      await store.notify(EGRESS_CHANNEL, JSON.stringify({ id, status }));
    } catch (e) {
      // Other replicas still learn it from their poll.
      log.warn('egress decision notify failed', { id, err: errMsg(e) });
    }
  };

  const unlisten = await store.listen(EGRESS_CHANNEL, (payload) => {
    try {
      const m = JSON.parse(payload) as { id?: unknown; status?: unknown };
      if (typeof m.id === 'string' && (EGRESS_STATUSES as readonly unknown[]).includes(m.status)) wake(m.id, m.status as EgressStatus);
    } catch {
      log.warn('ignoring malformed egress notification');
    }
  });

  const getRow = async (id: string) => {
    if (!UUID_RE.test(id)) return undefined;
    const rows = await db.select().from(t).where(eq(t.id, id)).limit(1);
    return rows[0];
  };

  /** Guarded pending -> expired. Returns the status the request ends with (whoever won). */
  const expireOne = async (id: string, why: string): Promise<HoldResult> => {
    try {
      const rows = await db
        .update(t)
        .set({ status: 'expired', decidedAt: stamp(), denyReason: why })
        .where(and(eq(t.id, id), eq(t.status, 'pending')))
        .returning({ id: t.id, requestedAt: t.requestedAt });
      if (rows.length > 0) {
        decided('expired', rows[0]!.requestedAt);
        await announce(id, 'expired');
        return 'expired';
      }
      const row = await getRow(id);
      return row && row.status !== 'pending' ? row.status : 'expired';
    } catch (e) {
      // Fail closed; the deadline sweep expires the row once the store is back.
      log.error('expiring egress request failed; treating as expired', { id, err: errMsg(e) });
      return 'expired';
    }
  };

  const sweep = async (): Promise<number> => {
    const rows = await db
      .update(t)
      .set({ status: 'expired', decidedAt: stamp(), denyReason: 'approval timed out' })
      .where(and(eq(t.status, 'pending'), lt(t.expiresAt, stamp())))
      .returning({ id: t.id, requestedAt: t.requestedAt });
    for (const r of rows) {
      decided('expired', r.requestedAt);
      await announce(r.id, 'expired');
    }
    return rows.length;
  };

  /**
   * Releases the rows whose holding process is gone, with the `egress.proxy` record their proxy
   * would have written, in one transaction: a refused record leaves them held for the next pass.
   */
  const releaseGone = async (): Promise<number> => {
    const rows = await db.transaction(async (tx) => {
      const lost = await releaseWhere(tx as unknown as Store['db'], holderGone(store));
      for (const r of lost) audit.append(lostHoldRecord(r, 'its process stopped; the request stays until its deadline for the agent to retry'));
      return lost;
    });
    if (rows.length) log.info('released egress requests whose holding process is gone', { count: rows.length, replicaId });
    return rows.length;
  };
  const sweepGone = () => {
    if (!closed) void releaseGone().catch((e: unknown) => log.warn('releasing orphaned egress holds failed', { err: errMsg(e) }));
  };

  let heartbeat: Awaited<ReturnType<typeof startHeartbeat>>;
  try {
    heartbeat = await startHeartbeat(store, replicaId, opts.holderTtlMs ?? DEFAULT_HOLDER_TTL_MS, sweepGone);
    // A refused audit record (store down) leaves them held: the heartbeat's sweep retries.
    await releaseGone().catch((e: unknown) => log.warn('releasing egress holds lost in a restart failed; retried on the next heartbeat', { err: errMsg(e) }));
    await sweep();
  } catch (e) {
    await unlisten();
    throw e;
  }

  /** Takes a decision for the connection waiting on it; a decision already used elsewhere expires this one. */
  const use = async (id: string, status: HoldResult): Promise<HoldResult> => {
    if (status !== 'approved' && status !== 'denied') return status;
    try {
      const rows = await db
        .update(t)
        .set({ usedAt: stamp() })
        .where(and(eq(t.id, id), eq(t.status, status), isNull(t.usedAt)))
        .returning({ id: t.id });
      return rows.length > 0 ? status : 'expired';
    } catch (e) {
      log.error('taking an egress decision failed; treating as expired', { id, err: errMsg(e) });
      return 'expired';
    }
  };

  const decide = async (id: string, approver: string, to: 'approved' | 'denied', denyReason: string | null): Promise<EgressRequest> => {
    if (closed) throw new ApiError(503, 'unavailable', 'egress approval queue is closed');
    if (!UUID_RE.test(id)) throw notFound('egress request', id);
    const at = stamp();
    const row = await db.transaction(async (tx) => {
      const rows = await tx
        .update(t)
        // A connection waiting on it takes it now; a released request's retry has ApprovalTimeout to.
        .set({ status: to, approver, decidedAt: at, denyReason, expiresAt: new Date(now() + timeoutMs).toISOString() })
        // Past its deadline it is expired, whether or not a sweep has marked it yet (holds fail closed).
        .where(and(eq(t.id, id), eq(t.status, 'pending'), gte(t.expiresAt, at)))
        .returning();
      const r = rows[0];
      if (!r) {
        const cur = await tx.select({ status: t.status }).from(t).where(eq(t.id, id)).limit(1);
        if (!cur[0]) throw notFound('egress request', id);
        if (cur[0].status === 'pending') return undefined;
        throw conflict('not_pending', `egress request ${id} is ${cur[0].status}, not pending`, { status: cur[0].status });
      }
      // Inside the transaction: if the audit chain refuses the row, the decision is rolled back.
      try {
        audit.append({
          action: 'egress.approval',
          subject: approver,
          actor: r.actor,
          service: r.service,
          allow: to === 'approved',
          reason:
            to === 'approved'
              ? `egress request ${id} to ${r.target} approved by ${approver}`
              : `egress request ${id} to ${r.target} denied by ${approver}: ${denyReason ?? ''}`,
        });
      } catch (e) {
        throw new ApiError(503, 'audit_unavailable', `audit log unavailable; decision not recorded: ${errMsg(e)}`);
      }
      return r;
    });
    if (!row) {
      await sweep();
      throw conflict('not_pending', `egress request ${id} is expired, not pending: it passed its deadline`, { status: 'expired' });
    }
    decided(to, row.requestedAt);
    await announce(id, to);
    return toRecord(row);
  };

  return {
    timeoutMs,
    replicaId,
    onDecided: (l) => void decidedListeners.push(l),

    async create(input) {
      if (closed) throw new ApiError(503, 'unavailable', 'egress approval queue is closed');
      const at = new Date(now()).toISOString();
      const v = heldFields(input);
      const holderInstance = heartbeat.instance;
      const row = await db.transaction(async (tx) => {
        const adopted = await adoptUnheld(tx as unknown as Store['db'], v, holderInstance, at);
        if (adopted) {
          log.info('egress request adopted by a retry', { id: adopted.id, status: adopted.status });
          return adopted;
        }
        // One agent cannot fill the humans' queue (about: concurrent creates may each pass the count).
        const [held] = await tx
          .select({ n: count() })
          .from(t)
          .where(and(eq(t.actor, v.actor), eq(t.status, 'pending')));
        if (Number(held?.n ?? 0) >= maxPending) {
          throw new ApiError(429, 'too_many_pending', `agent ${v.actor} already has ${held!.n} requests waiting for a human (at most ${maxPending})`);
        }
        const [inserted] = await tx
          .insert(t)
          .values({
            id: randomUUID(),
            status: 'pending',
            ...v,
            reason: clip(input.reason),
            requestedAt: at,
            expiresAt: new Date(Date.parse(at) + timeoutMs).toISOString(),
            holder: replicaId,
            holderInstance,
          })
          .returning();
        return inserted!;
      });
      return toRecord(row);
    },

    hold(id, signal) {
      return waiters.wait(id, signal).then((s) => use(id, s));
    },

    approve: (id, approver) => decide(id, approver, 'approved', null),
    deny: (id, approver, reason) => decide(id, approver, 'denied', reason),

    async get(id) {
      const row = await getRow(id);
      return row ? toRecord(row) : undefined;
    },

    async list(o = {}) {
      const limit = Math.min(Math.max(1, Math.floor(o.limit ?? DEFAULT_LIST_LIMIT)), MAX_LIST_LIMIT);
      // Rows past their deadline are expired whoever held them, so the list never shows a
      // request as pending after its connection is certainly gone.
      await sweep();
      const q = db.select().from(t);
      const rows = await (o.status ? q.where(eq(t.status, o.status)) : q).orderBy(desc(t.seq)).limit(limit);
      return rows.map(toRecord);
    },

    sweep,
    holding: waiters.holding,

    async close() {
      if (closed) return;
      closed = true;
      waiters.stopPolling();
      // The requests stay: their connections are told so, and a retry elsewhere adopts them.
      try {
        await releaseWhere(db, sql`holder_instance = ${heartbeat.instance}`);
      } catch (e) {
        log.warn('releasing held egress requests failed; they are released once the heartbeat lapses', { err: errMsg(e) });
      }
      waiters.releaseAll();
      await heartbeat.stop();
      try {
        await unlisten();
      } catch (e) {
        log.warn('unlisten failed', { err: errMsg(e) });
      }
    },
  };
}
