/**
 * Ordered, durable, batched shipping of audit records to a store.
 *
 * One worker drains a FIFO queue: it writes the oldest up-to-`maxBatch` records in one call,
 * removes them only after the write resolved, and on failure retries the SAME batch with
 * exponential backoff (never reorders, never drops, never skips ahead).
 *
 * Memory policy while the store is down: at most `maxPending` records wait in memory. Past
 * that, `push` throws AuditBackpressureError: the control plane fails closed (a decision it
 * cannot audit durably is denied) instead of silently losing records or growing without bound.
 */
import { errMsg, logger, type Logger } from '../../lib/log.js';

export class AuditBackpressureError extends Error {
  constructor(pending: number) {
    super(`audit store unavailable: ${pending} records waiting to be stored`);
    this.name = 'AuditBackpressureError';
  }
}

/** A record a caller waits on (AUDIT_DURABILITY=sync) was not committed in time. */
export class AuditNotCommittedError extends Error {
  constructor(seq: number, ms: number, why?: string) {
    super(`audit record ${seq} not committed within ${ms} ms${why ? ` (${why})` : ''}`);
    this.name = 'AuditNotCommittedError';
  }
}

/** The driver's own message (drizzle wraps it with the whole statement and its parameters). */
function shortError(e: unknown): string {
  const cause = e instanceof Error && e.cause instanceof Error ? e.cause : e;
  const m = errMsg(cause);
  return m.length > 300 ? m.slice(0, 300) + '…' : m;
}

export interface ShipperOptions<T> {
  /** Stores a batch, all or nothing; must be idempotent for a retried batch. */
  write(batch: T[]): Promise<void>;
  maxBatch?: number;
  /**
   * How long the worker lets records gather before a write that would carry fewer than
   * `maxBatch` (ms, default 10; flush and close cut it short). Each write has a fixed cost
   * (building and sending it, and the store's own work), so writing every record as it comes
   * would spend the process on tiny batches under load.
   */
  lingerMs?: number;
  maxPending?: number;
  retryMinMs?: number;
  retryMaxMs?: number;
  /** How long `whenStored` waits before rejecting (default 5000 ms). */
  commitTimeoutMs?: number;
  /** Called after each batch is stored (checkpoints, lag metrics). */
  onStored?: (batch: T[]) => void;
  /** Called after each failed write with the batch still pending (the spool). */
  onFailure?: (pending: readonly T[]) => void;
  log?: Logger;
  /** What the records are, as the log messages name them (default `audit`). */
  label?: string;
}

export interface ShipperStats {
  pending: number;
  /** Highest seq known stored (0 before the first write of this process). */
  shippedSeq: number;
  failures: number;
  lastError?: string;
  /** Age (ms) of the oldest record waiting to be stored; 0 when none. */
  lagMs: number;
  /** Batches stored by this process (records stored / writes = the average batch). */
  writes: number;
}

export interface Shipper<T extends { seq: number }> {
  push(rec: T): void;
  /**
   * undefined when `seq` is already stored, else a promise resolving once it is (group commit:
   * waiters never linger, so a batch carries whatever arrived while the previous one was
   * written); rejects with AuditNotCommittedError after commitTimeoutMs.
   */
  whenStored(seq: number): Promise<void> | undefined;
  /** Records pushed but not yet stored, oldest first (a copy). */
  unstored(): T[];
  /** Resolves once every record pushed so far is stored; rejects after timeoutMs if given. */
  flush(timeoutMs?: number): Promise<void>;
  stats(): ShipperStats;
  /** Flushes (bounded by timeoutMs), then stops the worker. */
  close(timeoutMs?: number): Promise<void>;
}

