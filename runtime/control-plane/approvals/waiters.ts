/**
 * The holds waiting in this process for a decision (queue.ts): one waiter per held connection,
 * registered before its row is read, woken by a decision made here or announced by another
 * replica (NOTIFY), and by a slow poll of the held ids in case a notification is lost. A hold
 * whose deadline passes or whose client goes away expires its request (fail closed); a hold of a
 * closed queue answers 'released'.
 */
import { inArray } from 'drizzle-orm';
import { notFound } from '../../lib/errors.js';
import { errMsg, logger } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import { egressRequests as t } from '../../store/schema/egress.js';
import type { EgressStatus, HoldResult } from './record.js';

const log = logger('approvals');

interface Waiter {
  finish(status: HoldResult): void;
}

export interface WaitersOptions {
  db: Store['db'];
  /** Clock, epoch ms. */
  now: () => number;
  /** Hold timeout (ApprovalTimeout). */
  timeoutMs: number;
  /** Safety re-read of held requests, in case a notification is lost. */
  pollMs: number;
  /** Whether the queue is closed (no poll; a pending request's hold answers 'released'). */
  closed: () => boolean;
  /** The request's row, undefined for an unknown id. */
  getRow: (id: string) => Promise<typeof t.$inferSelect | undefined>;
  /** Guarded pending -> expired. Returns the status the request ends with (whoever won). */
  expireOne: (id: string, why: string) => Promise<HoldResult>;
}

export interface Waiters {
  /** Finishes the holds of `id` with a decision (a pending status wakes no one). */
  wake(id: string, status: EgressStatus | HoldResult): void;
  /** Waits for the request's decision (not yet taken: see ApprovalQueue.hold); rejects with a 404 ApiError for an unknown id. */
  wait(id: string, signal?: AbortSignal): Promise<HoldResult>;
  /** Number of holds waiting in this process. */
  holding(): number;
  /** Stops the poll (the queue is closing). */
  stopPolling(): void;
  /** Answers every hold waiting here 'released'. */
  releaseAll(): void;
}

export function createWaiters(o: WaitersOptions): Waiters {
  const { db, now, timeoutMs, pollMs, closed, getRow, expireOne } = o;
  const waiters = new Map<string, Set<Waiter>>();
  let poller: NodeJS.Timeout | undefined;

  const wake = (id: string, status: EgressStatus | HoldResult) => {
    if (status === 'pending') return;
    const set = waiters.get(id);
    if (set) for (const w of [...set]) w.finish(status);
  };

  const poll = async () => {
    const ids = [...waiters.keys()];
    if (ids.length === 0) return;
    try {
      const rows = await db.select({ id: t.id, status: t.status }).from(t).where(inArray(t.id, ids));
      for (const r of rows) wake(r.id, r.status);
    } catch (e) {
      log.warn('egress hold poll failed', { err: errMsg(e) });
    }
  };

  const ensurePoller = () => {
    if (poller || closed()) return;
    poller = setInterval(() => {
      if (waiters.size === 0) {
        clearInterval(poller);
        poller = undefined;
        return;
      }
      void poll();
    }, pollMs);
    poller.unref();
  };

  return {
    wake,

    wait(id, signal) {
      return new Promise<HoldResult>((resolve, reject) => {
        let done = false;
        let timer: NodeJS.Timeout | undefined;
        const cleanup = () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          const set = waiters.get(id);
          set?.delete(w);
          if (set && set.size === 0) waiters.delete(id);
        };
        const w: Waiter = {
          finish(status) {
            if (done) return;
            done = true;
            cleanup();
            resolve(status);
          },
        };
        const expire = (why: string) => {
          if (done) return;
          void expireOne(id, why).then((s) => w.finish(s));
        };
        const onAbort = () => expire('client disconnected while held');
        // Register before reading the row, so a decision landing in between still wakes us.
        let set = waiters.get(id);
        if (!set) waiters.set(id, (set = new Set()));
        set.add(w);
        ensurePoller();
        getRow(id).then(
          (row) => {
            if (done) return;
            if (!row) {
              done = true;
              cleanup();
              reject(notFound('egress request', id));
              return;
            }
            if (row.status !== 'pending') return w.finish(row.status);
            if (closed()) return w.finish('released');
            if (signal?.aborted) return onAbort();
            signal?.addEventListener('abort', onAbort, { once: true });
            const left = Math.max(0, Date.parse(row.expiresAt) - now());
            timer = setTimeout(() => expire('approval timed out'), Math.min(left, timeoutMs));
            timer.unref?.();
          },
          (e: unknown) => {
            log.error('reading held egress request failed; expiring', { id, err: errMsg(e) });
            expire('store unavailable while holding');
          },
        );
      });
    },

    holding: () => [...waiters.values()].reduce((n, s) => n + s.size, 0),

    stopPolling() {
      clearInterval(poller);
      poller = undefined;
    },

    releaseAll() {
      for (const id of [...waiters.keys()]) wake(id, 'released');
    },
  };
}
