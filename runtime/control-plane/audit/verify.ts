/**
 * Whole-store verification: streams a range of a stored chain page by page (bounded memory,
 * any size) and reports the first seq where it breaks, in the SPEC's `{ok, brokenAtSeq}` shape
 * plus detail.
 *
 * What a stored chain is checked against:
 *  - its own links and hashes (verifyChain): a modified, deleted or reordered record breaks at
 *    its seq (a deleted one at the seq that is missing);
 *  - the signed checkpoints the caller passes (seq -> hash): a record rewritten with every later
 *    hash recomputed still disagrees with the first checkpoint after it, reported at that seq;
 *  - where it must end (`expectEnd`: the highest checkpoint, or what this process knows it
 *    stored): a truncated tail breaks at the first missing seq.
 * Pruned history (retention) starts at a signed prune checkpoint instead of genesis.
 */
import { and, eq, sql } from 'drizzle-orm';
import { rowsOf, type Store } from '../../store/factory.js';
import { auditLog } from '../../store/schema/control-plane.js';
import type { AuditRecord } from '../types.js';
import { GENESIS, verifyChain, type ChainAnchor, type VerifyResult } from './hash.js';
import { fromRow, loadTail } from './store.js';

/** Records read per page (one query, one JSON text: parsing 1000 takes 2-4 ms of the event loop). */
export const VERIFY_PAGE = 1000;
/**
 * Records hashed in one go before the event loop gets a turn: hashing a whole page of 1000 at
 * once held it 6-20 ms (measured on this 2-core machine), 250 about a quarter of that.
 */
const HASH_SLICE = 250;

export interface RangeOptions {
  /** First seq to verify (default 1). */
  from?: number;
  /** Last seq to verify (default: the end of the stored chain). */
  to?: number;
  /** Signed checkpoints in or around the range: seq -> hash. */
  checkpoints?: ReadonlyMap<number, string>;
  /** The chain is known to reach at least this seq (truncation below it is a break). */
  expectEnd?: number;
  /** A signed prune checkpoint: rows up to its seq were deleted on purpose. */
  pruned?: ChainAnchor;
  /** The link before `from`, when the caller already holds it (incremental verification). */
  anchor?: ChainAnchor;
  pageSize?: number;
}

export type BreakReason = 'hash' | 'link' | 'missing' | 'checkpoint' | 'truncated';

export interface RangeResult extends VerifyResult {
  /** Records checked. */
  checked: number;
  /** The first seq verified and the last seen (0 when none). */
  from: number;
  lastSeq: number;
  /** Hash of lastSeq (the next call's anchor for incremental verification). */
  lastHash: string;
  reason?: BreakReason;
}

/**
 * Pages of records with seq in [from, to], oldest first. A page comes back as one JSON text
 * (`json_agg`) parsed here, not as rows of 14 columns: the engine serializes one value and the
 * driver parses one, 14 against 35 µs of CPU a record on PGlite (measured over 50k records),
 * which is what the background verifier spends on every record this process writes. Exact:
 * strings, booleans and NULLs map one to one, `seq` is an integer under 2^53 and
 * `delegation_exp` a float8 printed shortest-exact, as the column-by-column read got them.
 */
export async function* readRange(
  store: Store,
  chain: string,
  from: number,
  to = Number.MAX_SAFE_INTEGER,
  pageSize = VERIFY_PAGE,
): AsyncGenerator<AuditRecord[]> {
  let next = from;
  while (next <= to) {
    const [row] = await rowsOf<{ page: string }>(
      store.db,
      sql`select coalesce(json_agg(x order by x.seq), '[]')::text as page from (
            select seq, time, action, subject, actor, task, service, allow, reason, rule,
              delegation_id as "delegationId", delegation_exp as "delegationExp", tool, args_digest as "argsDigest", session, prev_hash as "prevHash", hash
            from audit_log where chain = ${chain} and seq >= ${next} and seq <= ${to} order by seq limit ${pageSize}) x`,
    );
    const page = (JSON.parse(row!.page) as Parameters<typeof fromRow>[0][]).map(fromRow);
    if (page.length === 0) return;
    yield page;
    if (page.length < pageSize) return;
    next = page[page.length - 1]!.seq + 1;
  }
}

async function hashAt(store: Store, chain: string, seq: number): Promise<string | undefined> {
  const rows = await store.db
    .select({ hash: auditLog.hash })
    .from(auditLog)
    .where(and(eq(auditLog.chain, chain), eq(auditLog.seq, seq)))
    .limit(1);
  return rows[0]?.hash;
}

