import { describe, expect, it } from 'vitest';
import { AuditBackpressureError, createShipper } from './shipper.js';

const silent = { debug() {}, info() {}, warn() {}, error() {} };
const recs = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => ({ seq: from + i }));

describe('audit shipper', () => {
  it('stores every record once, in order, in bounded batches, retrying failed batches as they were', async () => {
    const stored: number[] = [];
    const attempts: number[][] = [];
    let calls = 0;
    const s = createShipper<{ seq: number }>({
      maxBatch: 7,
      retryMinMs: 1,
      retryMaxMs: 2,
      log: silent,
      write: async (batch) => {
        attempts.push(batch.map((r) => r.seq));
        await new Promise((r) => setImmediate(r));
        if (++calls % 3 === 0) throw new Error('store hiccup');
        stored.push(...batch.map((r) => r.seq));
      },
    });
    for (const r of recs(1, 100)) s.push(r);
    await s.flush();
    expect(stored).toEqual(recs(1, 100).map((r) => r.seq));
    expect(Math.max(...attempts.map((a) => a.length))).toBeLessThanOrEqual(7);
    // Each failed attempt was retried with exactly the same batch.
    for (let i = 2; i < attempts.length; i += 3) expect(attempts[i + 1]).toEqual(attempts[i]);
    expect(s.stats()).toMatchObject({ pending: 0, shippedSeq: 100, failures: 0 });
    await s.close();
  });

  it('lets records pushed one at a time gather into one write; a full batch or a flush does not wait', async () => {
    const batches: number[][] = [];
    const s = createShipper<{ seq: number }>({ lingerMs: 60_000, maxBatch: 5, log: silent, write: async (b) => void batches.push(b.map((r) => r.seq)) });
    // A full batch goes at once despite the long linger.
    for (const r of recs(1, 5)) s.push(r);
    await new Promise((r) => setTimeout(r, 20));
    expect(batches).toEqual([[1, 2, 3, 4, 5]]);
    // Three stragglers wait for company...
    for (const r of recs(6, 8)) s.push(r);
    await new Promise((r) => setTimeout(r, 20));
    expect(batches).toHaveLength(1);
    // ...until a flush asks for them: one write, well before the linger would end.
    const t0 = Date.now();
    await s.flush(5_000);
    expect(Date.now() - t0).toBeLessThan(1_000);
    expect(batches).toEqual([
      [1, 2, 3, 4, 5],
      [6, 7, 8],
    ]);
    await s.close(1_000);
  });

  it('flush waits for records pushed before it, including ones pushed while a write is in flight', async () => {
    const stored: number[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const s = createShipper<{ seq: number }>({
      log: silent,
      write: async (batch) => {
        await gate;
        stored.push(...batch.map((r) => r.seq));
      },
    });
    s.push({ seq: 1 });
    s.push({ seq: 2 });
    let flushed = false;
    const f = s.flush().then(() => (flushed = true));
    s.push({ seq: 3 });
    const f2 = s.flush();
    await new Promise((r) => setImmediate(r));
    expect(flushed).toBe(false);
    release();
    await Promise.all([f, f2]);
    expect(stored).toEqual([1, 2, 3]);
  });

  it('fails closed past maxPending while the store is down, then drains everything when it returns', async () => {
    let up = false;
    const stored: number[] = [];
    const s = createShipper<{ seq: number }>({
      maxPending: 5,
      retryMinMs: 1,
      retryMaxMs: 5,
      log: silent,
      write: async (batch) => {
        if (!up) throw new Error('connection refused');
        stored.push(...batch.map((r) => r.seq));
      },
    });
    for (const r of recs(1, 5)) s.push(r);
    expect(() => s.push({ seq: 6 })).toThrow(AuditBackpressureError);
    await expect(s.flush(30)).rejects.toThrow(/5 records not yet stored.*connection refused/);
    expect(s.stats().lastError).toBe('connection refused');
    up = true;
    await s.flush();
    expect(stored).toEqual([1, 2, 3, 4, 5]);
    s.push({ seq: 6 });
    await s.close();
    expect(stored).toEqual([1, 2, 3, 4, 5, 6]);
    expect(() => s.push({ seq: 7 })).toThrow(/closed/);
  });

  it('close with the store down rejects after its bound instead of hanging', async () => {
    const s = createShipper<{ seq: number }>({ retryMinMs: 1, retryMaxMs: 5, log: silent, write: async () => Promise.reject(new Error('down')) });
    s.push({ seq: 1 });
    await expect(s.close(20)).rejects.toThrow(/1 records not yet stored/);
  });

  it('names what it ships in its log: a failed write and the recovery say the label', async () => {
    const said: string[] = [];
    const log = { ...silent, warn: (m: string) => void said.push(m), info: (m: string) => void said.push(m) };
    let down = true;
    const s = createShipper<{ seq: number }>({
      retryMinMs: 1,
      retryMaxMs: 2,
      log,
      label: 'budget reservation',
      write: async () => (down ? Promise.reject(new Error('down')) : undefined),
    });
    s.push({ seq: 1 });
    await new Promise((r) => setTimeout(r, 20));
    down = false;
    await s.flush();
    expect(said[0]).toBe('budget reservation batch not stored; retrying');
    expect(said.at(-1)).toBe('budget reservation store reachable again');
    await s.close();
  });
});
