/** Drizzle view of the control-plane tables (migrations 0001_control_plane, 0008_registry_apply). */
import { bigint, boolean, doublePrecision, jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import type { Service } from '../../control-plane/types.js';

const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'string' });

export const registryServices = pgTable('registry_services', {
  name: text('name').primaryKey(),
  doc: jsonb('doc').$type<Service>().notNull(),
  rev: bigint('rev', { mode: 'number' }).notNull().default(1),
  registeredAt: ts('registered_at').notNull(),
  updatedAt: ts('updated_at').notNull(),
  /** The producer that owns the entry (migration 0008): `api`, `examples`, `folder:<path>`, ... */
  managedBy: text('managed_by').notNull().default('api'),
});

/** The registry's one monotonic version (single row, id = 1; migration 0008). */
export const registryState = pgTable('registry_state', {
  id: bigint('id', { mode: 'number' }).primaryKey(),
  version: bigint('version', { mode: 'number' }).notNull(),
  updatedAt: ts('updated_at').notNull().defaultNow(),
});

export const auditLog = pgTable(
  'audit_log',
  {
    chain: text('chain').notNull(),
    seq: bigint('seq', { mode: 'number' }).notNull(),
    /** The exact RFC 3339 string that was hashed. */
    time: text('time').notNull(),
    action: text('action').notNull(),
    subject: text('subject'),
    actor: text('actor'),
    task: text('task'),
    service: text('service'),
    allow: boolean('allow').notNull(),
    reason: text('reason').notNull(),
    rule: text('rule'),
    delegationId: text('delegation_id'),
    delegationExp: doublePrecision('delegation_exp'),
    /** Migration 0027: the MCP message's tool, the digest of its arguments, its session (`tool.call`). */
    tool: text('tool'),
    argsDigest: text('args_digest'),
    session: text('session'),
    prevHash: text('prev_hash').notNull(),
    hash: text('hash').notNull(),
    storedAt: ts('stored_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.chain, t.seq] })],
);
