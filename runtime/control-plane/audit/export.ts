/**
 * Export of a chain range as JSON lines, verifiable offline (cold storage), and the offline
 * verifier the CLI uses (the same check whether the lines come from a file or from the server).
 *
 *   {"type":"header","chainId":..,"from":..,"to":..,"jwks":{keys:[..]},"exportedAt":..}
 *   {"type":"anchor","seq":from-1,"hash":..,"jws"?:..}        the link before `from` (signed when it is a prune checkpoint)
 *   {"type":"checkpoint",...SignedCheckpoint}                  every checkpoint with seq in [from-1, to]
 *   {"type":"record",...AuditRecord}                           the records, oldest first
 *
 * Verification: every record links to the one before (from genesis, or the anchor) and its hash
 * recomputes; every checkpoint's signature verifies against the pinned key set and its hash
 * equals the record's at its seq; a kept checkpoint must be reached (else: truncated) and match.
 * Records up to the highest matching signed checkpoint are proven; the ones after it are linked.
 */
import type { Store } from '../../store/factory.js';
import type { AuditRecord } from '../types.js';
import { listCheckpoints, verifyCheckpoint, type Jwks, type SignedCheckpoint } from './checkpoint.js';
import { GENESIS, hashRecord, type ChainAnchor } from './hash.js';
import type { BreakReason } from './verify.js';
import { readRange } from './verify.js';

export interface ExportSource {
  store: Store;
  jwks: Jwks;
  /** The chain's signed prune anchor, if any (where retained history starts). */
  pruned?: SignedCheckpoint;
}

/** JSON lines of [from, to] of a chain (streamed page by page). */
export async function* exportLines(src: ExportSource, chainId: string, from = 1, to = Number.MAX_SAFE_INTEGER, now = Date.now): AsyncGenerator<string> {
  if (src.pruned && from <= src.pruned.seq) from = src.pruned.seq + 1;
  yield JSON.stringify({
    type: 'header',
    chainId,
    from,
    to: to === Number.MAX_SAFE_INTEGER ? null : to,
    jwks: src.jwks,
    exportedAt: new Date(now()).toISOString(),
  });
  if (from > 1) {
    if (src.pruned && src.pruned.seq === from - 1) yield JSON.stringify({ type: 'anchor', seq: src.pruned.seq, hash: src.pruned.hash, jws: src.pruned.jws });
    else {
      for await (const page of readRange(src.store, chainId, from - 1, from - 1, 1)) {
        for (const r of page) yield JSON.stringify({ type: 'anchor', seq: r.seq, hash: r.hash });
      }
    }
  }
  for (const cp of await listCheckpoints(src.store, chainId, { from: from - 1, to })) yield JSON.stringify({ type: 'checkpoint', ...cp });
  for await (const page of readRange(src.store, chainId, from, to)) {
    for (const r of page) yield JSON.stringify({ type: 'record', ...r });
  }
}

export interface OfflineResult {
  ok: boolean;
  brokenAtSeq: number;
  reason?: BreakReason | 'signature' | 'format';
  error?: string;
  chainId?: string;
  checked: number;
  from: number;
  lastSeq: number;
  /** Highest seq proven by a signed checkpoint (records up to it cannot have been rewritten). */
  provenThrough: number;
}

export interface OfflineOptions {
  /** The key set to trust (pinned); default the export's own header (checked by kid thumbprint). */
  jwks?: Jwks;
  /** A checkpoint the verifier kept: the log must extend it. */
  checkpoint?: string;
}

/** Verifies exported JSON lines (from a file or GET /v1/audit/export). Bounded memory. */
export async function verifyExport(lines: AsyncIterable<string>, o: OfflineOptions = {}): Promise<OfflineResult> {
  let jwks = o.jwks;
  let chainId: string | undefined;
  let from = 1;
  let prev: ChainAnchor = GENESIS;
  const cps = new Map<number, string>();
  let kept: SignedCheckpoint | undefined;
  let checked = 0;
  let proven = 0;
  const res = (ok: boolean, brokenAtSeq: number, extra: Partial<OfflineResult> = {}): OfflineResult => ({
    ok,
    brokenAtSeq,
    chainId,
    checked,
    from,
    lastSeq: prev.seq,
    provenThrough: proven,
    ...extra,
  });
  for await (const line of lines) {
    if (!line.trim()) continue;
    let m: Record<string, unknown> & { type?: string };
    try {
      m = JSON.parse(line) as typeof m;
    } catch {
      return res(false, prev.seq + 1, { reason: 'format', error: 'a line is not JSON' });
    }
    if (m.type === 'header') {
      chainId = String(m.chainId);
      from = Number(m.from) || 1;
      jwks ??= m.jwks as Jwks;
      if (o.checkpoint) {
        try {
          kept = await verifyCheckpoint(o.checkpoint, jwks);
        } catch (e) {
          return res(false, -1, { reason: 'signature', error: `kept checkpoint: ${(e as Error).message}` });
        }
        if (kept.chainId !== chainId)
          return res(false, -1, { reason: 'format', error: `kept checkpoint is of chain ${kept.chainId}, the export of ${chainId}` });
        if (kept.seq < from - 1)
          return res(false, -1, { reason: 'format', error: `kept checkpoint seq ${kept.seq} precedes the exported range (from ${from})` });
        cps.set(kept.seq, kept.hash);
      }
    } else if (m.type === 'anchor') {
      prev = { seq: Number(m.seq), hash: String(m.hash) };
      // A signed prune anchor proves where retained history starts.
      if (typeof m.jws === 'string') {
        const a = await verifyCheckpoint(m.jws, jwks ?? { keys: [] }).catch(() => undefined);
        if (a?.prune && a.seq === prev.seq && a.hash === prev.hash) proven = prev.seq;
      }
    } else if (m.type === 'checkpoint') {
      try {
        const c = await verifyCheckpoint(String(m.jws), jwks ?? { keys: [] });
        if (c.chainId !== chainId) throw new Error('chain differs');
        const had = cps.get(c.seq);
        if (had !== undefined && had !== c.hash) return res(false, c.seq, { reason: 'checkpoint', error: 'two signed checkpoints disagree at this seq' });
        cps.set(c.seq, c.hash);
      } catch (e) {
        return res(false, Number(m.seq) || -1, { reason: 'signature', error: `checkpoint: ${(e as Error).message}` });
      }
    } else if (m.type === 'record') {
      const { type: _t, ...rec } = m;
      const r = rec as unknown as AuditRecord;
      if (r.seq !== prev.seq + 1) return res(false, prev.seq + 1, { reason: 'missing' });
      if (r.prevHash !== prev.hash) return res(false, r.seq, { reason: 'link' });
      if (hashRecord(r) !== r.hash) return res(false, r.seq, { reason: 'hash' });
      const want = cps.get(r.seq);
      if (want !== undefined) {
        if (want !== r.hash) return res(false, r.seq, { reason: 'checkpoint' });
        proven = r.seq;
      }
      prev = { seq: r.seq, hash: r.hash };
      checked++;
    }
  }
  let end = 0;
  for (const s of cps.keys()) end = Math.max(end, s);
  if (prev.seq < end) return res(false, prev.seq + 1, { reason: 'truncated' });
  return res(true, -1);
}
