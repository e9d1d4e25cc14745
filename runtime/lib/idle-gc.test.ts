/**
 * The idle heap collection (idle-gc.ts) on this test's own isolate: a heap that grew and then
 * went quiet is collected and given back; a busy loop, a heap still growing and a collector that
 * is off are left alone.
 */
import { getHeapStatistics } from 'node:v8';
import { afterEach, describe, expect, it } from 'vitest';
import { collectGarbage, startIdleGc, type IdleGc, type IdleGcOptions } from './idle-gc.js';

const MIB = 2 ** 20;
const committed = () => getHeapStatistics().total_heap_size;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** ~60 MB of small objects, garbage once this returns (their count, so the work is not elided). */
function garbage(): number {
  const held: { n: number; s: string }[][] = [];
  for (let i = 0; i < 200; i++) held.push(Array.from({ length: 5000 }, (_, n) => ({ n, s: `x${n}-${i}` })));
  return held.length * 5000;
}

/** A collector started on a collected heap, then ~60 MB of garbage made; with the heap (committed) after it. */
function afterGarbage(o: IdleGcOptions): { gc: IdleGc; grown: number } {
  collectGarbage();
  const gc = startIdleGc(o);
  garbage();
  return { gc, grown: committed() };
}

/** Keeps this thread's event loop busy (well above 5 %) for `ms`. */
async function busy(ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const spin = Date.now() + 20;
    while (Date.now() < spin);
    await new Promise((r) => setImmediate(r));
  }
}

describe('idle heap collection', () => {
  let gc: IdleGc | undefined;
  afterEach(() => gc?.stop());

  it('collectGarbage collects what nothing references', async () => {
    // Made in a function of its own: nothing here holds the target once it returns.
    const ref = ((): WeakRef<object> => new WeakRef({ big: new Array(1000).fill('x') }))();
    await sleep(0); // a WeakRef keeps its target alive until the current job ends
    collectGarbage();
    expect(ref.deref()).toBeUndefined();
  });

  it('a heap that grew, then went quiet, is collected and given back', async () => {
    const started = afterGarbage({ intervalMs: 100, minGrowthBytes: 16 * MIB });
    gc = started.gc;
    for (let i = 0; i < 50 && gc.collections === 0; i++) await sleep(50);
    expect(gc.collections).toBe(1);
    expect(committed()).toBeLessThan(started.grown - 16 * MIB);
  });

  it('a busy event loop is not paused, however much the heap grew', async () => {
    gc = afterGarbage({ intervalMs: 100, minGrowthBytes: 16 * MIB }).gc;
    await busy(600);
    expect(gc.collections).toBe(0);
  });

  it('a heap that grew too little, or a collector that is off, is left alone', async () => {
    gc = afterGarbage({ intervalMs: 100, minGrowthBytes: 512 * MIB }).gc;
    await sleep(500);
    expect(gc.collections).toBe(0);
    gc.stop();
    gc = afterGarbage({ intervalMs: 0, minGrowthBytes: 1 }).gc;
    await sleep(300);
    expect(gc.collections).toBe(0);
  });
});
