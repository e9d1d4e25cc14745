/**
 * Issue 16 tamper tests: records edited in the store while Writ is stopped (PGlite and
 * PostgreSQL), each reported at the right seq by whole-store verification or by the consistency
 * check against a checkpoint a client kept, even with every hash recomputed.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../../lib/log.js';
import { rowsOf, type Store } from '../../store/factory.js';
import { testBackends } from '../../store/testing.js';
import type { AuditEntry, AuditRecord } from '../types.js';
import { openAuditChain, type AuditChainOptions } from './chain.js';
import { verifyCheckpoint } from './checkpoint.js';
import { hashRecord } from './hash.js';
import { fromRow } from './store.js';
import { auditLog } from '../../store/schema/control-plane.js';
import { and, asc, eq, gte } from 'drizzle-orm';

setLogLevel('error');

const entry = (i: number): AuditEntry => ({
  action: 'authz',
  subject: `user-${i}`,
  service: `svc-${i % 7}`,
  allow: i % 3 !== 0,
  reason: `r${i}`,
  rule: 'inline',
});

const PROOF: AuditChainOptions['proof'] = { checkpointEvery: 250, checkpointIntervalMs: 3_600_000, verifyIntervalMs: 0 };

/** Writes `n` records to a fresh chain and closes it (a final checkpoint is signed at close). */
async function seed(store: Store, chain: string, n: number): Promise<string> {
  const c = await openAuditChain(store, { chain, proof: PROOF, maxBatch: 100 });
  for (let i = 1; i <= n; i++) c.append(entry(i));
  await c.close();
  const cps = await listCps(store, chain);
  return cps[cps.length - 1]!.jws;
}

async function listCps(store: Store, chain: string) {
  return rowsOf<{ seq: number; jws: string; prune: boolean }>(
    store.db,
    sql`select seq::int as seq, jws, prune from audit_checkpoints where chain = ${chain} order by seq`,
  );
}

async function reopen(store: Store, chain: string) {
  return openAuditChain(store, { chain, proof: PROOF });
}

async function verifyWhole(store: Store, chain: string, q: { from?: number; to?: number } = {}) {
  const c = await reopen(store, chain);
  try {
    return await c.proof!.verify(q);
  } finally {
    await c.close();
  }
}

/** Rewrites record `k` and recomputes the hash of it and every later record (an insider with DB access). */
async function rewriteAndRehash(store: Store, chain: string, k: number): Promise<void> {
  const rows = (
    await store.db
      .select()
      .from(auditLog)
      .where(and(eq(auditLog.chain, chain), gte(auditLog.seq, k)))
      .orderBy(asc(auditLog.seq))
  ).map(fromRow);
  let prev = (await rowsOf<{ hash: string }>(store.db, sql`select hash from audit_log where chain = ${chain} and seq = ${k - 1}`))[0]!.hash;
  for (const r of rows) {
    const rec: AuditRecord = { ...r, prevHash: prev };
    if (r.seq === k) rec.allow = !r.allow;
    rec.hash = hashRecord(rec);
    await store.db.execute(
      sql`update audit_log set allow = ${rec.allow}, prev_hash = ${rec.prevHash}, hash = ${rec.hash} where chain = ${chain} and seq = ${r.seq}`,
    );
    prev = rec.hash;
  }
}

