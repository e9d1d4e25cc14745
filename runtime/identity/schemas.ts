/** zod schemas of the identity-authority API: they validate requests and generate /openapi.json. */
import { z } from '@hono/zod-openapi';
import { ProducerOwner } from '../lib/api.js';

export const ErrorSchema = z.object({ error: z.object({ code: z.string(), message: z.string() }) }).openapi('Error');
export const ValidationErrorSchema = z
  .object({
    detail: z.array(
      z.object({
        loc: z.array(z.union([z.string(), z.number()])),
        msg: z.string(),
        type: z.string(),
        input: z.unknown().optional(),
        ctx: z.record(z.string(), z.unknown()).optional(),
      }),
    ),
  })
  .openapi('ValidationError');

const text = (max = 1024) => z.string().min(1).max(max);
export const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._@:-]*$/;
export const AgentName = z.string().min(1).max(253).regex(NAME_RE, 'letters, digits and . _ @ : - only, starting with a letter or digit');

export const CapabilitySchema = z
  .object({ action: text(256), resource: text(2048), constraints: z.record(z.string(), z.unknown()).optional() })
  .openapi('Capability');

export const AgentCreateSchema = z.object({ name: AgentName, role: text(256), capabilities: z.array(CapabilitySchema).max(256) }).openapi('AgentCreate');

export const AgentRecordSchema = z
  .object({
    name: z.string(),
    role: z.string(),
    did: z.string().nullable(),
    capabilities: z.array(CapabilitySchema),
    provisioned: z.boolean(),
    retired_at: z.string().optional().openapi({ description: 'Present once its producer stopped declaring it: its credentials are revoked.' }),
  })
  .openapi('Agent');

export const AgentsApplySchema = z
  .object({
    owner: ProducerOwner.openapi({ description: 'The producer: `folder:<path>`, `kubernetes:<cluster>`, ...' }),
    agents: z.array(AgentCreateSchema).max(10_000),
  })
  .refine((b) => new Set(b.agents.map((a) => a.name)).size === b.agents.length, { message: 'an agent is declared twice', path: ['agents'] })
  .openapi('AgentsApply');

export const AgentsApplyResultSchema = z
  .object({
    owner: z.string(),
    created: z.array(z.string()),
    updated: z.array(z.string()),
    unchanged: z.array(z.string()),
    retired: z.array(z.string()),
    conflicts: z.array(z.string()),
    conflictOwners: z.record(z.string(), z.string()),
  })
  .openapi('AgentsApplyResult');

export const ProvisionSchema = z
  .object({
    name: z.string(),
    did: z.string(),
    privateKeyB64: z.string().openapi({ description: 'Base64 of the 32-byte Ed25519 seed (RFC 8032). Returned once, never stored.' }),
    membershipVc: z.string(),
    capabilityVcs: z.array(z.string()),
    issuerDid: z.string(),
    membershipJti: z.string(),
    revokedMembershipJti: z
      .string()
      .optional()
      .openapi({ description: 'Re-provisioning: the previous Membership VC, revoked by this call (with the previous capability VCs).' }),
  })
  .openapi('Provision');

export const VerifyRequestSchema = z
  .object({
    vp: z
      .string()
      .min(1)
      .max(64 * 1024),
    audience: z.string().min(1).max(1024).optional(),
    nonce: z.string().min(1).max(1024).optional().openapi({ description: 'When set, the VP nonce must equal it; a nonce must be present in any case.' }),
  })
  .openapi('VerifyPresentationRequest');

export const VerifyResponseSchema = z
  .object({
    ok: z.boolean(),
    agentName: z.string().nullable(),
    agentDid: z.string().nullable(),
    reason: z.string(),
    membershipJti: z.string().nullable(),
    exp: z.number().int().nullable().openapi({ description: 'Epoch seconds: the earlier of the VP and Membership VC expiry.' }),
  })
  .openapi('VerifyPresentationResponse');

export const MAX_DELEGATION_TTL = 7 * 24 * 3600;
export const DEFAULT_DELEGATION_TTL = 3600;

export const DelegationRequestSchema = z
  .object({
    actorName: AgentName,
    task: text(512),
    action: text(256),
    resource: text(2048),
    reason: text(2048),
    ttlSeconds: z.number().int().min(1).max(MAX_DELEGATION_TTL).optional(),
  })
  .openapi('DelegationRequest');

export const DelegationSchema = z
  .object({
    id: z.string(),
    status: z.enum(['pending', 'approved', 'denied']),
    actorName: z.string(),
    actorDid: z.string().nullable(),
    task: z.string(),
    action: z.string(),
    resource: z.string(),
    reason: z.string(),
    ttlSeconds: z.number().int(),
    requestedAt: z.string(),
    approver: z.string().nullable(),
    approvedAt: z.string().nullable(),
    deniedAt: z.string().nullable(),
    denyReason: z.string().nullable(),
    vcJti: z.string().nullable(),
    notAfter: z.number().int().nullable(),
  })
  .openapi('Delegation');

export const ApproveSchema = z.object({ approver: text(256) }).openapi('DelegationApprove');
export const DenySchema = z.object({ approver: text(256), reason: text(2048) }).openapi('DelegationDeny');
export const ApprovedSchema = z
  .object({ id: z.string(), status: z.literal('approved'), vc: z.string(), vcJti: z.string(), notAfter: z.number().int() })
  .openapi('DelegationApproved');

export const CheckQuerySchema = z.object({ actor: text(253), task: text(512), action: text(256), resource: text(2048) });
export const CheckResponseSchema = z
  .object({ ok: z.boolean(), reason: z.string(), vcJti: z.string().nullable(), notAfter: z.number().int().nullable(), delegationId: z.string().nullable() })
  .openapi('DelegationCheck');

export const RevokeSchema = z.object({ vcJti: text(512) }).openapi('Revoke');
export const RevokedSchema = z.object({ revoked: z.literal(true), vcJti: z.string() }).openapi('Revoked');
export const RevocationListSchema = z.object({ revoked: z.array(z.string()) }).openapi('RevocationList');

/** Common error responses for route declarations. */
export const errors = {
  422: { description: 'Validation error', content: { 'application/json': { schema: ValidationErrorSchema } } },
  503: { description: 'Not ready', content: { 'application/json': { schema: ErrorSchema } } },
} as const;
export const err = (description: string) => ({ description, content: { 'application/json': { schema: ErrorSchema } } });
export const json = <T extends z.ZodType>(schema: T, description = 'OK') => ({ description, content: { 'application/json': { schema } } });
export const body = <T extends z.ZodType>(schema: T) => ({ required: true, content: { 'application/json': { schema } } });
