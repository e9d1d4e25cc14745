/** Drizzle view of the audit-proof tables (migration 0010_audit_proof). `egress_holders` (0011) is reached with raw SQL only (control-plane/approvals/holders.ts). */
import { bigint, boolean, jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';

const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'string' });

export const auditCheckpoints = pgTable(
  'audit_checkpoints',
  {
    chain: text('chain').notNull(),
    seq: bigint('seq', { mode: 'number' }).notNull(),
    hash: text('hash').notNull(),
    time: text('time').notNull(),
    /** Compact JWS (EdDSA) over `{chainId, seq, hash, time[, prune]}`. */
    jws: text('jws').notNull(),
    kid: text('kid').notNull(),
    /** Taken at a retention boundary: rows up to seq were pruned on purpose. */
    prune: boolean('prune').notNull().default(false),
  },
  (t) => [primaryKey({ columns: [t.chain, t.seq] })],
);

export const auditKeys = pgTable('audit_keys', {
  id: text('id').primaryKey(),
  kid: text('kid').notNull(),
  publicJwk: jsonb('public_jwk').$type<Record<string, string>>().notNull(),
  privateKey: text('private_key').notNull(),
  salt: text('salt'),
  enc: text('enc').$type<'none' | 'aes-256-gcm'>().notNull(),
  createdAt: ts('created_at').notNull().defaultNow(),
});

export const auditLeases = pgTable('audit_leases', {
  chain: text('chain').primaryKey(),
  owner: text('owner').notNull(),
  expiresAt: ts('expires_at').notNull(),
  /** The holder process (lease.ts `Holder`, JSON; 0023): proves a restart's dead predecessor. */
  holder: text('holder'),
});