export function createShipper<T extends { seq: number }>(o: ShipperOptions<T>): Shipper<T> {
  const maxBatch = o.maxBatch ?? 500;
  const lingerMs = o.lingerMs ?? 10;
  const maxPending = o.maxPending ?? 100_000;
  const retryMin = o.retryMinMs ?? 100;
  const retryMax = o.retryMaxMs ?? 5_000;
  const log = o.log ?? logger('audit-shipper');
  const label = o.label ?? 'audit';
  const commitTimeout = o.commitTimeoutMs ?? 5000;

  let queue: T[] = [];
  let head = 0; // index of the oldest unshipped record in `queue`
  let pushedSeq = 0;
  let shippedSeq = 0;
  let failures = 0;
  let writes = 0;
  let lastError: string | undefined;
  let running = false;
  let stopped = false;
  let sleepTimer: NodeJS.Timeout | undefined;
  let wake: (() => void) | undefined;
  const waiters: { seq: number; resolve: () => void }[] = [];
  let lingerWake: (() => void) | undefined;
  // Durable waiters (sync durability), in seq order: a FIFO with a head index.
  type Durable = { seq: number; at: number; resolve: () => void; reject: (e: Error) => void };
  let durable: Durable[] = [];
  let dHead = 0;
  let pushedAt: number[] = [];
  let reaper: NodeJS.Timeout | undefined;
  let wakeSoon: NodeJS.Immediate | undefined;

  const pending = () => queue.length - head;

  function settleDurable(): void {
    while (dHead < durable.length && durable[dHead]!.seq <= shippedSeq) durable[dHead++]!.resolve();
    if (dHead > 1024 && dHead * 2 > durable.length) {
      durable = durable.slice(dHead);
      dHead = 0;
    }
    if (dHead >= durable.length && reaper) {
      clearInterval(reaper);
      reaper = undefined;
    }
  }

  /** Rejects durable waiters older than the commit timeout (store down or hung). */
  function reap(all = false): void {
    const limit = Date.now() - commitTimeout;
    while (dHead < durable.length && (all || durable[dHead]!.at <= limit)) {
      const w = durable[dHead++]!;
      w.reject(new AuditNotCommittedError(w.seq, commitTimeout, lastError));
    }
    settleDurable();
  }

  function settle(): void {
    settleDurable();
    for (let i = waiters.length - 1; i >= 0; i--) {
      const w = waiters[i]!;
      if (w.seq <= shippedSeq || pending() === 0) {
        waiters.splice(i, 1);
        w.resolve();
      }
    }
  }

  /**
   * Waits up to lingerMs for a fuller batch, unless one is full or someone waits on a flush.
   * Records someone waits on (sync durability) wait one event-loop turn only: every request
   * already readable on a socket appends first, so they share the write (group commit).
   */
  function linger(): Promise<void> | undefined {
    if (pending() >= maxBatch || waiters.length > 0) return undefined;
    if (dHead < durable.length) return new Promise<void>((resolve) => setImmediate(resolve));
    if (lingerMs <= 0) return undefined;
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(t);
        lingerWake = undefined;
        resolve();
      };
      const t = setTimeout(done, lingerMs);
      lingerWake = done;
    });
  }

  async function run(): Promise<void> {
    running = true;
    try {
      while (!stopped && pending() > 0) {
        const wait = linger();
        if (wait) await wait;
        const batch = queue.slice(head, head + maxBatch);
        try {
          await o.write(batch);
        } catch (e) {
          failures++;
          lastError = shortError(e);
          const delay = Math.min(retryMax, retryMin * 2 ** Math.min(failures - 1, 16));
          log.warn(`${label} batch not stored; retrying`, { err: lastError, failures, pending: pending(), retryMs: delay });
          reap();
          try {
            o.onFailure?.(queue.slice(head));
          } catch (e2) {
            log.error(`${label} failure hook failed`, { err: errMsg(e2) });
          }
          await new Promise<void>((resolve) => {
            wake = resolve;
            sleepTimer = setTimeout(resolve, delay);
          });
          wake = undefined;
          continue;
        }
        if (failures > 0) log.info(`${label} store reachable again`, { failures, pending: pending() });
        failures = 0;
        writes++;
        lastError = undefined;
        head += batch.length;
        shippedSeq = batch[batch.length - 1]!.seq;
        // Compact the consumed prefix now and then instead of shifting per batch.
        if (head > 4096 && head * 2 > queue.length) {
          queue = queue.slice(head);
          pushedAt = pushedAt.slice(head);
          head = 0;
        }
        settle();
        try {
          o.onStored?.(batch);
        } catch (e) {
          log.error(`${label} onStored hook failed`, { err: errMsg(e) });
        }
      }
    } finally {
      running = false;
    }
  }

  function kick(): void {
    if (!running && !stopped) void run();
  }

  function flush(timeoutMs?: number): Promise<void> {
    if (pending() === 0) return Promise.resolve();
    const target = pushedSeq;
    return new Promise<void>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const w = {
        seq: target,
        resolve: () => {
          if (timer) clearTimeout(timer);
          resolve();
        },
      };
      waiters.push(w);
      lingerWake?.();
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          const i = waiters.indexOf(w);
          if (i >= 0) waiters.splice(i, 1);
          reject(new Error(`audit flush timed out: ${pending()} records not yet stored${lastError ? ` (${lastError})` : ''}`));
        }, timeoutMs);
      }
      kick();
    });
  }

  return {
    push(rec) {
      if (stopped) throw new Error('audit chain is closed');
      if (pending() >= maxPending) throw new AuditBackpressureError(pending());
      queue.push(rec);
      pushedAt.push(Date.now());
      pushedSeq = rec.seq;
      if (lingerWake && pending() >= maxBatch) lingerWake();
      kick();
    },
    whenStored(seq) {
      if (seq <= shippedSeq) return undefined;
      if (stopped) return Promise.reject(new Error('audit chain is closed'));
      return new Promise<void>((resolve, reject) => {
        durable.push({ seq, at: Date.now(), resolve, reject });
        // Cut a linger short, but only after this event-loop turn: the requests already
        // readable append first and share the write.
        if (lingerWake && !wakeSoon) {
          wakeSoon = setImmediate(() => {
            wakeSoon = undefined;
            lingerWake?.();
          });
        }
        if (!reaper) {
          reaper = setInterval(() => reap(), Math.max(10, Math.min(1000, commitTimeout / 4)));
          reaper.unref();
        }
        kick();
      });
    },
    unstored: () => queue.slice(head),
    flush,
    stats: () => ({
      pending: pending(),
      shippedSeq,
      failures,
      writes,
      ...(lastError ? { lastError } : {}),
      lagMs: pending() > 0 ? Date.now() - (pushedAt[head] ?? Date.now()) : 0,
    }),
    async close(timeoutMs) {
      // Cut a retry sleep short so a clean shutdown tries the store right away.
      if (sleepTimer) clearTimeout(sleepTimer);
      wake?.();
      try {
        await flush(timeoutMs);
      } finally {
        stopped = true;
        if (sleepTimer) clearTimeout(sleepTimer);
        wake?.();
        reap(true);
      }
    },
  };
}
