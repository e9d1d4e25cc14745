/**
 * Memory given back once a busy process goes quiet.
 *
 * Under load V8 sizes the old generation for the allocation rate it sees: the heap grows to a
 * multiple of what is live. When a server then goes quiet, nothing collects it again: V8's memory
 * reducer is not started for it, so the garbage of the last burst stays resident for as long as
 * the process idles (measured on the all-in-one, bench/soak.bench.ts: a 157 MB heap holding 40 MB
 * of live objects 15 s after 300k decisions, 166 MB more resident than before the load).
 *
 * Like the JVM's periodic collection of an idle heap (G1, JEP 346): every `intervalMs`, when the
 * event loop was nearly idle over the whole interval, the heap V8 holds did not grow in it, and it
 * has grown by `minGrowthBytes` since the last trim, full collections run (up to three, while the
 * heap still shrinks) and V8 returns the freed pages to the system. A process under load is never
 * paused by it; an idle one pays a few tens of ms per collection, once per burst. The PGlite
 * engine thread runs one of its own (an isolate of its own).
 */
import { performance } from 'node:perf_hooks';
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { logger } from './log.js';

const log = logger('idle-gc');

let gc: (() => void) | undefined;

/** A full, synchronous garbage collection of this isolate (without starting node with --expose-gc). */
export function collectGarbage(): void {
  if (!gc) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as () => void;
  }
  gc();
}

export interface IdleGcOptions {
  /** How often idleness is checked (ms); 0 turns the collector off. */
  intervalMs: number;
  /** Event-loop utilization over an interval below which the process counts as idle (default 0.05). */
  maxUtilization?: number;
  /** Growth of the heap (committed, as V8 sized it) since the last trim that is worth one (default 16 MiB). */
  minGrowthBytes?: number;
}

export interface IdleGc {
  /** Full collections run so far. */
  readonly collections: number;
  stop(): void;
}

const MIB = 2 ** 20;
/** Collections per idle trim at most (each one pauses the idle process for a few tens of ms). */
const MAX_PASSES = 3;
const used = () => getHeapStatistics().used_heap_size;
const committed = () => getHeapStatistics().total_heap_size;

export function startIdleGc(o: IdleGcOptions): IdleGc {
  const maxUtilization = o.maxUtilization ?? 0.05;
  const minGrowth = o.minGrowthBytes ?? 16 * MIB;
  let collections = 0;
  let floor = committed();
  let last = floor;
  let mark = performance.eventLoopUtilization();
  const check = () => {
    const elu = performance.eventLoopUtilization(mark);
    mark = performance.eventLoopUtilization();
    const before = committed();
    // Quiet means both: an idle loop, and a heap that stopped growing (not a burst just begun;
    // an idle heap still creeps by a page or a few).
    const quiet = elu.utilization <= maxUtilization && before - last < minGrowth / 4;
    last = before;
    // V8 shrank the heap on its own: that is the new floor.
    if (before < floor) floor = before;
    if (!quiet || before - floor < minGrowth) return;
    const started = performance.now();
    // The first collection frees the garbage; V8 sizes the heap for the allocation rate it last
    // saw, so the next ones, with nothing allocated in between, shrink it (the young generation
    // too) and return the pages. Measured on the all-in-one after 300k decisions: one collection
    // left 101 MB of heap for 47 MB used, two 75 MB, three 44 MB (as before the load).
    let heap = before;
    for (let i = 0; i < MAX_PASSES; i++) {
      collectGarbage();
      const now = committed();
      const shrank = heap - now;
      heap = now;
      if (shrank < MIB) break;
    }
    floor = last = heap;
    collections++;
    log.debug('idle heap collected', {
      heapMB: Math.round(before / MIB),
      afterMB: Math.round(heap / MIB),
      usedMB: Math.round(used() / MIB),
      pauseMs: Math.round(performance.now() - started),
    });
  };
  const timer = o.intervalMs > 0 ? setInterval(check, o.intervalMs).unref() : undefined;
  return {
    get collections() {
      return collections;
    },
    stop: () => clearInterval(timer),
  };
}
