/**
 * The control plane's hash-chained audit log (SPEC 2.3, 8).
 *
 * `append` is synchronous: it normalizes the entry, links and hashes it in memory, keeps it in a
 * ring of the last `ringSize` (1000) records and queues it for the durable shipper, which writes
 * ordered batches to `audit_log`. With `durability: 'sync'` a caller awaits `durable(record)`
 * before answering (group commit); with `async` (default) it does not, and a crash loses at most
 * the records not yet shipped (bounded by `maxPending`).
 *
 * Chains: `audit_log` is keyed by (chain, seq) and each chain has one live writer, enforced by a
 * lease (lease.ts). An explicit `chain` id waits for a dead holder's lease to lapse and refuses a
 * live one; `chainBase` (the pod or host name) takes the first free id of base, base-2, ...
 *
 * Served records: `served()` (GET /v1/audit) returns only stored records, so a seq once served
 * names that record forever: a crash can lose an unshipped record, never one that was shown.
 *
 * Restart continuity: the last ringSize+1 rows are loaded; seq and prevHash continue from the
 * newest (or from the newest signed checkpoint, if the stored tail was truncated below it: seq
 * numbers a checkpoint covered are never reused), the ring is refilled, and records spooled to
 * disk by a previous process are shipped first (spool.ts).
 */
import { logger } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import type { AuditEntry, AuditRecord } from '../types.js';
import { GENESIS, link, normalizeEntry, verifyChain, type ChainAnchor, type VerifyResult } from './hash.js';
import { acquireChainLease, acquireDefaultChain, type ChainLease } from './lease.js';
import { openProof, type AuditProof, type ProofOptions } from './proof.js';
import { createShipper, type ShipperStats } from './shipper.js';
import { openSpool, type Spool } from './spool.js';
import { insertBatch, loadTail } from './store.js';

export const RING_SIZE = 1000;
export const DEFAULT_RECENT = 200;

export type Durability = 'async' | 'sync';

/** What producers of audit records (decision, proxy, approvals, registry) depend on. */
export interface AuditSink {
  /** Appends synchronously. Throws AuditBackpressureError when the store has been down too long. */
  append(entry: AuditEntry): AuditRecord;
  /**
   * undefined when the caller need not wait (async durability, memory chain, already stored),
   * else a promise resolving once the record is committed; rejects (AuditNotCommittedError)
   * when it cannot be committed in time: the caller must then not answer an allow.
   */
  durable?(record: AuditRecord): Promise<void> | undefined;
}

/** What the management API reads. */
export interface AuditReader {
  /** Newest records in the ring, newest last; default 200, at most the ring size. */
  recent(limit?: number): AuditRecord[];
  verify(): VerifyResult;
}

export interface AuditChain extends AuditSink, AuditReader {
  readonly chainId: string;
  readonly durability: Durability;
  /** Stored records only (what GET /v1/audit serves), newest last. */
  served(limit?: number): AuditRecord[];
  /** The store-backed proofs (whole-store verify, checkpoints, export, retention); absent in memory. */
  readonly proof?: AuditProof;
  /** Resolves once everything appended so far is stored (rejects after timeoutMs if given). */
  flush(timeoutMs?: number): Promise<void>;
  /** Flushes (default bound 30 s; what cannot be stored is spooled to disk), then stops. */
  close(timeoutMs?: number): Promise<void>;
  stats(): ShipperStats & {
    lastSeq: number;
    chainId: string;
    durable: boolean;
    durability: Durability;
    refused: number;
    spooled: number;
    /** False once the chain's lease was lost to another writer, or the chain closed: appends fail. */
    writable: boolean;
  };
}

export interface AuditChainOptions {
  /** Explicit chain id (AUDIT_CHAIN_ID): refused if another live writer holds it. */
  chain?: string;
  /** Default id base (pod or host name): the first free of base, base-2, ... Ignored when `chain` is set. */
  chainBase?: string;
  /**
   * This process's identity (pod or host name) recorded with its lease: a restart under the same
   * identity takes back a chain its own dead predecessor holds at once (predecessor.ts).
   */
  identity?: string;
  /** Clock (ms since epoch); default Date.now. */
  now?: () => number;
  ringSize?: number;
  /** Records per insert (default 500). */
  maxBatch?: number;
  /** Records allowed to wait for the store before append fails closed (default 100 000). */
  maxPending?: number;
  retryMinMs?: number;
  retryMaxMs?: number;
  durability?: Durability;
  /** sync: how long `durable` waits for a commit before rejecting (default 5000 ms). */
  commitTimeoutMs?: number;
  /** Lease time-to-live (default 15 s); `false` skips the lease (tests of second-writer detection). */
  leaseTtlMs?: number | false;
  /** Folder for the spool file (records the store could not take at exit or during an outage). */
  spoolDir?: string;
  /** Checkpoints, background verification, retention. */
  proof?: ProofOptions;
}

