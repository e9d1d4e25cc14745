/**
 * What makes a stored chain provable (issue 16), per chain writer:
 *  - checkpoints: every `checkpointEvery` stored records or `checkpointIntervalMs`, the newest
 *    stored record's `{chainId, seq, hash, time}` is signed and stored (checkpoint.ts);
 *  - a background verifier: each pass re-checks what was stored since the last one against its
 *    links and the signed checkpoints, then, every `fullVerifyEvery` passes, starts a sweep of the
 *    whole history from genesis that goes on over the following passes; a pass reads at most
 *    `verifyBudget` records (tail first), so it costs the same however large the store grows or
 *    however fast the writer goes (it lags instead). It exposes the verified seq and any break
 *    (metrics, /readyz detail);
 *  - retention (retention.ts) and the checks the routes serve (whole-store verify of any chain
 *    in the store, consistency with a kept checkpoint).
 */
import { errMsg, logger } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import type { AuditRecord } from '../types.js';
import type { AuditChain } from './chain.js';
import {
  latestCheckpoint,
  listCheckpoints,
  loadAuditSigner,
  storeCheckpoint,
  trustedCheckpoints,
  verifyCheckpoint,
  type AuditSigner,
  type Jwks,
  type SignedCheckpoint,
} from './checkpoint.js';
import { GENESIS, type ChainAnchor } from './hash.js';
import { pruneChain, type RetentionOptions } from './retention.js';
import { verifyRange, type RangeResult } from './verify.js';

const log = logger('audit.proof');

export interface ProofOptions extends RetentionOptions {
  /** AUDIT_KEY_ENCRYPTION_KEY: seals the signing key at rest. */
  keySecret?: string;
  /** Sign a checkpoint after this many stored records (default 1000). */
  checkpointEvery?: number;
  /** ... or after this long with new records (default 60 s). */
  checkpointIntervalMs?: number;
  /** Background verification period (default 30 s; 0 turns it off). */
  verifyIntervalMs?: number;
  /** Every this many passes, a sweep of the whole history starts (default 20). */
  fullVerifyEvery?: number;
  /**
   * Most records a background pass reads (default 100 000; a pass asked for in full has none).
   * Reading back and hashing a record costs ~25 us of CPU on PGlite (bench: 100k records).
   */
  verifyBudget?: number;
}

export interface ProofHealth {
  chain: string;
  /** Highest seq the background verifier has checked (0 before the first pass). */
  verifiedSeq: number;
  /** -1 while the stored chain verifies, else the first broken seq found. */
  brokenAtSeq: number;
  reason?: string;
  checkpointSeq: number;
  /** Highest pruned seq (0 when nothing was pruned). */
  prunedThrough: number;
  lastVerifiedAt?: string;
}

export interface ConsistencyResult extends RangeResult {
  checkpoint: { chainId: string; seq: number; hash: string; time: string };
}

export interface AuditProof {
  readonly chainId: string;
  readonly store: Store;
  jwks(): Jwks;
  latest(): SignedCheckpoint | undefined;
  /** Signs a checkpoint of the newest stored record now (undefined when nothing new). */
  checkpoint(opts?: { prune?: boolean; at?: ChainAnchor & { time?: string } }): Promise<SignedCheckpoint | undefined>;
  checkpoints(chain: string, o?: { from?: number; to?: number; limit?: number }): Promise<SignedCheckpoint[]>;
  /** Whole-store verification of a range of any chain in the store (default this one). */
  verify(o?: { chain?: string; from?: number; to?: number }): Promise<RangeResult>;
  /** Proves the stored chain extends a checkpoint a client kept (a JWS). Throws on a bad signature. */
  consistency(jws: string): Promise<ConsistencyResult>;
  /** One background verification pass (exposed for tests); `full`: the whole chain now, no budget. */
  verifyTick(full?: boolean): Promise<ProofHealth>;
  /** One retention pass: returns the number of records pruned. */
  prune(): Promise<number>;
  health(): ProofHealth;
  /** @internal the chain reports each stored batch. */
  onStored(last: AuditRecord, n: number): void;
  /** @internal */
  attach(chain: AuditChain): void;
  close(): Promise<void>;
}

