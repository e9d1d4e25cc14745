/**
 * Audit metrics and health, registered on the control plane's prom-client registry:
 *   writ_audit_last_seq, writ_audit_stored_seq, writ_audit_backlog_records (waiting for the
 *   store), writ_audit_shipping_lag_seconds (age of the oldest of them), writ_audit_spooled_records,
 *   writ_audit_backpressure_denials (denied since the last record fitted), writ_audit_verified_seq,
 *   writ_audit_broken_seq (-1 while the stored chain verifies), writ_audit_checkpoint_seq.
 * All carry a `chain` label (one chain per control plane).
 */
import { Gauge, type Registry } from 'prom-client';
import { metric } from '../../lib/brand.js';
import type { AuditChain } from './chain.js';

export interface AuditHealth {
  chain: string;
  durability: string;
  lastSeq: number;
  storedSeq: number;
  backlog: number;
  lagMs: number;
  failures: number;
  lastError?: string;
  spooled: number;
  verifiedSeq?: number;
  brokenAtSeq?: number;
  reason?: string;
  checkpointSeq?: number;
  prunedThrough?: number;
}

/** The /readyz detail: shipping state, and the background verifier's last word. */
export function auditHealth(chain: AuditChain): AuditHealth {
  const s = chain.stats();
  const h: AuditHealth = {
    chain: s.chainId,
    durability: s.durability,
    lastSeq: s.lastSeq,
    storedSeq: s.shippedSeq,
    backlog: s.pending,
    lagMs: s.lagMs,
    failures: s.failures,
    spooled: s.spooled,
  };
  if (s.lastError) h.lastError = s.lastError;
  const p = chain.proof?.health();
  if (p) {
    h.verifiedSeq = p.verifiedSeq;
    h.brokenAtSeq = p.brokenAtSeq;
    if (p.reason) h.reason = p.reason;
    h.checkpointSeq = p.checkpointSeq;
    h.prunedThrough = p.prunedThrough;
  }
  return h;
}

/**
 * Why this chain cannot record a decision now (readiness: a control plane that cannot audit
 * denies every call), or undefined: closed or lease lost, the async window full (appends
 * refused), or sync durability with the store failing (commits time out, decisions deny).
 */
export function auditUnable(chain: AuditChain): string | undefined {
  const s = chain.stats();
  if (!s.writable) return `audit chain ${s.chainId} is not writable (closed, or its lease lost to another writer)`;
  if (s.refused > 0) return `audit store unavailable: ${s.refused} decisions denied for audit backpressure`;
  if (s.durability === 'sync' && s.failures > 0) return `audit store unavailable (sync durability): ${s.lastError ?? 'writes failing'}`;
  return undefined;
}

/** Registers the audit gauges (read at scrape time) on `registry`. */
export function registerAuditMetrics(registry: Registry, chain: AuditChain): void {
  const gauge = (name: string, help: string, read: (h: AuditHealth) => number | undefined) => {
    registry.removeSingleMetric(metric(name));
    const g: Gauge<'chain'> = new Gauge({
      name: metric(name),
      help,
      labelNames: ['chain'] as const,
      registers: [registry],
      collect() {
        const v = read(auditHealth(chain));
        if (v !== undefined) g.set({ chain: chain.chainId }, v);
      },
    });
  };
  gauge('audit_last_seq', "Newest seq appended to this control plane's audit chain.", (h) => h.lastSeq);
  gauge('audit_stored_seq', 'Newest seq this process stored (0 before its first write).', (h) => h.storedSeq);
  gauge('audit_backlog_records', 'Audit records waiting to be stored.', (h) => h.backlog);
  gauge('audit_shipping_lag_seconds', 'Age of the oldest audit record waiting to be stored.', (h) => h.lagMs / 1000);
  gauge('audit_spooled_records', 'Audit records written to the local spool during a store outage.', (h) => h.spooled);
  gauge('audit_backpressure_denials', 'Decisions denied for audit backpressure not yet summarised in a record.', () => chain.stats().refused);
  gauge('audit_verified_seq', 'Highest seq the background verifier checked against links and signed checkpoints.', (h) => h.verifiedSeq);
  gauge('audit_broken_seq', 'First broken seq the background verifier found; -1 while the stored chain verifies.', (h) => h.brokenAtSeq);
  gauge('audit_checkpoint_seq', 'Seq of the newest signed checkpoint.', (h) => h.checkpointSeq);
}
