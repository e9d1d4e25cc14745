/**
 * The idle heap collection (idle-gc.ts) on this test's own isolate: a heap that grew and then
 * went quiet is collected and given back; a busy loop, a heap still growing and a collector that
 * is off are left alone.
 */
import { getHeapStatistics } from 'node:v8';
import { afterEach, describe, expect, it } from 'vitest';
import { collectGarbage, startIdleGc, type IdleGc } from './idle-gc.js';

const MIB = 2 ** 20;
const committed = () => getHeapStatistics().total_heap_size;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** ~60 MB of small objects, held until the returned function drops them. */
function garbage(): () => void {
  let held: { n: number; s: string }[][] | undefined = [];
  for (let i = 0; i < 200; i++) held.push(Array.from({ length: 5000 }, (_, n) => ({ n, s: `x${n}-${i}` })));
  return () => {
    held = undefined;
  };
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
    collectGarbage();
    gc = startIdleGc({ intervalMs: 100, minGrowthBytes: 16 * MIB });
    const drop = garbage();
    const grown = committed();
    drop();
    for (let i = 0; i < 50 && gc.collections === 0; i++) await sleep(50);
    expect(gc.collections).toBe(1);
    expect(committed()).toBeLessThan(grown - 16 * MIB);
  });

  it('a busy event loop is not paused, however much the heap grew', async () => {
    collectGarbage();
    gc = startIdleGc({ intervalMs: 100, minGrowthBytes: 16 * MIB });
    const drop = garbage();
    drop();
    await busy(600);
    expect(gc.collections).toBe(0);
  });

  it('a heap that grew too little, or a collector that is off, is left alone', async () => {
    collectGarbage();
    gc = startIdleGc({ intervalMs: 100, minGrowthBytes: 512 * MIB });
    const drop = garbage();
    drop();
    await sleep(500);
    expect(gc.collections).toBe(0);
    gc.stop();
    gc = startIdleGc({ intervalMs: 0, minGrowthBytes: 1 });
    const drop2 = garbage();
    drop2();
    await sleep(300);
    expect(gc.collections).toBe(0);
  });
});