export async function openProof(store: Store, chainId: string, o: ProofOptions, now: () => number): Promise<AuditProof> {
  const signer: AuditSigner = await loadAuditSigner(store, { secret: o.keySecret });
  const every = o.checkpointEvery ?? 1000;
  const intervalMs = o.checkpointIntervalMs ?? 60_000;
  const verifyMs = o.verifyIntervalMs ?? 30_000;
  const fullEvery = o.fullVerifyEvery ?? 20;
  const budget = o.verifyBudget ?? 100_000;
  let latest = await latestCheckpoint(store, chainId);
  let prunedAnchor = await latestCheckpoint(store, chainId, true);
  let lastStored: ChainAnchor & { time?: string } = latest ? { seq: latest.seq, hash: latest.hash } : GENESIS;
  let sinceCheckpoint = 0;
  let chain: AuditChain | undefined;
  let signing: Promise<unknown> = Promise.resolve();
  let closed = false;
  const health: ProofHealth = { chain: chainId, verifiedSeq: 0, brokenAtSeq: -1, checkpointSeq: latest?.seq ?? 0, prunedThrough: prunedAnchor?.seq ?? 0 };
  /** The tail: verified from genesis (or the prune anchor) up to here. */
  let verified: ChainAnchor = GENESIS;
  /** A sweep of the history in progress: verified again from genesis up to here. */
  let sweep: ChainAnchor | undefined;
  let passes = 0;
  const jwks = signer.jwks;

  const checkpoint: AuditProof['checkpoint'] = (opts = {}) => {
    const run = signing.then(async () => {
      const at = opts.at ?? lastStored;
      if (at.seq === 0 || (!opts.prune && latest && latest.seq >= at.seq)) return undefined;
      const cp = await signer.sign({
        chainId,
        seq: at.seq,
        hash: at.hash,
        time: new Date(now()).toISOString(),
        ...(opts.prune ? { prune: true as const } : {}),
      });
      await storeCheckpoint(store, cp);
      if (!latest || cp.seq >= latest.seq) latest = cp;
      if (cp.prune) prunedAnchor = cp;
      health.checkpointSeq = latest.seq;
      sinceCheckpoint = 0;
      return cp;
    });
    signing = run.catch(() => {});
    return run;
  };

  const background = (what: string, p: Promise<unknown>) => void p.catch((e: unknown) => log.warn(`audit ${what} failed`, { chain: chainId, err: errMsg(e) }));

  /** Signed checkpoints of a chain plus its signed prune anchor; unverifiable rows count as breaks. */
  const trusted = async (name: string) => {
    const t = await trustedCheckpoints(store, name, jwks);
    return { ...t, anchor: t.pruned ? { seq: t.pruned.seq, hash: t.pruned.hash } : undefined };
  };

  const verify: AuditProof['verify'] = async (q = {}) => {
    const name = q.chain ?? chainId;
    const t = await trusted(name);
    const r = await verifyRange(store, name, {
      from: q.from,
      to: q.to,
      checkpoints: t.hashes,
      pruned: t.anchor,
      expectEnd: name === chainId && chain ? chain.stats().shippedSeq : undefined,
    });
    const forged = t.forged.filter((s) => s >= r.from && (q.to === undefined || s <= q.to));
    if (forged.length && (r.ok || forged[0]! < r.brokenAtSeq)) return { ...r, ok: false, brokenAtSeq: forged[0]!, reason: 'checkpoint' };
    return r;
  };

  const verifyTick: AuditProof['verifyTick'] = async (full = false) => {
    passes++;
    if (full) [verified, sweep] = [GENESIS, undefined];
    const t = await trusted(chainId);
    const shipped = chain?.stats().shippedSeq;
    /** At most `max` records after `from` (and not past `to`), anchored at `from`. */
    const check = (from: ChainAnchor, max: number, to?: number) => {
      const start = Math.max(from.seq, t.anchor?.seq ?? 0);
      const last = Math.min(to ?? Infinity, start + max);
      return verifyRange(store, chainId, {
        from: from.seq + 1,
        ...(Number.isFinite(last) ? { to: last } : {}),
        anchor: from.seq > 0 ? from : undefined,
        checkpoints: t.hashes,
        pruned: t.anchor,
        expectEnd: to ?? shipped,
      });
    };
    let left = full ? Infinity : budget;
    // What was stored since the last pass. A range that breaks ends at the record before the
    // break (its lastSeq), so the next pass checks the break again.
    const tail = await check(verified, left);
    verified = { seq: tail.lastSeq, hash: tail.lastHash };
    left -= tail.checked;
    const ranges = [tail];
    // With what is left, the history again from genesis: a sweep starts every `fullEvery` passes.
    if (!full && tail.ok && left > 0 && (sweep || passes % fullEvery === 0)) {
      const from = sweep ?? GENESIS;
      const r = from.seq < verified.seq ? await check(from, left, verified.seq) : undefined;
      sweep = r && (!r.ok || r.lastSeq < verified.seq) ? { seq: r.lastSeq, hash: r.lastHash } : undefined;
      if (r) ranges.push(r);
    }
    const found = ranges.find((r) => !r.ok);
    const forged = t.forged[0];
    const before = health.brokenAtSeq;
    if (found) [health.brokenAtSeq, health.reason] = [found.brokenAtSeq, found.reason];
    else if (forged !== undefined) [health.brokenAtSeq, health.reason] = [forged, 'checkpoint'];
    else if (before === -1 || ranges.some((r) => r.from <= before && r.lastSeq >= before)) {
      // A break stands until a pass reads past it again and finds it whole (a row restored).
      health.brokenAtSeq = -1;
      delete health.reason;
    }
    if (found || forged !== undefined) log.error('audit chain verification failed', { chain: chainId, brokenAtSeq: health.brokenAtSeq, reason: health.reason });
    health.verifiedSeq = health.brokenAtSeq === -1 ? verified.seq : Math.max(0, health.brokenAtSeq - 1);
    health.prunedThrough = t.anchor?.seq ?? 0;
    health.lastVerifiedAt = new Date(now()).toISOString();
    return { ...health };
  };

  const prune = async (): Promise<number> => {
    const n = await pruneChain(store, chainId, o, now, jwks, (at) => checkpoint({ prune: true, at }));
    if (n > 0) health.prunedThrough = prunedAnchor?.seq ?? health.prunedThrough;
    return n;
  };

  const timers: NodeJS.Timeout[] = [];
  const every_ = (ms: number, f: () => void) => {
    if (ms > 0) {
      const t = setInterval(f, ms);
      t.unref();
      timers.push(t);
    }
  };
  every_(intervalMs, () => background('checkpoint', checkpoint()));
  // One background pass at a time: a pass still running when the next is due skips that one.
  let verifying = false;
  const pass = () => {
    if (verifying) return;
    verifying = true;
    background(
      'verification',
      verifyTick().finally(() => (verifying = false)),
    );
  };
  every_(verifyMs, pass);
  if (verifyMs > 0) {
    // A first pass soon after start, so /readyz and the metrics say something early (budgeted
    // like any: a large store is verified from genesis over the following passes).
    const first = setTimeout(pass, Math.min(verifyMs, 2000));
    first.unref();
    timers.push(first);
  }
  if (o.retentionDays || o.retentionRecords) every_(o.pruneIntervalMs ?? 60_000, () => background('retention', prune()));

  return {
    chainId,
    store,
    jwks: () => jwks,
    latest: () => latest,
    checkpoint,
    checkpoints: (name, q) => listCheckpoints(store, name, q),
    verify,
    async consistency(jws) {
      const cp = await verifyCheckpoint(jws, jwks);
      if (prunedAnchor && cp.seq < prunedAnchor.seq && cp.chainId === chainId) {
        throw new Error(
          `checkpoint seq ${cp.seq} is in pruned history (retained records start after seq ${prunedAnchor.seq}); verify it against the export of that range`,
        );
      }
      const t = await trusted(cp.chainId);
      const hashes = new Map(t.hashes);
      hashes.set(cp.seq, cp.hash);
      const r = await verifyRange(store, cp.chainId, { from: 1, checkpoints: hashes, pruned: t.anchor, expectEnd: cp.seq });
      return { ...r, checkpoint: { chainId: cp.chainId, seq: cp.seq, hash: cp.hash, time: cp.time } };
    },
    verifyTick,
    prune,
    health: () => ({ ...health }),
    onStored(last, n) {
      lastStored = { seq: last.seq, hash: last.hash };
      sinceCheckpoint += n;
      if (sinceCheckpoint >= every && !closed) background('checkpoint', checkpoint());
    },
    attach(c) {
      chain = c;
    },
    async close() {
      closed = true;
      for (const t of timers) clearInterval(t);
      // A final checkpoint at a clean stop: the state a client can compare the next start with.
      await checkpoint().catch((e: unknown) => log.warn('audit final checkpoint failed', { chain: chainId, err: errMsg(e) }));
      await signing;
    },
  };
}