/** Classifies the first break verifyChain found in `page`. */
function reasonOf(page: readonly AuditRecord[], at: number, prev: ChainAnchor): BreakReason {
  const i = page.findIndex((r) => r.seq >= at);
  const r = page[i];
  if (!r || r.seq !== at) return 'missing';
  const before = i > 0 ? page[i - 1]!.hash : prev.hash;
  return r.prevHash !== before ? 'link' : 'hash';
}

/**
 * Verifies `[from, to]` of a stored chain. The record before `from` (or genesis, or the prune
 * anchor) anchors the first link; a range starting inside pruned history starts at the anchor.
 */
export async function verifyRange(store: Store, chain: string, o: RangeOptions = {}): Promise<RangeResult> {
  const pageSize = o.pageSize ?? VERIFY_PAGE;
  let from = Math.max(1, o.from ?? 1);
  const to = o.to ?? Number.MAX_SAFE_INTEGER;
  let anchor: ChainAnchor;
  if (o.pruned && from <= o.pruned.seq + 1) {
    anchor = o.pruned;
    from = o.pruned.seq + 1;
  } else if (o.anchor && o.anchor.seq === from - 1) {
    anchor = o.anchor;
  } else if (from === 1) {
    anchor = GENESIS;
  } else {
    const h = await hashAt(store, chain, from - 1);
    if (h === undefined) {
      // A range past the newest stored record is not a break (those seqs are not written yet),
      // unless a checkpoint or the caller says the chain reaches that far.
      const newest: ChainAnchor = (await loadTail(store, chain, 1))[0] ?? GENESIS;
      let end = o.expectEnd ?? 0;
      if (o.checkpoints) for (const c of o.checkpoints.keys()) end = Math.max(end, c);
      if (newest.seq < from - 1 && end < from - 1) return { ok: true, brokenAtSeq: -1, checked: 0, from, lastSeq: newest.seq, lastHash: newest.hash };
      return broken(from - 1, 'missing', 0, from, GENESIS);
    }
    anchor = { seq: from - 1, hash: h };
  }
  const start = from;
  let checked = 0;
  let prev = anchor;
  for await (const page of readRange(store, chain, from, to, pageSize)) {
    for (let at = 0; at < page.length; at += HASH_SLICE) {
      if (at > 0) await new Promise((r) => setImmediate(r));
      const slice = page.slice(at, at + HASH_SLICE);
      const v = verifyChain(slice, prev);
      if (!v.ok) {
        // The last record verified is the one before the break (or the slice's anchor).
        const i = slice.findIndex((r) => r.seq >= v.brokenAtSeq);
        const good = i > 0 ? { seq: slice[i - 1]!.seq, hash: slice[i - 1]!.hash } : prev;
        return broken(v.brokenAtSeq, reasonOf(slice, v.brokenAtSeq, prev), checked + i, start, good);
      }
      if (o.checkpoints?.size) {
        for (let i = 0; i < slice.length; i++) {
          const r = slice[i]!;
          const want = o.checkpoints.get(r.seq);
          if (want !== undefined && want !== r.hash)
            return broken(r.seq, 'checkpoint', checked + i, start, i > 0 ? { seq: slice[i - 1]!.seq, hash: slice[i - 1]!.hash } : prev);
        }
      }
      checked += slice.length;
      const last = slice[slice.length - 1]!;
      prev = { seq: last.seq, hash: last.hash };
    }
  }
  // Where the chain must reach (within the range): the highest checkpoint and whatever the
  // caller knows was stored. A `to` past the end is not a break: those seqs are not written yet.
  let end = Math.max(o.expectEnd ?? 0, 0);
  if (o.checkpoints) for (const s of o.checkpoints.keys()) if (s > end) end = s;
  end = Math.min(end, to);
  if (prev.seq < end) return broken(prev.seq + 1, prev.seq + 1 === start ? 'missing' : 'truncated', checked, start, prev);
  return { ok: true, brokenAtSeq: -1, checked, from: start, lastSeq: prev.seq, lastHash: prev.hash };
}

function broken(seq: number, reason: BreakReason, checked: number, from: number, prev: ChainAnchor): RangeResult {
  return { ok: false, brokenAtSeq: seq, reason, checked: Math.max(0, checked), from, lastSeq: prev.seq, lastHash: prev.hash };
}
