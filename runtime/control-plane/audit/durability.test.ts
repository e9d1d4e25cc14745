/**
 * Issue 16 durability and retention: sync commits (group commit), served records are stored
 * records, the spool keeps what an unreachable store could not take, default chains are distinct
 * per writer, and retention prunes behind a signed checkpoint without breaking verification.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { setLogLevel } from '../../lib/log.js';
import { rowsOf, type Store } from '../../store/factory.js';
import { testBackends } from '../../store/testing.js';
import type { AuditEntry } from '../types.js';
import { openAuditChain } from './chain.js';
import { exportLines, verifyExport } from './export.js';
import { AuditNotCommittedError } from './shipper.js';
import { spoolFile } from './spool.js';
import { loadConfig } from '../../lib/settings.js';

const defaultSpoolDir = (env: Record<string, string>) => loadConfig(env).audit.spoolDir;

setLogLevel('error');

const entry = (i: number): AuditEntry => ({ action: 'egress', actor: 'bot', subject: `u${i}`, service: 'svc', allow: true, reason: 'ok', rule: 'inline' });
const count = async (store: Store, chain: string) =>
  (await rowsOf<{ n: number }>(store.db, sql`select count(*)::int as n from audit_log where chain = ${chain}`))[0]!.n;
const NO_TIMERS = { checkpointIntervalMs: 3_600_000, verifyIntervalMs: 0 };

describe.each(testBackends())('audit durability on $name', (b) => {
  let store: Store;
  const dir = mkdtempSync(join(tmpdir(), 'audit-dur-'));
  beforeAll(async () => {
    store = await b.open();
  });
  afterAll(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('sync: durable(record) resolves only once the record is committed; concurrent waiters share batches', async () => {
    const c = await openAuditChain(store, { chain: 'sync', durability: 'sync', proof: NO_TIMERS });
    const recs = Array.from({ length: 300 }, (_, i) => c.append(entry(i)));
    const waits = recs.map((r) => c.durable!(r));
    expect(waits.every((w) => w instanceof Promise)).toBe(true);
    await waits[0];
    // Committed in order: whatever resolved is stored.
    expect(await count(store, 'sync')).toBeGreaterThanOrEqual(1);
    await Promise.all(waits);
    expect(await count(store, 'sync')).toBe(300);
    expect(c.durable!(recs[0]!)).toBeUndefined(); // already stored
    await c.close();
    const a = await openAuditChain(store, { chain: 'async', proof: NO_TIMERS });
    expect(a.durable!(a.append(entry(1)))).toBeUndefined();
    await a.close();
    const m = await openAuditChain(undefined, { durability: 'sync' });
    expect(m.durable!(m.append(entry(1)))).toBeUndefined();
  });

  it('sync: a record the store cannot take in time rejects (the caller denies); served() never shows it', async () => {
    const c = await openAuditChain(store, {
      chain: 'sync-down',
      durability: 'sync',
      commitTimeoutMs: 150,
      retryMinMs: 20,
      retryMaxMs: 40,
      proof: NO_TIMERS,
      spoolDir: dir,
    });
    const first = c.append(entry(1));
    await c.durable!(first);
    expect(c.served().map((r) => r.seq)).toEqual([1]);
    await store.exec('alter table audit_log rename to audit_log_away');
    try {
      const r = c.append(entry(2));
      await expect(c.durable!(r)).rejects.toThrow(AuditNotCommittedError);
      // In the ring, not served: a crash now could lose it, so its seq is not shown yet.
      expect(c.recent().map((x) => x.seq)).toEqual([1, 2]);
      expect(c.served().map((x) => x.seq)).toEqual([1]);
      // The failed batch was spooled to disk.
      await vi.waitFor(() => expect(readFileSync(spoolFile(dir, 'sync-down'), 'utf8')).toContain('"seq":2'), { timeout: 5000 });
    } finally {
      await store.exec('alter table audit_log_away rename to audit_log');
    }
    await c.flush();
    expect(c.served().map((x) => x.seq)).toEqual([1, 2]);
    await c.close();
  });

  it('an exit while the store is unreachable spools the waiting records; the next start ships them first', async () => {
    const c = await openAuditChain(store, { chain: 'spooled', retryMinMs: 20, retryMaxMs: 40, proof: NO_TIMERS, spoolDir: dir });
    for (let i = 1; i <= 5; i++) c.append(entry(i));
    await c.flush();
    await store.exec('alter table audit_log rename to audit_log_away');
    try {
      for (let i = 6; i <= 40; i++) c.append(entry(i));
      await c.close(100); // resolves: what the store could not take is on disk
    } finally {
      await store.exec('alter table audit_log_away rename to audit_log');
    }
    const file = spoolFile(dir, 'spooled');
    expect(readFileSync(file, 'utf8').trim().split('\n').length).toBe(35);
    expect(await count(store, 'spooled')).toBe(5);
    const again = await openAuditChain(store, { chain: 'spooled', proof: NO_TIMERS, spoolDir: dir });
    expect(await count(store, 'spooled')).toBe(40);
    expect(existsSync(file)).toBe(false);
    expect(again.append(entry(41)).seq).toBe(41);
    await again.flush();
    expect(await again.proof!.verify()).toMatchObject({ ok: true, checked: 41 });
    await again.close();
  });

  it('a spool that is not this chain below its stored seq is set aside, never deleted; a stored one is cleared', async () => {
    const c = await openAuditChain(store, { chain: 'foreign', proof: NO_TIMERS, spoolDir: dir });
    const stored = [];
    for (let i = 1; i <= 5; i++) stored.push(c.append(entry(i)));
    await c.close();
    const file = spoolFile(dir, 'foreign');
    // Records of another chain state (another data folder's spool under the same chain id): seq 1-3.
    const other = await openAuditChain(store, { chain: 'elsewhere', proof: NO_TIMERS });
    const theirs = [1, 2, 3].map((i) => ({ ...other.append(entry(100 + i)), chain: 'foreign' }));
    await other.close();
    writeFileSync(file, theirs.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const again = await openAuditChain(store, { chain: 'foreign', proof: NO_TIMERS, spoolDir: dir });
    await again.close();
    expect(existsSync(file)).toBe(false);
    const aside = readdirSync(dir).filter((f) => f.startsWith('audit-foreign.jsonl.rejected-'));
    expect(aside).toHaveLength(1);
    expect(readFileSync(join(dir, aside[0]!), 'utf8')).toContain(theirs[0]!.hash);
    // This chain's own records, already stored: the spool is done with and cleared.
    writeFileSync(file, stored.map((r) => JSON.stringify(r)).join('\n') + '\n');
    await (await openAuditChain(store, { chain: 'foreign', proof: NO_TIMERS, spoolDir: dir })).close();
    expect(existsSync(file)).toBe(false);
    expect(readdirSync(dir).filter((f) => f.startsWith('audit-foreign.jsonl.rejected-'))).toHaveLength(1);
  });

  it('the default spool folder is named after the data folder: two data folders in one parent never share one', () => {
    const a = defaultSpoolDir({ WRIT_DATA_DIR: '/tmp/x.AAAA' });
    const b2 = defaultSpoolDir({ WRIT_DATA_DIR: '/tmp/x.BBBB' });
    expect(a).toBe('/tmp/x.AAAA.audit-spool');
    expect(a).not.toBe(b2);
    expect(defaultSpoolDir({ AUDIT_SPOOL_DIR: 'none' })).toBeUndefined();
  });

  it('two writers with no chain id get two chains (host, host-2), both verify', async () => {
    const a = await openAuditChain(store, { chainBase: 'node-a', proof: NO_TIMERS });
    const c = await openAuditChain(store, { chainBase: 'node-a', proof: NO_TIMERS });
    expect([a.chainId, c.chainId]).toEqual(['node-a', 'node-a-2']);
    for (let i = 0; i < 50; i++) {
      a.append(entry(i));
      c.append(entry(i));
    }
    await Promise.all([a.flush(), c.flush()]);
    expect(await a.proof!.verify()).toMatchObject({ ok: true, checked: 50 });
    expect(await a.proof!.verify({ chain: 'node-a-2' })).toMatchObject({ ok: true, checked: 50 });
    await Promise.all([a.close(), c.close()]);
    // Released: the next start takes the base id again and continues it.
    const next = await openAuditChain(store, { chainBase: 'node-a', proof: NO_TIMERS });
    expect(next.chainId).toBe('node-a');
    expect(next.append(entry(1)).seq).toBe(51);
    await next.close();
  });

  it('retention prunes behind a signed prune checkpoint; what remains verifies and exports; a deletion below is still caught', async () => {
    let t = Date.UTC(2026, 0, 1);
    const c = await openAuditChain(store, { chain: 'kept', now: () => t, proof: { ...NO_TIMERS, retentionDays: 10, retentionRecords: 600 } });
    for (let i = 1; i <= 1000; i++) {
      if (i === 301) t += 20 * 86_400_000; // the first 300 are 20 days older
      c.append(entry(i));
    }
    await c.flush();
    t += 86_400_000;
    // Whichever prunes more: 1000 - 600 = 400 (the count) beats 300 (the age).
    expect(await c.proof!.prune()).toBe(400);
    expect(await count(store, 'kept')).toBe(600);
    expect(await c.proof!.prune()).toBe(0);
    const cps = await c.proof!.checkpoints('kept');
    expect(cps.find((x) => x.prune)).toMatchObject({ seq: 400, prune: true });
    expect(await c.proof!.verify()).toMatchObject({ ok: true, from: 401, checked: 600 });
    expect(await c.proof!.verify({ from: 1, to: 500 })).toMatchObject({ ok: true, from: 401, checked: 100 });
    expect(c.proof!.health().prunedThrough).toBe(400);
    // Export of what remains, anchored by the signed prune checkpoint, verifies offline.
    const pruned = cps.find((x) => x.prune);
    const lines = exportLines({ store, jwks: c.proof!.jwks(), pruned }, 'kept');
    const offline = await verifyExport(lines);
    expect(offline).toMatchObject({ ok: true, from: 401, checked: 600 });
    expect(offline.provenThrough).toBeGreaterThanOrEqual(400);
    // A record deleted just above the boundary is not retention: it is reported.
    await store.exec(`delete from audit_log where chain = 'kept' and seq = 401`);
    expect(await c.proof!.verify()).toMatchObject({ ok: false, brokenAtSeq: 401, reason: 'missing' });
    await c.close();
  });

  it('retention never prunes a range that does not verify', async () => {
    const c = await openAuditChain(store, { chain: 'kept-broken', proof: { ...NO_TIMERS, retentionRecords: 10 } });
    for (let i = 1; i <= 50; i++) c.append(entry(i));
    await c.flush();
    await store.exec(`update audit_log set reason = 'forged' where chain = 'kept-broken' and seq = 7`);
    expect(await c.proof!.prune()).toBe(0);
    expect(await count(store, 'kept-broken')).toBe(50);
    await c.close();
  });
});
