/**
 * The audit chain's options from its configuration slice (runtime/lib/settings.ts declares the
 * variables; validated at start, before any listener):
 *
 *   AUDIT_CHAIN_ID               explicit chain id; default: POD_NAME or the host name, made
 *                                unique per live writer (base, base-2, ...)
 *   AUDIT_DURABILITY             async (default) | sync: answer a decision only once its record is committed
 *   AUDIT_COMMIT_TIMEOUT_MS      sync: longest wait for a commit before the decision is denied (5000)
 *   AUDIT_MAX_PENDING            the async window: records allowed to wait for the store (100000)
 *   AUDIT_CHECKPOINT_EVERY       sign a checkpoint every N stored records (1000)
 *   AUDIT_CHECKPOINT_INTERVAL_MS ... or every T ms with new records (60000)
 *   AUDIT_VERIFY_INTERVAL_MS     background verification period (30000; 0 = off)
 *   AUDIT_VERIFY_BUDGET          most records one background pass reads (100000)
 *   AUDIT_RETENTION_DAYS         prune records older than this (unset = keep all)
 *   AUDIT_RETENTION_RECORDS      keep at most this many records per chain (unset = all)
 *   AUDIT_KEY_ENCRYPTION_KEY     seals the checkpoint signing key at rest (default IDP_KEY_ENCRYPTION_KEY)
 *   AUDIT_LEASE_TTL_MS           the chain lease's time-to-live (15000), renewed every third of it
 *   AUDIT_SPOOL_DIR              local spool for records the store cannot take (default
 *                                `<data folder>.audit-spool` beside it; `none` = no spool)
 */
import type { AuditConfig } from '../../lib/config.js';
import type { AuditChainOptions } from './chain.js';

export function auditOptions(a: AuditConfig): Omit<AuditChainOptions, 'now'> {
  return {
    ...(a.chain ? { chain: a.chain } : { chainBase: a.chainBase }),
    identity: a.chainBase,
    leaseTtlMs: a.leaseTtlMs,
    durability: a.durability,
    commitTimeoutMs: a.commitTimeoutMs,
    maxPending: a.maxPending,
    spoolDir: a.spoolDir,
    proof: {
      keySecret: a.keySecret,
      checkpointEvery: a.checkpointEvery,
      checkpointIntervalMs: a.checkpointIntervalMs,
      verifyIntervalMs: a.verifyIntervalMs,
      verifyBudget: a.verifyBudget,
      ...(a.retentionDays ? { retentionDays: a.retentionDays } : {}),
      ...(a.retentionRecords ? { retentionRecords: a.retentionRecords } : {}),
    },
  };
}
