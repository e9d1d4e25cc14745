import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../../lib/log.js';
import { openStore, rowsOf, type Store } from '../../store/factory.js';
import { openTestPostgres, testBackends, testSchema } from '../../store/testing.js';
import type { AuditEntry, AuditRecord } from '../types.js';
import { openAuditChain } from './chain.js';
import { verifyChain } from './hash.js';
import { ChainLeasedError } from './lease.js';
import { AuditBackpressureError } from './shipper.js';
import { insertBatch, loadTail } from './store.js';
import { readRange, verifyRange } from './verify.js';

setLogLevel('error'); // retries are expected here; keep the output readable

const entry = (i: number): AuditEntry => ({
  action: i % 2 ? 'authz' : 'egress',
  subject: `user-${i}`,
  ...(i % 2 ? {} : { actor: `agent-${i % 5}`, task: `task-${i}` }),
  service: `svc-${i % 7}`,
  allow: i % 3 !== 0,
  reason: i % 3 ? 'ok' : 'denied',
  rule: 'inline',
  ...(i % 10 === 0 ? { delegationId: `d-${i}`, delegationExp: 1_900_000_000 + i } : {}),
});

const count = async (store: Store, chain: string) =>
  (await rowsOf<{ n: number }>(store.db, sql`select count(*)::int as n from audit_log where chain = ${chain}`))[0]!.n;

describe('audit chain in memory', () => {
  it('links across the ring boundary and serves the newest records, newest last', async () => {
    const chain = await openAuditChain(undefined);
    const all: AuditRecord[] = [];
    for (let i = 1; i <= 1205; i++) all.push(chain.append(entry(i)));
    expect(all.map((r) => r.seq)).toEqual(all.map((_, i) => i + 1));
    const ring = chain.recent(5000);
    expect(ring).toHaveLength(1000);
    expect(ring[0]!.seq).toBe(206);
    expect(ring[0]!.prevHash).toBe(all[204]!.hash);
    expect(ring[999]!.seq).toBe(1205);
    expect(chain.verify()).toEqual({ ok: true, brokenAtSeq: -1 });
    expect(verifyChain(ring, { seq: 205, hash: all[204]!.hash })).toEqual({ ok: true, brokenAtSeq: -1 });
    expect(chain.recent().map((r) => r.seq)).toEqual(all.slice(-200).map((r) => r.seq));
    expect(chain.recent(3).map((r) => r.seq)).toEqual([1203, 1204, 1205]);
    expect(chain.recent(0)).toEqual([]);
    // Held records cannot be altered through what recent() hands out.
    expect(() => {
      (ring[0] as { reason: string }).reason = 'forged';
    }).toThrow();
    await chain.close();
    expect(() => chain.append(entry(1))).toThrow(/closed/);
  });

  it('an invalid entry throws and consumes no seq', async () => {
    const chain = await openAuditChain(undefined, { now: () => Date.UTC(2026, 0, 1) });
    chain.append(entry(1));
    expect(() => chain.append({ action: 'bogus' } as unknown as AuditEntry)).toThrow(TypeError);
    const r = chain.append(entry(2));
    expect(r.seq).toBe(2);
    expect(r.time).toBe('2026-01-01T00:00:00.000Z');
    expect(chain.verify().ok).toBe(true);
  });
});

/** A store that can be closed and opened again on the same data: PGlite data dir / Postgres schema. */
function restartable(name: 'pglite' | 'postgres') {
  if (name === 'pglite') {
    const dir = mkdtempSync(join(tmpdir(), 'audit-'));
    return {
      open: () => openStore({ backend: 'pglite', dataDir: dir }),
      cleanup: async () => rmSync(dir, { recursive: true, force: true }),
    };
  }
  const schema = testSchema();
  return {
    open: () => openTestPostgres({ schema, keepSchema: true }),
    cleanup: async () => {
      const s = await openTestPostgres({ schema, keepSchema: true, migrate: false });
      await s.exec(`drop schema if exists "${schema}" cascade`);
      await s.close();
    },
  };
}

