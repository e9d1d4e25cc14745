/**
 * Ed25519 signature verification off the event loop where the machine has a core to spare.
 *
 * One verification (~64 µs) costs more than a whole proxied request (~50 µs), and a sidecar sends
 * a fresh VP per request: on the request thread, verification caps a process at a fraction of
 * what it could serve. `crypto.verify` with a callback runs it on libuv's thread pool instead,
 * beside the request thread; the request thread pays only the hand-off (a few µs).
 *
 * Bounded: at most `MAX_OFF_THREAD` verifications wait on the pool (its size is
 * `UV_THREADPOOL_SIZE`, default 4), so a burst never queues unbounded work in front of what else
 * uses it (`dns.lookup`, the file system). Past the bound, and on a machine with one core (where
 * the hand-off is pure cost), the request thread verifies itself, which slows its intake of new
 * requests as verification on the request thread always did: back-pressure, not a queue.
 */
import { verify, type KeyObject } from 'node:crypto';
import { availableParallelism } from 'node:os';

/** libuv's thread pool size: it reads `UV_THREADPOOL_SIZE` itself (default 4, at most 1024). */
const POOL = Math.max(1, Math.min(1024, Number(process.env.UV_THREADPOOL_SIZE) || 4));
/**
 * Verifications that may wait on the thread pool at once (0: always on the request thread): four
 * per pool thread keeps every thread fed through a burst, while anything else queued behind them
 * (a `dns.lookup`, a file read) waits at most four verifications (~0.3 ms).
 */
export const MAX_OFF_THREAD = availableParallelism() > 1 ? 4 * POOL : 0;

let pending = 0;

/** Verifications waiting on the thread pool now (never more than MAX_OFF_THREAD). */
export const waitingOffThread = (): number => pending;

/** Whether `signature` is `key`'s Ed25519 signature of `data`; false (never a throw) on any error. */
export function verifyEd25519(data: Buffer, key: KeyObject, signature: Buffer): Promise<boolean> {
  if (pending >= MAX_OFF_THREAD) {
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
