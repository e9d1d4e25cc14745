/** zod schemas of the governance routes (SPEC 2.8, 2.9, 4.4): they validate and feed /openapi.json. */
import { z } from '@hono/zod-openapi';
import { ProducerOwner } from '../../../lib/api.js';
import { TenantId } from '../directory/http.js';
import { AGENT_STATUSES, DELEGATION_STATUSES, OWNER_TYPES, REVOKE_REASONS, RISK_TIERS, RUNTIMES } from './model.js';

const text = (max = 512) => z.string().trim().min(1).max(max);
/** Governed-agent names are path segments and log keys: no whitespace, no '/'. */
export const GovAgentName = z
  .string()
  .min(1)
  .max(253)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._@:-]*$/, 'letters, digits and . _ @ : - only, starting with a letter or digit');
/** Runtime labels are illustrative (SPEC 2.8): any label is accepted, the known ones are listed. */
const RuntimeLabel = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[a-z0-9][a-z0-9_.-]*$/, 'lower-case label: letters, digits and _ . -')
  .openapi({ examples: [...RUNTIMES] });

const History = z.array(z.object({ at: z.string(), action: z.string(), by: z.string(), detail: z.string().nullable() }));

export const RegisterSchema = z
  .object({
    agentName: GovAgentName,
    tenantId: TenantId,
    ownerType: z.enum(OWNER_TYPES),
    ownerRef: text(600),
    teamRef: text(600).optional(),
    businessSponsor: text(600).optional(),
    riskTier: z.enum(RISK_TIERS).optional(),
    approvedRuntime: RuntimeLabel.optional(),
    createdBy: text(600).optional(),
  })
  .openapi('GovernedAgentRegister');

export const TransitionSchema = z.object({ status: z.string().min(1).max(64), by: text(600).optional() }).openapi('GovernedAgentTransition');

export const TransferSchema = z.object({ ownerType: z.enum(OWNER_TYPES), ownerRef: text(600), by: text(600).optional() }).openapi('GovernedAgentTransfer');

/** PATCH: the fields to set (absent: unchanged; null clears an optional one). The owner's type and reference come together. */
export const UpdateSchema = z
  .object({
    ownerType: z.enum(OWNER_TYPES).optional(),
    ownerRef: text(600).optional(),
    teamRef: text(600).nullable().optional(),
    businessSponsor: text(600).nullable().optional(),
    riskTier: z.enum(RISK_TIERS).nullable().optional(),
    approvedRuntime: RuntimeLabel.nullable().optional(),
    by: text(600).optional().openapi({ description: 'Who, with WRIT_API_AUTH=off; with auth on the history names the authenticated caller.' }),
  })
  .strict()
  .refine((b) => (b.ownerType === undefined) === (b.ownerRef === undefined), {
    message: 'ownerType and ownerRef are set together',
    path: ['ownerRef'],
  })
  .openapi('GovernedAgentUpdate');

/** A declared agent: the registration's fields (the producer is `createdBy`) and the status to walk to. */
const DesiredGovernedSchema = RegisterSchema.omit({ createdBy: true })
  .extend({ status: z.enum(AGENT_STATUSES).default('draft') })
  .strict()
  .openapi('GovernedAgentDesired');

export const GovernedApplySchema = z
  .object({
    owner: ProducerOwner.openapi({ description: 'The producer: `folder:<path>`, `kubernetes:<cluster>`, ...' }),
    agents: z.array(DesiredGovernedSchema).max(10_000),
  })
  .openapi('GovernedAgentApply');

export const AgentRecordSchema = z
  .object({
    agent_name: z.string(),
    tenant_id: z.string(),
    owner_type: z.enum(OWNER_TYPES),
    owner_ref: z.string(),
    team_ref: z.string().nullable(),
    business_sponsor: z.string().nullable(),
    risk_tier: z.enum(RISK_TIERS).nullable(),
    approved_runtime: z.string().nullable(),
    status: z.enum(AGENT_STATUSES),
    created_by: z.string().nullable(),
    created_at: z.string(),
    updated_at: z.string(),
    last_reviewed_at: z.string().nullable(),
    history: History,
    owner_display: z.string().nullable(),
    owner_ok: z.boolean(),
    owner_active: z.boolean(),
    sponsor_display: z.string().nullable().optional(),
    sponsor_active: z.boolean().optional(),
    activation_blockers: z.array(z.string()),
  })
  .openapi('GovernedAgent');

export const GovernedApplyResultSchema = z
  .object({
    owner: z.string(),
    agents: z.array(
      z.object({
        agent_name: z.string(),
        outcome: z.enum(['created', 'updated', 'unchanged', 'conflict', 'rejected', 'blocked', 'held', 'retired']),
        message: z.string().optional(),
        agent: AgentRecordSchema.optional(),
      }),
    ),
    retired: z.array(z.string()),
  })
  .openapi('GovernedAgentApplyResult');