describe.each(testBackends())('audit proofs on $name', (b) => {
  let store: Store;
  beforeAll(async () => {
    store = await b.open();
  });
  afterAll(async () => {
    await store.close();
  });

  it('modify a record older than the ring: the ring says ok (SPEC 4.3), whole-store verify finds it', async () => {
    await seed(store, 'old', 1500);
    await store.exec(`update audit_log set reason = 'forged' where chain = 'old' and seq = 50`);
    const c = await reopen(store, 'old');
    expect(c.verify()).toEqual({ ok: true, brokenAtSeq: -1 });
    expect(await c.proof!.verify({ from: 1 })).toMatchObject({ ok: false, brokenAtSeq: 50, reason: 'hash' });
    // A range after the damage verifies; one covering it does not.
    expect(await c.proof!.verify({ from: 51, to: 900 })).toMatchObject({ ok: true, brokenAtSeq: -1, checked: 850 });
    expect(await c.proof!.verify({ from: 10, to: 60 })).toMatchObject({ ok: false, brokenAtSeq: 50 });
    // The background verifier reports it too.
    expect(await c.proof!.verifyTick(true)).toMatchObject({ brokenAtSeq: 50, reason: 'hash', verifiedSeq: 49 });
    await c.close();
  });

  it('modify inside the ring, then age it out with 1001 newer records: still reported at its seq', async () => {
    await seed(store, 'aged', 1200);
    await store.exec(`update audit_log set subject = 'mallory' where chain = 'aged' and seq = 1100`);
    const c = await reopen(store, 'aged');
    expect(c.verify()).toEqual({ ok: false, brokenAtSeq: 1100 });
    for (let i = 0; i < 1001; i++) c.append(entry(5000 + i));
    await c.flush();
    expect(c.verify()).toEqual({ ok: true, brokenAtSeq: -1 });
    expect(await c.proof!.verify()).toMatchObject({ ok: false, brokenAtSeq: 1100 });
    await c.close();
  });

  it('delete a record: reported at the missing seq', async () => {
    await seed(store, 'deleted', 800);
    await store.exec(`delete from audit_log where chain = 'deleted' and seq = 700`);
    expect(await verifyWhole(store, 'deleted')).toMatchObject({ ok: false, brokenAtSeq: 700, reason: 'missing' });
    expect(await verifyWhole(store, 'deleted', { from: 701 })).toMatchObject({ ok: false, brokenAtSeq: 700, reason: 'missing' });
  });

  it('truncate the tail: the checkpoint check reports the first missing seq, and seqs are never reused', async () => {
    const kept = await seed(store, 'truncated', 600);
    expect((await verifyCheckpoint(kept, (await reopenJwks(store)).jwks)).seq).toBe(600);
    await store.exec(`delete from audit_log where chain = 'truncated' and seq > 597`);
    expect(await verifyWhole(store, 'truncated')).toMatchObject({ ok: false, brokenAtSeq: 598, reason: 'truncated' });
    // With the stored checkpoints deleted as well, the checkpoint the client kept still tells.
    await store.exec(`delete from audit_checkpoints where chain = 'truncated'`);
    const c = await reopen(store, 'truncated');
    expect(await c.proof!.verify()).toMatchObject({ ok: true });
    expect(await c.proof!.consistency(kept)).toMatchObject({ ok: false, brokenAtSeq: 598, reason: 'truncated', checkpoint: { seq: 600 } });
    await c.close();
    // Truncated below a stored checkpoint while stopped: the next record continues after it.
    await seed(store, 'truncated2', 300);
    await store.exec(`delete from audit_log where chain = 'truncated2' and seq > 290`);
    const d = await reopen(store, 'truncated2');
    expect(d.append(entry(1)).seq).toBe(301);
    await d.close();
    expect(await verifyWhole(store, 'truncated2')).toMatchObject({ ok: false, brokenAtSeq: 291 });
  });

  it('rewrite a record and re-hash it and every later one: caught by the next signed checkpoint and by a kept one', async () => {
    const kept = await seed(store, 'rehash', 1000);
    await rewriteAndRehash(store, 'rehash', 420);
    const r = await verifyWhole(store, 'rehash');
    // Links and hashes all recompute; the first signed checkpoint after the rewrite disagrees.
    expect(r).toMatchObject({ ok: false, reason: 'checkpoint' });
    const cps = (await listCps(store, 'rehash')).map((x) => x.seq);
    expect(r.brokenAtSeq).toBe(cps.find((s) => s >= 420));
    // Everything up to the checkpoint before it still verifies.
    const before = [...cps].reverse().find((s) => s < 420)!;
    expect(await verifyWhole(store, 'rehash', { to: before })).toMatchObject({ ok: true });
    await store.exec(`delete from audit_checkpoints where chain = 'rehash'`);
    const c = await reopen(store, 'rehash');
    expect(await c.proof!.consistency(kept)).toMatchObject({ ok: false, brokenAtSeq: 1000, reason: 'checkpoint' });
    await c.close();
  });

  it('reorder two records: reported at the first of them', async () => {
    await seed(store, 'reorder', 500);
    await store.exec(`update audit_log set seq = -1 where chain = 'reorder' and seq = 300;
      update audit_log set seq = 300 where chain = 'reorder' and seq = 301;
      update audit_log set seq = 301 where chain = 'reorder' and seq = -1`);
    expect(await verifyWhole(store, 'reorder')).toMatchObject({ ok: false, brokenAtSeq: 300 });
  });

  it('a forged checkpoint row (columns changed, signature kept) is itself a break', async () => {
    await seed(store, 'forgedcp', 600);
    const first = (await listCps(store, 'forgedcp'))[0]!.seq;
    await store.exec(`update audit_checkpoints set hash = '${'a'.repeat(64)}' where chain = 'forgedcp' and seq = ${first}`);
    expect(await verifyWhole(store, 'forgedcp')).toMatchObject({ ok: false, brokenAtSeq: first, reason: 'checkpoint' });
  });

  it('the background verifier reads at most its budget a pass: the tail first, then a sweep of the history', async () => {
    await seed(store, 'budget', 2500);
    const c = await openAuditChain(store, { chain: 'budget', proof: { ...PROOF, verifyBudget: 1000, fullVerifyEvery: 4 } });
    // From genesis, 1000 a pass, until it has caught up with what was stored.
    expect((await c.proof!.verifyTick()).verifiedSeq).toBe(1000);
    expect((await c.proof!.verifyTick()).verifiedSeq).toBe(2000);
    expect(await c.proof!.verifyTick()).toMatchObject({ verifiedSeq: 2500, brokenAtSeq: -1 });
    // A record the tail has passed is changed: the 4th pass starts the sweep, which finds it.
    await store.exec(`update audit_log set reason = 'forged' where chain = 'budget' and seq = 1700`);
    for (let i = 0; i < 10; i++) c.append(entry(9000 + i));
    await c.flush();
    expect(await c.proof!.verifyTick()).toMatchObject({ verifiedSeq: 2510, brokenAtSeq: -1 }); // 10 new, then 990 of history
    expect(await c.proof!.verifyTick()).toMatchObject({ brokenAtSeq: 1700, reason: 'hash', verifiedSeq: 1699 });
    // Restored: a pass whose whole budget goes to new records does not read it, so the break stands;
    // the next one reads it again, whole, and clears it.
    await store.exec(`update audit_log set reason = 'r1700' where chain = 'budget' and seq = 1700`);
    for (let i = 0; i < 1000; i++) c.append(entry(10_000 + i));
    await c.flush();
    expect(await c.proof!.verifyTick()).toMatchObject({ brokenAtSeq: 1700, verifiedSeq: 1699 });
    expect(await c.proof!.verifyTick()).toMatchObject({ brokenAtSeq: -1, verifiedSeq: 3510 });
    await c.close();
  });

  it('an untouched chain verifies whole, and its kept checkpoint is consistent', async () => {
    const kept = await seed(store, 'clean', 700);
    const c = await reopen(store, 'clean');
    for (let i = 0; i < 10; i++) c.append(entry(i));
    await c.flush();
    expect(await c.proof!.verify()).toMatchObject({ ok: true, brokenAtSeq: -1, checked: 710, lastSeq: 710 });
    expect(await c.proof!.consistency(kept)).toMatchObject({ ok: true, brokenAtSeq: -1, lastSeq: 710 });
    expect(await c.proof!.verifyTick()).toMatchObject({ verifiedSeq: 710, brokenAtSeq: -1 });
    await c.close();
  });
});

/** The signer's key set, through a throwaway chain on the same store. */
async function reopenJwks(store: Store) {
  const c = await openAuditChain(store, { chain: 'jwks-probe', proof: PROOF });
  const jwks = c.proof!.jwks();
  await c.close();
  return { jwks };
}
