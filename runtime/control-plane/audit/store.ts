/**
 * audit_log persistence: row -> record mapping, the idempotent batch insert the shipper uses,
 * and the tail load that gives a reopened chain its seq, prevHash and ring.
 */
import { and, desc, eq, inArray, sql } from 'drizzle-orm';
import { rowsOf, type Store } from '../../store/factory.js';
import { copyText, type CopyValue } from '../../store/copy-text.js';
import { auditLog } from '../../store/schema/control-plane.js';
import { isUniqueViolation } from '../../lib/errors.js';
import type { AuditAction, AuditRecord, Rule } from '../types.js';

/** The columns a record is rebuilt from: what was hashed (not the chain id, not stored_at). */
export const RECORD_COLUMNS = {
  seq: auditLog.seq,
  time: auditLog.time,
  action: auditLog.action,
  subject: auditLog.subject,
  actor: auditLog.actor,
  task: auditLog.task,
  service: auditLog.service,
  allow: auditLog.allow,
  reason: auditLog.reason,
  rule: auditLog.rule,
  delegationId: auditLog.delegationId,
  delegationExp: auditLog.delegationExp,
  tool: auditLog.tool,
  argsDigest: auditLog.argsDigest,
  session: auditLog.session,
  prevHash: auditLog.prevHash,
  hash: auditLog.hash,
};
type Row = Omit<typeof auditLog.$inferSelect, 'chain' | 'storedAt'>;

/** Rebuilds the record exactly as it was hashed: NULL columns are absent fields. */
export function fromRow(row: Row): AuditRecord {
  const r = { seq: Number(row.seq), time: row.time, action: row.action as AuditAction } as AuditRecord;
  if (row.subject !== null) r.subject = row.subject;
  if (row.actor !== null) r.actor = row.actor;
  if (row.task !== null) r.task = row.task;
  if (row.service !== null) r.service = row.service;
  r.allow = row.allow;
  r.reason = row.reason;
  if (row.rule !== null) r.rule = row.rule as Rule;
  if (row.delegationId !== null) r.delegationId = row.delegationId;
  if (row.delegationExp !== null) r.delegationExp = Number(row.delegationExp);
  if (row.tool !== null) r.tool = row.tool;
  if (row.argsDigest !== null) r.argsDigest = row.argsDigest;
  if (row.session !== null) r.session = row.session;
  r.prevHash = row.prevHash;
  r.hash = row.hash;
  return r;
}

/**
 * Inserts a batch in one statement (atomic). A retried batch whose first attempt did commit
 * (acknowledgement lost) finds its rows already there: those are accepted when their hashes
 * match, and anything else means a second writer on the same chain id, which is an error (and
 * nothing of the batch is stored).
 *
 * The first attempt is a plain write (COPY on PGlite, an insert on PostgreSQL): conflict
 * arbitration and `returning` cost PGlite's engine about a fifth of its time per row, for a case
 * that only a retry meets. A batch refused with a unique violation is written again the careful
 * way (nothing of the refused statement stayed).
 */
export async function insertBatch(store: Store, chain: string, batch: AuditRecord[]): Promise<void> {
  if (batch.length === 0) return;
  // The records as they are, one JSON parameter expanded server-side: far cheaper than 15 bind
  // parameters per row, and exact (strings are already storable; numbers round-trip through
  // their shortest decimal). A field a record lacks is a NULL column, as fromRow reads it back.
  const insert = () => sql`insert into audit_log (${sql.raw(STORED_COLUMNS.join(', '))})
        select ${chain}, seq, time, action, subject, actor, task, service, allow, reason, rule, "delegationId", "delegationExp", tool, "argsDigest", session, "prevHash", hash
        from jsonb_to_recordset(${JSON.stringify(batch)}::jsonb) as x(seq bigint, time text, action text, subject text, actor text, task text,
          service text, allow boolean, reason text, rule text, "delegationId" text, "delegationExp" double precision, tool text, "argsDigest" text, session text, "prevHash" text, hash text)`;
  try {
    // PGlite: the same rows as COPY text, a quarter to a half less of the engine's time per row
    // for batches of 100-400 (the shipper's under load).
    if (store.copyRows) await store.copyRows('audit_log', STORED_COLUMNS, copyText(batch.map((r) => storedValues(chain, r))));
    else await store.db.execute(insert());
    return;
  } catch (e) {
    if (!isUniqueViolation(e)) throw e;
  }
  // In one transaction: a batch refused here leaves none of its rows behind.
  await store.db.transaction(async (tx) => {
    const inserted = await rowsOf<{ seq: string | number }>(tx, sql`${insert()} on conflict (chain, seq) do nothing returning seq`);
    if (inserted.length === batch.length) return;
    const got = new Set(inserted.map((r) => Number(r.seq)));
    const missing = batch.filter((r) => !got.has(r.seq));
    const existing = await tx
      .select({ seq: auditLog.seq, hash: auditLog.hash })
      .from(auditLog)
      .where(
        and(
          eq(auditLog.chain, chain),
          inArray(
            auditLog.seq,
            missing.map((r) => r.seq),
          ),
        ),
      );
    const byseq = new Map(existing.map((e) => [Number(e.seq), e.hash]));
    for (const r of missing) {
      if (byseq.get(r.seq) !== r.hash) {
        throw new Error(`audit chain ${JSON.stringify(chain)}: seq ${r.seq} is already stored with a different hash (two writers on one chain id?)`);
      }
    }
  });
}

/** A record's fields in RECORD_COLUMNS' order. */
const RECORD_FIELDS = Object.keys(RECORD_COLUMNS) as (keyof typeof RECORD_COLUMNS)[];

/** The audit_log columns a batch writes: the chain id, then each field's column. */
const STORED_COLUMNS = ['chain', ...Object.values(RECORD_COLUMNS).map((c) => c.name)];

/** A record's row, in STORED_COLUMNS' order: what the JSON insert stores, a field the record lacks NULL. */
function storedValues(chain: string, r: AuditRecord): CopyValue[] {
  const row: CopyValue[] = [chain];
  for (const k of RECORD_FIELDS) row.push(r[k]);
  return row;
}

/** The newest `n` records of a chain, oldest first. */
export async function loadTail(store: Store, chain: string, n: number): Promise<AuditRecord[]> {
  const rows = await store.db.select(RECORD_COLUMNS).from(auditLog).where(eq(auditLog.chain, chain)).orderBy(desc(auditLog.seq)).limit(n);
  return rows.reverse().map(fromRow);
}
