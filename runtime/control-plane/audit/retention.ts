/**
 * Retention: prunes a chain's oldest records in the background without breaking verification.
 * The boundary B is the newest record older than `retentionDays`, or the one leaving
 * `retentionRecords` records, whichever prunes more. Before deleting, [previous boundary + 1, B]
 * is verified (a broken range is never pruned: that would destroy the evidence), and a signed
 * prune checkpoint of record B is stored: it anchors verification of what remains, and marks
 * the deletion as intended (rows missing below the first retained seq without one are a tamper).
 * Export a range first (GET /v1/audit/export) to keep it in cold storage.
 */
import { and, asc, desc, eq, lt, lte, sql } from 'drizzle-orm';
import { logger } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import { auditLog } from '../../store/schema/control-plane.js';
import { trustedCheckpoints, type Jwks, type SignedCheckpoint } from './checkpoint.js';
import type { ChainAnchor } from './hash.js';
import { verifyRange } from './verify.js';

const log = logger('audit.retention');

export interface RetentionOptions {
  /** Prune records older than this many days (AUDIT_RETENTION_DAYS). */
  retentionDays?: number;
  /** Keep at most this many records per chain (AUDIT_RETENTION_RECORDS). */
  retentionRecords?: number;
  /** How often the background pass runs (default 60 s). */
  pruneIntervalMs?: number;
}

/** Rows deleted per statement, so a large first prune does not hold one huge transaction. */
const DELETE_BATCH = 10_000;

async function boundary(store: Store, chain: string, o: RetentionOptions, now: number): Promise<number> {
  let b = 0;
  if (o.retentionDays && o.retentionDays > 0) {
    const cutoff = new Date(now - o.retentionDays * 86_400_000).toISOString();
    const rows = await store.db
      .select({ seq: auditLog.seq })
      .from(auditLog)
      .where(and(eq(auditLog.chain, chain), lt(auditLog.time, cutoff)))
      .orderBy(desc(auditLog.seq))
      .limit(1);
    b = Math.max(b, Number(rows[0]?.seq ?? 0));
  }
  if (o.retentionRecords && o.retentionRecords > 0) {
    const rows = await store.db.select({ seq: auditLog.seq }).from(auditLog).where(eq(auditLog.chain, chain)).orderBy(desc(auditLog.seq)).limit(1);
    b = Math.max(b, Number(rows[0]?.seq ?? 0) - o.retentionRecords);
  }
  return b;
}

/** One pass; `signPrune` signs and stores the prune checkpoint of record B. Returns rows deleted. */
export async function pruneChain(
  store: Store,
  chain: string,
  o: RetentionOptions,
  now: () => number,
  jwks: Jwks,
  signPrune: (at: ChainAnchor & { time?: string }) => Promise<SignedCheckpoint | undefined>,
): Promise<number> {
  const b = await boundary(store, chain, o, now());
  const t = await trustedCheckpoints(store, chain, jwks);
  const prev = t.pruned;
  if (b <= (prev?.seq ?? 0)) return 0;
  const rows = await store.db
    .select({ seq: auditLog.seq, hash: auditLog.hash })
    .from(auditLog)
    .where(and(eq(auditLog.chain, chain), lte(auditLog.seq, b)))
    .orderBy(desc(auditLog.seq))
    .limit(1);
  const at = rows[0];
  if (!at) return 0;
  // Never prune what does not verify: that would erase the evidence of a tamper.
  const v = await verifyRange(store, chain, {
    from: (prev?.seq ?? 0) + 1,
    to: Number(at.seq),
    checkpoints: t.hashes,
    pruned: prev ? { seq: prev.seq, hash: prev.hash } : undefined,
  });
  if (!v.ok || t.forged.length) {
    log.error('audit retention refused: the range to prune does not verify', { chain, brokenAtSeq: v.brokenAtSeq, reason: v.reason });
    return 0;
  }
  await signPrune({ seq: Number(at.seq), hash: at.hash });
  let deleted = 0;
  for (;;) {
    const first = await store.db.select({ seq: auditLog.seq }).from(auditLog).where(eq(auditLog.chain, chain)).orderBy(asc(auditLog.seq)).limit(1);
    const lo = Number(first[0]?.seq ?? b + 1);
    if (lo > Number(at.seq)) break;
    const hi = Math.min(Number(at.seq), lo + DELETE_BATCH - 1);
    const r = await store.db.execute(sql`delete from audit_log where chain = ${chain} and seq <= ${hi}`);
    const n = (r as { count?: number; affectedRows?: number }).count ?? (r as { affectedRows?: number }).affectedRows ?? hi - lo + 1;
    deleted += n;
  }
  log.info('audit records pruned', { chain, through: Number(at.seq), deleted });
  return deleted;
}
