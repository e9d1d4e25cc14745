/**
 * The control plane's hash-chained audit log (SPEC 2.3, 8).
 *
 * `append` is synchronous: it normalizes the entry, links and hashes it in memory, keeps it in a
 * ring of the last `ringSize` (1000) records and queues it for the durable shipper, which writes
 * ordered batches to `audit_log` asynchronously. The hot path never waits on the database.
 *
 * Chain ids: every chain has an id (default `default`) and `audit_log` is keyed by (chain, seq).
 * Control-plane replicas sharing one PostgreSQL must each use their own id (the pod name is a
 * good one); two live writers on the same id are detected by the shipper (hash mismatch on an
 * existing (chain, seq)) and reported, never silently merged.
 *
 * Restart continuity: on open the last ringSize+1 rows of the chain are loaded; seq and prevHash
 * continue from the newest, the ring is refilled, and the row before the ring (if any) becomes
 * the verification anchor, so `verify()` stays ok across a restart and still detects a row that
 * was altered in the database while the process was down.
 */
import { logger } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import type { AuditEntry, AuditRecord } from '../types.js';
import { GENESIS, link, normalizeEntry, verifyChain, type ChainAnchor, type VerifyResult } from './hash.js';
import { createShipper, type ShipperStats } from './shipper.js';
import { insertBatch, loadTail } from './store.js';

export const RING_SIZE = 1000;
export const DEFAULT_RECENT = 200;

/** What producers of audit records (decision, proxy, approvals, registry) depend on. */
export interface AuditSink {
  /** Appends synchronously. Throws AuditBackpressureError when the store has been down too long. */
  append(entry: AuditEntry): AuditRecord;
}

/** What the management API reads. */
export interface AuditReader {
  /** Newest records, newest last; default 200, at most the ring size. */
  recent(limit?: number): AuditRecord[];
  verify(): VerifyResult;
}

export interface AuditChain extends AuditSink, AuditReader {
  readonly chainId: string;
  /** Resolves once everything appended so far is stored (rejects after timeoutMs if given). */
  flush(timeoutMs?: number): Promise<void>;
  /** Flushes (default bound 30 s, rejects if records could not be stored), then stops. */
  close(timeoutMs?: number): Promise<void>;
  stats(): ShipperStats & { lastSeq: number; chainId: string; durable: boolean };
}

export interface AuditChainOptions {
  /** Chain id; one per writer process sharing a database. Default `default`. */
  chain?: string;
  /** Clock (ms since epoch); default Date.now. */
  now?: () => number;
  ringSize?: number;
  /** Records per insert (default 500). */
  maxBatch?: number;
  /** Records allowed to wait for the store before append fails closed (default 100 000). */
  maxPending?: number;
  retryMinMs?: number;
  retryMaxMs?: number;
}

/**
 * Opens a chain on a store (durable, continues the stored chain) or, with `store` undefined,
 * a memory-only chain (tests, dry runs).
 */
export async function openAuditChain(store: Store | undefined, opts: AuditChainOptions = {}): Promise<AuditChain> {
  const chainId = opts.chain ?? 'default';
  if (!chainId || chainId.length > 200) throw new Error('audit chain id must be 1-200 characters');
  const now = opts.now ?? Date.now;
  const cap = opts.ringSize ?? RING_SIZE;
  if (!Number.isInteger(cap) || cap < 1) throw new Error('ringSize must be a positive integer');
  const log = logger('audit');

  // Ring buffer: `ring[(start + i) % cap]` for i < size, oldest first.
  const ring: AuditRecord[] = new Array(cap);
  let start = 0;
  let size = 0;
  let anchor: ChainAnchor = GENESIS;
  let last: ChainAnchor = GENESIS;

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

  function held(n = size): AuditRecord[] {
    const k = Math.max(0, Math.min(n, size));
    const out: AuditRecord[] = new Array(k);
    for (let i = 0; i < k; i++) out[i] = ring[(start + size - k + i) % cap]!;
    return out;
  }

  if (store) {
    const tail = await loadTail(store, chainId, cap + 1);
    if (tail.length > cap) {
      const a = tail.shift()!;
      anchor = { seq: a.seq, hash: a.hash };
    }
    for (const r of tail) hold(Object.freeze(r));
    const newest = tail[tail.length - 1];
    if (newest) last = { seq: newest.seq, hash: newest.hash };
    if (tail.length) log.info('audit chain resumed', { chain: chainId, seq: last.seq });
  }

  const shipper = store
    ? createShipper<AuditRecord>({
        write: (batch) => insertBatch(store, chainId, batch),
        maxBatch: opts.maxBatch,
        maxPending: opts.maxPending,
        retryMinMs: opts.retryMinMs,
        retryMaxMs: opts.retryMaxMs,
        log,
      })
    : undefined;
  let closed = false;
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

  return {
    chainId,
    append(entry) {
      if (closed) throw new Error('audit chain is closed');
      const rec = Object.freeze(link(normalizeEntry(entry), last, timeOf(now())));
      // Queue first: if the shipper refuses (backpressure), the chain is left untouched.
      shipper?.push(rec);
      last = { seq: rec.seq, hash: rec.hash };
      hold(rec);
      return rec;
    },
    recent(limit = DEFAULT_RECENT) {
      const n = Number.isFinite(limit) ? Math.floor(limit) : DEFAULT_RECENT;
      return held(Math.min(Math.max(n, 0), cap));
    },
    verify: () => verifyChain(held(), anchor),
    flush: (timeoutMs) => shipper?.flush(timeoutMs) ?? Promise.resolve(),
    async close(timeoutMs = 30_000) {
      if (closed) return;
      closed = true;
      await shipper?.close(timeoutMs);
    },
    stats: () => ({
      ...(shipper?.stats() ?? { pending: 0, shippedSeq: 0, failures: 0 }),
      lastSeq: last.seq,
      chainId,
      durable: !!shipper,
    }),
  };
}