describe.each(testBackends())('audit chain on $name', (b) => {
  let store: Store;
  beforeAll(async () => {
    store = await b.open();
  });
  afterAll(async () => {
    await store.close();
  });

  it('ships every record in order; close flushes without an explicit flush', async () => {
    const chain = await openAuditChain(store, { chain: 'order', maxBatch: 37 });
    const appended: AuditRecord[] = [];
    for (let i = 1; i <= 1100; i++) appended.push(chain.append(entry(i)));
    await chain.close();
    expect(await count(store, 'order')).toBe(1100);
    const stored = await loadTail(store, 'order', 2000);
    expect(stored).toEqual(appended);
    expect(verifyChain(stored)).toEqual({ ok: true, brokenAtSeq: -1 });
    expect(await verifyRange(store, 'order', { pageSize: 100 })).toMatchObject({ ok: true, brokenAtSeq: -1, checked: 1100 });
    // A record older than the ring: the reopened ring still verifies, the full history does not.
    await store.exec(`update audit_log set subject = 'forged' where chain = 'order' and seq = 50`);
    const reopened = await openAuditChain(store, { chain: 'order' });
    expect(reopened.verify()).toEqual({ ok: true, brokenAtSeq: -1 });
    await reopened.close();
    // The last record verified is the one before the break, not the anchor of its page.
    expect(await verifyRange(store, 'order', { pageSize: 100 })).toMatchObject({
      ok: false,
      brokenAtSeq: 50,
      checked: 49,
      lastSeq: 49,
      lastHash: stored[48]!.hash,
    });
    expect(await verifyRange(store, 'no-such-chain')).toMatchObject({ ok: true, brokenAtSeq: -1, checked: 0 });
    // A range past the newest record is not a break; one that a checkpoint says must exist is.
    for (const from of [1101, 1102, 5000]) {
      expect(await verifyRange(store, 'order', { from }), String(from)).toMatchObject({ ok: true, checked: 0, lastSeq: 1100, lastHash: stored[1099]!.hash });
    }
    expect(await verifyRange(store, 'order', { from: 1102, expectEnd: 1200 })).toMatchObject({ ok: false, brokenAtSeq: 1101, reason: 'missing' });
  });

  it('reads every record back exactly as it was hashed: text of any kind, NULLs, fractional and large expiries', async () => {
    const chain = await openAuditChain(store, { chain: 'exact' });
    // Also what COPY's text format escapes or reads as markers (PGlite stores batches with COPY).
    const odd = [
      'quote " and \\ backslash',
      'line\nbreak\ttab',
      'émoji 🎉 and 中文',
      '{"json":[1,2]}',
      '',
      ' spaced ',
      '\\N',
      'a\n\\.\nb',
      'cr\r\nlf',
      'ends with \\',
    ];
    const appended: AuditRecord[] = odd.map((text, i) =>
      chain.append({
        action: 'egress',
        subject: text,
        ...(i % 2 ? { actor: text, task: `t-${i}` } : {}),
        service: 'svc',
        allow: i % 2 === 0,
        reason: text,
        ...(i % 3 === 0 ? {} : { rule: 'delegation', delegationId: `d-${i}`, delegationExp: [1.5, 2 ** 53 - 1, 1e21, 1_900_000_000.25][i % 4]! }),
      }),
    );
    await chain.close();
    const read: AuditRecord[] = [];
    for await (const page of readRange(store, 'exact', 1, undefined, 4)) read.push(...page);
    expect(read).toEqual(appended);
    expect(await verifyRange(store, 'exact', { pageSize: 4 })).toMatchObject({ ok: true, checked: odd.length });
  });

  it('a page is hashed a slice at a time: a break anywhere in it is found at its seq, with what came before it checked', async () => {
    const chain = await openAuditChain(store, { chain: 'slices' });
    for (let i = 1; i <= 1100; i++) chain.append(entry(i));
    await chain.close();
    expect(await verifyRange(store, 'slices')).toMatchObject({ ok: true, checked: 1100, lastSeq: 1100 });
    // Past the first slice of the first page, and on a slice boundary (a missing record).
    await store.exec(`update audit_log set reason = 'forged' where chain = 'slices' and seq = 600`);
    expect(await verifyRange(store, 'slices')).toMatchObject({ ok: false, brokenAtSeq: 600, reason: 'hash', checked: 599, lastSeq: 599 });
    await store.exec(`delete from audit_log where chain = 'slices' and seq = 251`);
    expect(await verifyRange(store, 'slices')).toMatchObject({ ok: false, brokenAtSeq: 251, reason: 'missing', checked: 250, lastSeq: 250 });
    // A checkpoint that disagrees, in a later slice of a later page.
    const checkpoints = new Map([[1050, 'f'.repeat(64)]]);
    expect(await verifyRange(store, 'slices', { from: 1001, checkpoints })).toMatchObject({
      ok: false,
      brokenAtSeq: 1050,
      reason: 'checkpoint',
      checked: 49,
      lastSeq: 1049,
    });
  });

  it('flush resolves once everything appended so far is stored', async () => {
    const chain = await openAuditChain(store, { chain: 'flush' });
    for (let i = 1; i <= 50; i++) chain.append(entry(i));
    await chain.flush();
    expect(await count(store, 'flush')).toBe(50);
    expect(chain.stats()).toMatchObject({ pending: 0, shippedSeq: 50, lastSeq: 50, chainId: 'flush', durable: true });
    await chain.close();
  });

  it('a retried batch whose first write did commit is accepted once; a changed record in it is refused whole', async () => {
    const chain = await openAuditChain(undefined);
    const records = Array.from({ length: 6 }, (_, i) => chain.append(entry(i + 1)));
    await chain.close();
    await insertBatch(store, 'retry', records.slice(0, 4));
    // The shipper retries a batch whose answer it lost, now with two more records behind it.
    await insertBatch(store, 'retry', records);
    expect(await loadTail(store, 'retry', 100)).toEqual(records);
    // Another writer's record 5 (same seq, different content): an error, and nothing of the batch is kept.
    await store.exec(`delete from audit_log where chain = 'retry' and seq = 6`);
    const forged = { ...records[4]!, hash: 'f'.repeat(64) };
    await expect(insertBatch(store, 'retry', [forged, records[5]!])).rejects.toThrow(/seq 5 is already stored with a different hash/);
    expect(await count(store, 'retry')).toBe(5);
  });

  it('chains with different ids share the table without colliding', async () => {
    const a = await openAuditChain(store, { chain: 'replica-a' });
    const c = await openAuditChain(store, { chain: 'replica-b' });
    for (let i = 1; i <= 20; i++) {
      a.append(entry(i));
      c.append(entry(i + 100));
    }
    await Promise.all([a.close(), c.close()]);
    const ra = await loadTail(store, 'replica-a', 100);
    const rb = await loadTail(store, 'replica-b', 100);
    expect(ra.map((r) => r.seq)).toEqual(rb.map((r) => r.seq));
    expect(verifyChain(ra).ok && verifyChain(rb).ok).toBe(true);
    expect(ra[0]!.hash).not.toBe(rb[0]!.hash);
  });

  it('keeps records while the table is unavailable and ships them in order when it returns', async () => {
    const chain = await openAuditChain(store, { chain: 'outage', retryMinMs: 5, retryMaxMs: 20, maxPending: 30 });
    chain.append(entry(1));
    await chain.flush();
    await store.exec('alter table audit_log rename to audit_log_away');
    try {
      for (let i = 2; i <= 31; i++) chain.append(entry(i));
      // 30 waiting: the next append fails closed and consumes no seq.
      expect(() => chain.append(entry(99))).toThrow(AuditBackpressureError);
      await expect(chain.flush(50)).rejects.toThrow(/30 records not yet stored \(relation "audit_log" does not exist\)/);
      expect(chain.stats().failures).toBeGreaterThan(0);
    } finally {
      await store.exec('alter table audit_log_away rename to audit_log');
    }
    await chain.flush();
    // The refused decision is recorded as a summary denial before the next record.
    expect(chain.append(entry(32)).seq).toBe(33);
    expect(chain.recent(2)[0]).toMatchObject({
      seq: 32,
      action: 'authz',
      allow: false,
      reason: expect.stringMatching(/^audit backpressure: 1 decisions denied unrecorded since /),
    });
    await chain.close();
    const stored = await loadTail(store, 'outage', 100);
    expect(stored.map((r) => r.seq)).toEqual(Array.from({ length: 33 }, (_, i) => i + 1));
    expect(verifyChain(stored).ok).toBe(true);
  });

  it('a second writer on the same chain id is refused at start; one past the lease is detected, not merged', async () => {
    const live = await openAuditChain(store, { chain: 'leased', leaseTtlMs: 300 });
    await expect(openAuditChain(store, { chain: 'leased', leaseTtlMs: 300 })).rejects.toThrow(ChainLeasedError);
    await live.close();
    // Released at close: the next writer takes it at once and continues the chain.
    const next = await openAuditChain(store, { chain: 'leased', leaseTtlMs: 300 });
    await next.close();

    const first = await openAuditChain(store, { chain: 'dup', leaseTtlMs: false });
    const second = await openAuditChain(store, { chain: 'dup', retryMinMs: 5, retryMaxMs: 10, leaseTtlMs: false });
    first.append(entry(1));
    await first.close();
    second.append(entry(2)); // also seq 1, different content
    await expect(second.close(100)).rejects.toThrow(/not yet stored.*different hash/);
  });

  it('restart continuity: seq and prevHash continue, the ring reloads, verify stays ok', async () => {
    const r = restartable(b.name);
    try {
      let s = await r.open();
      let chain = await openAuditChain(s, { chain: 'cp-0' });
      const first: AuditRecord[] = [];
      for (let i = 1; i <= 1003; i++) first.push(chain.append(entry(i)));
      await chain.close();
      await s.close();

      s = await r.open();
      chain = await openAuditChain(s, { chain: 'cp-0' });
      expect(chain.verify()).toEqual({ ok: true, brokenAtSeq: -1 });
      expect(chain.recent(1000)).toEqual(first.slice(-1000));
      const next = chain.append(entry(2000));
      expect(next.seq).toBe(1004);
      expect(next.prevHash).toBe(first[1002]!.hash);
      for (let i = 1; i <= 5; i++) chain.append(entry(2000 + i));
      expect(chain.verify()).toEqual({ ok: true, brokenAtSeq: -1 });
      await chain.close();
      await s.close();

      // Alter a stored record while "down": the reloaded ring no longer verifies, at that seq.
      s = await r.open();
      await s.exec(`update audit_log set reason = 'forged' where chain = 'cp-0' and seq = 1005`);
      chain = await openAuditChain(s, { chain: 'cp-0' });
      expect(chain.verify()).toEqual({ ok: false, brokenAtSeq: 1005 });
      await chain.close();
      // A deleted record is a gap where it was.
      await s.exec(`delete from audit_log where chain = 'cp-0' and seq = 1005`);
      chain = await openAuditChain(s, { chain: 'cp-0' });
      expect(chain.verify()).toEqual({ ok: false, brokenAtSeq: 1005 });
      await chain.close();
      await s.close();
    } finally {
      await r.cleanup();
    }
  });
});
