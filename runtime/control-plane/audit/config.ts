/**
 * The audit chain's settings from the environment (validated at start, before any listener):
 *
 *   AUDIT_CHAIN_ID               explicit chain id; default: POD_NAME or the host name, made
 *                                unique per live writer (base, base-2, ...)
 *   AUDIT_LEASE_TTL_MS           the chain lease's time-to-live (15000), renewed every third of it
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
 *   AUDIT_SPOOL_DIR              local spool for records the store cannot take (default
 *                                `<data folder>.audit-spool` beside it; `none` = no spool)
 */
import { hostname } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { envName } from '../../lib/brand.js';
import { int, oneOf, optional, positiveInt, type Env } from '../../lib/config.js';
import type { AuditChainOptions } from './chain.js';

function nonNegative(env: Env, name: string, fallback: number): number {
  const n = int(env, name, fallback);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got ${JSON.stringify(env[name])}`);
  return n;
}

/**
 * Where the spool goes by default: beside the PGlite data folder and named after it
 * (`.data/writ.audit-spool`), so two data folders in one parent (every `mktemp -d`) never share
 * one spool file.
 */
export function defaultSpoolDir(env: Env): string | undefined {
  const v = optional(env, 'AUDIT_SPOOL_DIR');
  if (v === 'none') return undefined;
  if (v) return v;
  const data = resolve(optional(env, envName('DATA_DIR')) ?? optional(env, 'REGISTRY_DATA_DIR') ?? '.data/writ');
  return join(dirname(data), `${basename(data)}.audit-spool`);
}

export function auditOptionsFromEnv(env: Env): Omit<AuditChainOptions, 'now'> {
  const explicit = optional(env, 'AUDIT_CHAIN_ID');
  const base = optional(env, envName('POD_NAME')) ?? optional(env, 'POD_NAME') ?? (hostname() || 'control-plane');
  const days = nonNegative(env, 'AUDIT_RETENTION_DAYS', 0);
  const records = nonNegative(env, 'AUDIT_RETENTION_RECORDS', 0);
  return {
    ...(explicit ? { chain: explicit } : { chainBase: base }),
    identity: base,
    leaseTtlMs: positiveInt(env, 'AUDIT_LEASE_TTL_MS', 15_000),
    durability: oneOf(env, 'AUDIT_DURABILITY', ['async', 'sync'] as const, 'async'),
    commitTimeoutMs: positiveInt(env, 'AUDIT_COMMIT_TIMEOUT_MS', 5000),
    maxPending: positiveInt(env, 'AUDIT_MAX_PENDING', 100_000),
    spoolDir: defaultSpoolDir(env),
    proof: {
      keySecret: optional(env, 'AUDIT_KEY_ENCRYPTION_KEY') ?? optional(env, 'IDP_KEY_ENCRYPTION_KEY'),
      checkpointEvery: positiveInt(env, 'AUDIT_CHECKPOINT_EVERY', 1000),
      checkpointIntervalMs: positiveInt(env, 'AUDIT_CHECKPOINT_INTERVAL_MS', 60_000),
      verifyIntervalMs: nonNegative(env, 'AUDIT_VERIFY_INTERVAL_MS', 30_000),
      verifyBudget: positiveInt(env, 'AUDIT_VERIFY_BUDGET', 100_000),
      ...(days ? { retentionDays: days } : {}),
      ...(records ? { retentionRecords: records } : {}),
    },
  };
}
