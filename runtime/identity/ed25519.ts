/**
 * Ed25519 signature verification off the event loop where the machine has a core to spare.
 *
 * One verification (~64 µs) costs more than a whole proxied request (~50 µs), and a sidecar sends
 * a fresh VP per request: on the request thread, verification caps a process at a fraction of
 * what it could serve. `crypto.verify` with a callback runs it on libuv's thread pool instead,
 * beside the request thread; the request thread pays only the hand-off (a few µs).
 *
 * Bounded: at most `pool - 1` verifications wait on the pool (its size is `UV_THREADPOOL_SIZE`,
 * default 4), so one thread stays free for what else uses it (`dns.lookup`, file system) and a
 * burst never queues unbounded work there. Past the bound, and on a machine with one core (where
 * the hand-off is pure cost), the request thread verifies itself, which slows the intake of new
 * requests as verification on the request thread always did.
 */
import { verify, type KeyObject } from 'node:crypto';
import { availableParallelism } from 'node:os';

const POOL = Math.max(1, Math.min(1024, Number(process.env.UV_THREADPOOL_SIZE) || 4));
/** Verifications that may wait on the thread pool at once (0: always on the request thread). */
export const MAX_OFF_THREAD = availableParallelism() > 1 ? Math.max(0, POOL - 1) : 0;

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
