/**
 * Ed25519 signature verification off the event loop when the request thread is saturated.
 *
 * One verification (~64 µs) costs more than a whole proxied request (~50 µs), and a sidecar sends
 * a fresh VP per request: on the request thread, verification caps a process at a fraction of
 * what it could serve. `crypto.verify` with a callback runs it on libuv's thread pool instead,
 * beside the request thread, which pays only the hand-off (a few µs of its own time).
 *
 * Only while the request thread is busy (its event-loop utilisation over the last ~50 ms at least
 * `BUSY`): the hand-off's two thread wake-ups add latency (measured one request at a time: +30-50
 * µs at p50, milliseconds at p99 on a loaded machine), which pays only when the request thread is
 * what limits throughput. Otherwise the request thread verifies, as it always did.
 *
 * Bounded: at most `MAX_OFF_THREAD` verifications wait on the pool (its size is
 * `UV_THREADPOOL_SIZE`, default 4), so a burst never queues unbounded work in front of what else
 * uses it (`dns.lookup`, the file system). Past the bound, and on a machine with one core (where
 * the hand-off is pure cost), the request thread verifies itself, which slows its intake of new
 * requests as verification on the request thread always did: back-pressure, not a queue.
 */
import { verify, type KeyObject } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import { processSetting } from '../lib/settings.js';

/** libuv's thread pool size: it reads `UV_THREADPOOL_SIZE` itself (default 4, at most 1024). */
const POOL = Math.min(1024, processSetting('uvThreadpoolSize'));
/**
 * Verifications that may wait on the thread pool at once (0: always on the request thread): four
 * per pool thread keeps every thread fed through a burst, while anything else queued behind them
 * (a `dns.lookup`, a file read) waits at most four verifications (~0.3 ms).
 */
export const MAX_OFF_THREAD = availableParallelism() > 1 ? 4 * POOL : 0;
/** Event-loop utilisation from which the request thread counts as saturated. */
export const BUSY = 0.8;
/** How often (ms) the utilisation is read again: the window it is measured over. */
const WINDOW_MS = 50;

let pending = 0;
let since: EventLoopUtilization = performance.eventLoopUtilization();
let readAt = performance.now();
let busy = false;

/** Verifications waiting on the thread pool now (never more than MAX_OFF_THREAD). */
export const waitingOffThread = (): number => pending;

/** Whether the request thread was saturated over the last window (read at most once a window). */
function saturated(): boolean {
  const now = performance.now();
  if (now - readAt >= WINDOW_MS) {
    const u = performance.eventLoopUtilization(since);
    since = performance.eventLoopUtilization();
    readAt = now;
    busy = u.utilization >= BUSY;
  }
  return busy;
}

/** Whether `signature` is `key`'s Ed25519 signature of `data`; false (never a throw) on any error. */
export function verifyEd25519(data: Buffer, key: KeyObject, signature: Buffer): Promise<boolean> {
  if (pending >= MAX_OFF_THREAD || !saturated()) {
    try {
      return Promise.resolve(verify(null, data, key, signature));
    } catch {
      return Promise.resolve(false);
    }
  }
  pending++;
  return new Promise((resolve) => {
    try {
      verify(null, data, key, signature, (err, ok) => {
        pending--;
        resolve(!err && ok);
      });
    } catch {
      pending--;
      resolve(false);
    }
  });
}
