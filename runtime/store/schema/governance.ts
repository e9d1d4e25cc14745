/** Drizzle view of the governance tables (migration 0004_governance). */
import { bigint, bigserial, boolean, index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'string' });

export interface HistoryEntry {
  at: string;
  action: string;
  by: string;
  detail: string | null;
}

export const governedAgents = pgTable(
  'governance_agents',
  {
    agentName: text('agent_name').primaryKey(),
    seq: bigserial('seq', { mode: 'number' }),
    tenantId: text('tenant_id').notNull(),
    ownerType: text('owner_type').$type<'employee' | 'team' | 'service_account_owner_group'>().notNull(),
    ownerRef: text('owner_ref').notNull(),
    teamRef: text('team_ref'),
    businessSponsor: text('business_sponsor'),
    riskTier: text('risk_tier').$type<'low' | 'medium' | 'high' | 'critical'>(),
    approvedRuntime: text('approved_runtime'),
    status: text('status').$type<'draft' | 'pending_approval' | 'approved' | 'active' | 'suspended' | 'quarantined' | 'retired'>().notNull(),
    createdBy: text('created_by'),
    /** The producer whose apply manages it (migration 0021); null: registered through the API. */
    managedBy: text('managed_by'),
    createdAt: ts('created_at').notNull(),
    updatedAt: ts('updated_at').notNull(),
    lastReviewedAt: ts('last_reviewed_at'),
    history: jsonb('history').$type<HistoryEntry[]>().notNull(),
  },
  (t) => [index('governance_agents_tenant').on(t.tenantId, t.status)],
);

export const authorityDelegations = pgTable(
  'governance_delegations',
  {
    delegationId: text('delegation_id').primaryKey(),
    seq: bigserial('seq', { mode: 'number' }),
    tenantId: text('tenant_id').notNull(),
    agentId: text('agent_id').notNull(),
    grantedBy: text('granted_by').notNull(),
    requesterRef: text('requester_ref'),
    taskId: text('task_id'),
    taskDescription: text('task_description'),
    action: text('action').notNull(),
    resource: text('resource').notNull(),
    resourceType: text('resource_type'),
    requiredGroup: text('required_group'),
    status: text('status').$type<'pending' | 'approved' | 'active' | 'revoked' | 'expired' | 'superseded' | 'invalidated'>().notNull(),
    vcStatus: text('vc_status').$type<'valid' | 'revoked' | 'expired' | 'superseded'>().notNull(),
    breakGlass: boolean('break_glass').notNull(),
    authorityBasis: text('authority_basis').notNull(),
    authorityEvidence: jsonb('authority_evidence').$type<Record<string, unknown>>().notNull(),
    policyDecision: jsonb('policy_decision').$type<Record<string, unknown>>().notNull(),
    expiresAt: bigint('expires_at', { mode: 'number' }),
    createdAt: ts('created_at').notNull(),
    approvedAt: ts('approved_at'),
    revokedAt: ts('revoked_at'),
    revocationReason: text('revocation_reason'),
    history: jsonb('history').$type<HistoryEntry[]>().notNull(),
  },
  (t) => [index('governance_delegations_tenant').on(t.tenantId, t.seq), index('governance_delegations_agent').on(t.tenantId, t.agentId, t.status)],
);

export const revocationLog = pgTable(
  'governance_revocation_log',
  {
    id: text('id').primaryKey(),
    seq: bigserial('seq', { mode: 'number' }),
    tenantId: text('tenant_id').notNull(),
    kind: text('kind')
      .$type<'agent_suspend' | 'agent_quarantine' | 'delegation_revoke' | 'delegation_invalidate' | 'delegation_expire' | 'vc_revoke'>()
      .notNull(),
    reasonCode: text('reason_code').notNull(),
    agentId: text('agent_id'),
    delegationId: text('delegation_id'),
    source: text('source').$type<'auto' | 'admin'>().notNull(),
    by: text('by').notNull(),
    detail: text('detail'),
    at: ts('at').notNull(),
  },
  (t) => [index('governance_revocation_log_tenant').on(t.tenantId, t.seq)],
);
