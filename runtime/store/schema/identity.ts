/** Drizzle view of the identity-authority tables (migration 0002_identity). */
import { bigint, bigserial, index, integer, jsonb, pgTable, primaryKey, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';

const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'string' });

export interface Capability {
  action: string;
  resource: string;
  constraints?: Record<string, unknown>;
}

export const issuerKeys = pgTable('identity_issuer_keys', {
  id: text('id').primaryKey(),
  publicKey: text('public_key').notNull(),
  privateKey: text('private_key').notNull(),
  enc: text('enc').$type<'none' | 'aes-256-gcm'>().notNull(),
  salt: text('salt'),
  createdAt: ts('created_at').notNull().defaultNow(),
});

export const agents = pgTable(
  'identity_agents',
  {
    tenantId: text('tenant_id').notNull().default('default'),
    name: text('name').notNull(),
    role: text('role').notNull(),
    capabilities: jsonb('capabilities').$type<Capability[]>().notNull(),
    did: text('did'),
    publicKey: text('public_key'),
    membershipJti: text('membership_jti'),
    membershipExp: bigint('membership_exp', { mode: 'number' }),
    provisionedAt: ts('provisioned_at'),
    createdAt: ts('created_at').notNull(),
    updatedAt: ts('updated_at').notNull(),
    /** The producer whose apply manages it (migration 0022); null: registered through the API. */
    managedBy: text('managed_by'),
    /** Set when its producer stopped declaring it: credentials revoked, row and history kept. */
    retiredAt: ts('retired_at'),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.name] }), uniqueIndex('identity_agents_did').on(t.did)],
);

export const credentials = pgTable(
  'identity_credentials',
  {
    jti: text('jti').primaryKey(),
    tenantId: text('tenant_id').notNull().default('default'),
    kind: text('kind').$type<'membership' | 'capability' | 'delegation'>().notNull(),
    subjectDid: text('subject_did').notNull(),
    agentName: text('agent_name').notNull(),
    delegationId: text('delegation_id'),
    issuedAt: ts('issued_at').notNull(),
    exp: bigint('exp', { mode: 'number' }).notNull(),
  },
  (t) => [index('identity_credentials_agent').on(t.tenantId, t.agentName)],
);

export const delegations = pgTable(
  'identity_delegations',
  {
    id: text('id').primaryKey(),
    seq: bigserial('seq', { mode: 'number' }),
    tenantId: text('tenant_id').notNull().default('default'),
    status: text('status').$type<'pending' | 'approved' | 'denied'>().notNull(),
    actorName: text('actor_name').notNull(),
    actorDid: text('actor_did'),
    task: text('task').notNull(),
    action: text('action').notNull(),
    resource: text('resource').notNull(),
    reason: text('reason').notNull(),
    ttlSeconds: integer('ttl_seconds').notNull(),
    requestedAt: ts('requested_at').notNull(),
    approver: text('approver'),
    approvedAt: ts('approved_at'),
    deniedAt: ts('denied_at'),
    denyReason: text('deny_reason'),
    vcJti: text('vc_jti'),
    vc: text('vc'),
    notAfter: bigint('not_after', { mode: 'number' }),
  },
  (t) => [index('identity_delegations_lookup').on(t.tenantId, t.actorName, t.task, t.action, t.status)],
);

export const revocations = pgTable(
  'identity_revocations',
  {
    jti: text('jti').primaryKey(),
    seq: bigserial('seq', { mode: 'number' }),
    tenantId: text('tenant_id').notNull().default('default'),
    list: text('list').notNull().default('default'),
    revokedAt: ts('revoked_at').notNull(),
  },
  (t) => [index('identity_revocations_list').on(t.list, t.seq)],
);