/**
 * Opens a chain on a store (durable, continues the stored chain) or, with `store` undefined,
 * a memory-only chain (tests, dry runs).
 */
export async function openAuditChain(store: Store | undefined, opts: AuditChainOptions = {}): Promise<AuditChain> {
  const now = opts.now ?? Date.now;
  const cap = opts.ringSize ?? RING_SIZE;
  if (!Number.isInteger(cap) || cap < 1) throw new Error('ringSize must be a positive integer');
  const durability: Durability = opts.durability ?? 'async';
  const log = logger('audit');
  for (const id of [opts.chain, opts.chainBase]) {
    if (id !== undefined && (!id || id.length > 200)) throw new Error('audit chain id must be 1-200 characters');
  }

  let lease: ChainLease | undefined;
  let chainId = opts.chain ?? (store ? undefined : opts.chainBase) ?? 'default';
  if (store && opts.leaseTtlMs !== false) {
    const ttlMs = opts.leaseTtlMs ?? undefined;
    const identity = opts.identity ?? opts.chainBase;
    lease =
      opts.chain || !opts.chainBase
        ? await acquireChainLease(store, chainId, { ttlMs, identity, waitMs: (ttlMs ?? 15_000) + 1000 })
        : await acquireDefaultChain(store, opts.chainBase, { ttlMs, identity });
    chainId = lease.chain;
  } else if (store && opts.chainBase && !opts.chain) {
    chainId = opts.chainBase;
  }

  // Ring buffer: `ring[(start + i) % cap]` for i < size, oldest first.
  const ring: AuditRecord[] = new Array(cap);
  let start = 0;
  let size = 0;
  let anchor: ChainAnchor = GENESIS;
  let last: ChainAnchor = GENESIS;
  /** Highest seq known stored (served() shows nothing above it). */
  let storedSeq = 0;

  function hold(r: AuditRecord): void {
    if (size < cap) {
      ring[(start + size) % cap] = r;
      size++;
    } else {
      const evicted = ring[start]!;
      anchor = { seq: evicted.seq, hash: evicted.hash };
      ring[start] = r;
      start = (start + 1) % cap;
    }
  }

  function held(n = size, ceiling = Number.MAX_SAFE_INTEGER): AuditRecord[] {
    let end = size;
    while (end > 0 && ring[(start + end - 1) % cap]!.seq > ceiling) end--;
    const k = Math.max(0, Math.min(n, end));
    const out: AuditRecord[] = new Array(k);
    for (let i = 0; i < k; i++) out[i] = ring[(start + end - k + i) % cap]!;
    return out;
  }

  let spool: Spool | undefined;
  let proof: AuditProof | undefined;
  try {
    if (store) {
      spool = opts.spoolDir ? openSpool(opts.spoolDir, chainId) : undefined;
      const tail = await loadTail(store, chainId, cap + 1);
      let newest: ChainAnchor = tail.length ? { seq: tail[tail.length - 1]!.seq, hash: tail[tail.length - 1]!.hash } : GENESIS;
      // Records a previous process could not store (an outage at exit) go first.
      const replay = spool ? spool.pending(newest) : [];
      if (replay.length) {
        for (let i = 0; i < replay.length; i += 500) await insertBatch(store, chainId, replay.slice(i, i + 500));
        tail.push(...replay);
        newest = { seq: replay[replay.length - 1]!.seq, hash: replay[replay.length - 1]!.hash };
        log.info('audit spool shipped', { chain: chainId, records: replay.length, seq: newest.seq });
      }
      spool?.clear();
      const keep = tail.slice(-(cap + 1));
      if (keep.length > cap) {
        const a = keep.shift()!;
        anchor = { seq: a.seq, hash: a.hash };
      }
      for (const r of keep) hold(Object.freeze(r));
      last = newest;
      proof = await openProof(store, chainId, opts.proof ?? {}, now);
      // A tail truncated below a signed checkpoint: continue after the checkpoint, never reuse
      // the seqs it covered (verification reports the gap at the first missing seq).
      const cp = proof.latest();
      if (cp && cp.seq > last.seq) {
        log.error('stored audit chain ends before its newest signed checkpoint (truncated); continuing after the checkpoint', {
          chain: chainId,
          storedSeq: last.seq,
          checkpointSeq: cp.seq,
        });
        last = { seq: cp.seq, hash: cp.hash };
        anchor = last;
        size = 0;
      }
      storedSeq = newest.seq;
      if (tail.length) log.info('audit chain resumed', { chain: chainId, seq: last.seq });
    }
  } catch (e) {
    await proof?.close();
    await lease?.release();
    throw e;
  }

  const shipper = store
    ? createShipper<AuditRecord>({
        write: (batch) => insertBatch(store, chainId, batch),
        maxBatch: opts.maxBatch,
        maxPending: opts.maxPending,
        retryMinMs: opts.retryMinMs,
        retryMaxMs: opts.retryMaxMs,
        commitTimeoutMs: opts.commitTimeoutMs,
        onStored: (batch) => {
          const l = batch[batch.length - 1]!;
          storedSeq = l.seq;
          proof?.onStored(l, batch.length);
          // Caught up after an outage: what the spool holds is stored now.
          if (spool?.count() && l.seq === last.seq) spool.clear();
        },
        onFailure: spool ? (pending) => spool!.write(pending) : undefined,
        log,
      })
    : undefined;
  let closed = false;
  // Decisions denied because the store was down too long: recorded as one summary denial once
  // a record fits again (the record itself could not be queued).
  let refused = 0;
  let refusedSince = '';
  // Records appended in the same millisecond share one ISO timestamp string.
  let isoMs = NaN;
  let iso = '';
  const timeOf = (ms: number): string => {
    if (ms !== isoMs) {
      iso = new Date(ms).toISOString();
      isoMs = ms;
    }
    return iso;
  };

  function push(entry: AuditEntry): AuditRecord {
    const rec = Object.freeze(link(entry, last, timeOf(now())));
    // Queue first: if the shipper refuses (backpressure), the chain is left untouched.
    shipper?.push(rec);
    last = { seq: rec.seq, hash: rec.hash };
    hold(rec);
    return rec;
  }

  const chain: AuditChain = {
    chainId,
    durability,
    proof,
    append(entry) {
      if (closed) throw new Error('audit chain is closed');
      if (lease && !lease.held()) throw new Error(`audit chain ${chainId} lease lost to another writer`);
      const e = normalizeEntry(entry);
      try {
        if (refused > 0) {
          push({
            action: 'authz',
            allow: false,
            reason: `audit backpressure: ${refused} decisions denied unrecorded since ${refusedSince} (audit store unavailable)`,
          });
          refused = 0;
        }
        return push(e);
      } catch (err) {
        if (refused++ === 0) refusedSince = timeOf(now());
        throw err;
      }
    },
    durable(rec) {
      if (durability !== 'sync' || !shipper) return undefined;
      return shipper.whenStored(rec.seq);
    },
    recent(limit = DEFAULT_RECENT) {
      const n = Number.isFinite(limit) ? Math.floor(limit) : DEFAULT_RECENT;
      return held(Math.min(Math.max(n, 0), cap));
    },
    served(limit = DEFAULT_RECENT) {
      const n = Number.isFinite(limit) ? Math.floor(limit) : DEFAULT_RECENT;
      return held(Math.min(Math.max(n, 0), cap), shipper ? storedSeq : Number.MAX_SAFE_INTEGER);
    },
    verify: () => verifyChain(held(), anchor),
    flush: (timeoutMs) => shipper?.flush(timeoutMs) ?? Promise.resolve(),
    async close(timeoutMs = 30_000) {
      if (closed) return;
      closed = true;
      try {
        await shipper?.close(timeoutMs);
      } catch (e) {
        // The store is unreachable: keep what it could not take on disk for the next start.
        const left = shipper?.unstored() ?? [];
        if (spool && left.length) {
          spool.write(left);
          log.error('audit store unreachable at close; records spooled to disk', { chain: chainId, records: left.length, file: spool.file });
        } else {
          throw e;
        }
      } finally {
        await proof?.close();
        await lease?.release();
      }
    },
    stats: () => ({
      ...(shipper?.stats() ?? { pending: 0, shippedSeq: 0, failures: 0, lagMs: 0, writes: 0 }),
      lastSeq: last.seq,
      chainId,
      durable: !!shipper,
      durability,
      refused,
      spooled: spool?.count() ?? 0,
      writable: !closed && (!lease || lease.held()),
    }),
  };
  proof?.attach(chain);
  return chain;
}