export const IssueSchema = z
  .object({
    agent_name: z.string(),
    tenant_id: z.string(),
    type: z.enum(['owner_missing', 'owner_inactive', 'incomplete_active']),
    detail: z.string(),
    status: z.enum(AGENT_STATUSES),
  })
  .openapi('GovernanceIssue');

const Posture = z.object({ owner_inactive: z.number(), blocked: z.number(), active_healthy: z.number(), other: z.number() });

export const SummarySchema = z
  .object({
    tenant_id: z.string().nullable(),
    generated_at: z.string(),
    totals: z.object({
      governed: z.number(),
      ungoverned: z.number(),
      retired: z.number(),
      by_status: z.record(z.string(), z.number()),
    }),
    posture: Posture,
    by_owner: z.array(
      z.object({
        key: z.string(),
        owner_type: z.string().nullable(),
        owner_ref: z.string().nullable(),
        display: z.string().nullable(),
        agents: z.number(),
        posture: Posture,
      }),
    ),
    by_department: z.array(z.object({ key: z.string(), agents: z.number(), posture: Posture })),
  })
  .openapi('GovernanceSummary');

export const GrantSchema = z
  .object({
    tenantId: TenantId,
    agentId: GovAgentName,
    approverRef: text(600).optional(),
    grantedBy: text(600).optional(),
    requesterRef: text(600).optional(),
    breakGlass: z.boolean().default(false),
    action: text(256),
    resource: text(2048),
    taskId: text(256).optional(),
    taskDescription: text(4096).optional(),
    resourceType: text(128).optional(),
    requiredGroup: text(400).optional(),
    expiresInSeconds: z
      .number()
      .int()
      .min(1)
      .max(90 * 24 * 3600)
      .optional(),
  })
  .refine((b) => b.approverRef !== undefined || b.grantedBy !== undefined, {
    message: 'approverRef or grantedBy is required (the granting employee)',
    path: ['approverRef'],
  })
  .openapi('AuthorityDelegationGrant');

export const DelegationRecordSchema = z
  .object({
    delegation_id: z.string(),
    tenant_id: z.string(),
    agent_id: z.string(),
    granted_by: z.string(),
    requester_ref: z.string().nullable(),
    task_id: z.string().nullable(),
    task_description: z.string().nullable(),
    action: z.string(),
    resource: z.string(),
    resource_type: z.string().nullable(),
    required_group: z.string().nullable(),
    status: z.enum(DELEGATION_STATUSES),
    vc_status: z.enum(['valid', 'revoked', 'expired', 'superseded']),
    break_glass: z.boolean(),
    authority_basis: z.string(),
    authority_evidence: z.record(z.string(), z.unknown()),
    policy_decision: z.record(z.string(), z.unknown()),
    expires_at: z.number().int().nullable(),
    created_at: z.string(),
    approved_at: z.string().nullable(),
    revoked_at: z.string().nullable(),
    revocation_reason: z.string().nullable(),
    history: History,
  })
  .openapi('AuthorityDelegation');

export const UsableSchema = z.object({ usable: z.boolean(), status: z.enum(DELEGATION_STATUSES), reason: z.string().nullable() }).openapi('DelegationUsable');

export const RevokeSchema = z.object({ reason: z.enum(REVOKE_REASONS).optional(), by: text(600).optional() }).openapi('AuthorityDelegationRevoke');

export const CascadeCountsSchema = z
  .object({
    agents_suspended: z.number(),
    agents_quarantined: z.number(),
    delegations_revoked: z.number(),
    delegations_invalidated: z.number(),
    delegations_expired: z.number(),
    by_reason: z.record(z.string(), z.number()),
  })
  .openapi('CascadeCounts');

export const LogRowSchema = z
  .object({
    id: z.string(),
    tenant_id: z.string(),
    kind: z.enum(['agent_suspend', 'agent_quarantine', 'delegation_revoke', 'delegation_invalidate', 'delegation_expire', 'vc_revoke']),
    reason_code: z.string(),
    agent_id: z.string().nullable(),
    delegation_id: z.string().nullable(),
    source: z.enum(['auto', 'admin']),
    by: z.string(),
    detail: z.string().nullable(),
    at: z.string(),
  })
  .openapi('RevocationLogRow');

export const q = <T extends z.ZodType>(schema: T, name: string, required = false) => schema.openapi({ param: { name, in: 'query', required } });
export const TenantQuery = z.object({ tenant: q(TenantId.optional(), 'tenant') });
export const NameParam = z.object({ name: GovAgentName.openapi({ param: { name: 'name', in: 'path' } }) });
export const IdParam = z.object({
  id: z
    .string()
    .min(1)
    .max(128)
    .openapi({ param: { name: 'id', in: 'path' } }),
});
