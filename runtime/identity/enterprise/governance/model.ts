/**
 * Pure governance core (SPEC 2.8, 2.9, 3.1, 3.4): the lifecycle table, the activation gate,
 * owner/sponsor health and the revocation-cascade planner. No I/O: the store adapters load the
 * facts, these functions decide, the adapters write.
 */

export const AGENT_STATUSES = ['draft', 'pending_approval', 'approved', 'active', 'suspended', 'quarantined', 'retired'] as const;
export type AgentStatus = (typeof AGENT_STATUSES)[number];

export const OWNER_TYPES = ['employee', 'team', 'service_account_owner_group'] as const;
export type OwnerType = (typeof OWNER_TYPES)[number];

export const RISK_TIERS = ['low', 'medium', 'high', 'critical'] as const;
export const RUNTIMES = ['local_dev', 'doks_dev', 'doks_stage', 'doks_prod', 'github_actions', 'kubernetes_job', 'external_mcp_client'] as const;

/** SPEC 3.1, manual moves. The cascade sets suspended/quarantined directly (not through this table). */
export const TRANSITIONS: Readonly<Record<AgentStatus, readonly AgentStatus[]>> = {
  draft: ['pending_approval', 'retired'],
  pending_approval: ['approved', 'draft', 'retired'],
  approved: ['active', 'suspended', 'retired'],
  active: ['suspended', 'quarantined', 'retired'],
  suspended: ['active', 'quarantined', 'retired'],
  quarantined: ['active', 'retired'],
  retired: [],
};

export const canTransition = (from: AgentStatus, to: AgentStatus): boolean => TRANSITIONS[from].includes(to);

/** Shortest path of manual moves (SPEC 3.1) from one status to another; undefined when none. */
export function pathTo(from: AgentStatus, to: AgentStatus): AgentStatus[] | undefined {
  if (from === to) return [];
  const prev = new Map<AgentStatus, AgentStatus>([[from, from]]);
  const queue: AgentStatus[] = [from];
  while (queue.length) {
    const cur = queue.shift()!;
    for (const next of TRANSITIONS[cur]) {
      if (prev.has(next)) continue;
      prev.set(next, cur);
      if (next === to) {
        const path: AgentStatus[] = [to];
        for (let s = cur; s !== from; s = prev.get(s)!) path.unshift(s);
        return path;
      }
      queue.push(next);
    }
  }
  return undefined;
}

/** Agents in these states hold no authority: their live delegations are invalidated (agent_inactive). */
export const INACTIVE_AGENT: ReadonlySet<AgentStatus> = new Set(['suspended', 'quarantined', 'retired']);
/** Only these agents may receive a delegation; draft/pending ones are not approved yet. */
export const GRANTABLE_AGENT: ReadonlySet<AgentStatus> = new Set(['approved', 'active']);

export const DELEGATION_STATUSES = ['pending', 'approved', 'active', 'revoked', 'expired', 'superseded', 'invalidated'] as const;
export type DelegationStatus = (typeof DELEGATION_STATUSES)[number];
export const LIVE_DELEGATION: ReadonlySet<DelegationStatus> = new Set(['pending', 'approved', 'active']);

/** Reason codes the cascade emits (SPEC 3.4), in the precedence the planner applies them. */
export const CASCADE_REASONS = [
  'owner_missing',
  'owner_inactive',
  'sponsor_inactive',
  'agent_inactive',
  'delegation_expired',
  'delegation_grantor_lost_authority',
  'group_removed',
] as const;
export type CascadeReason = (typeof CASCADE_REASONS)[number];

/** Codes accepted on POST …/revoke (SPEC 3.4: the emitted default plus the manual-only codes). */
export const REVOKE_REASONS = [
  'manual_admin_revocation',
  'owner_inactive',
  'owner_missing',
  'sponsor_inactive',
  'delegation_expired',
  'delegation_grantor_lost_authority',
  'group_removed',
  'agent_inactive',
  'owner_transferred',
  'sponsor_changed',
  'team_inactive',
  'role_removed',
  'manager_changed',
  'employee_disabled',
  'tenant_disabled',
  'policy_changed',
] as const;
export type RevokeReason = (typeof REVOKE_REASONS)[number];

export type LogKind = 'agent_suspend' | 'agent_quarantine' | 'delegation_revoke' | 'delegation_invalidate' | 'delegation_expire' | 'vc_revoke';

/** Live health of an owner or sponsor reference, resolved against the tenant's directory. */
export interface PartyHealth {
  /** The reference resolved to an employee or group of this tenant. */
  ok: boolean;
  /** Resolved and active (employee status active; group with at least one active member). */
  active: boolean;
  display: string | null;
  /** Department of an employee owner (null for groups and unresolved refs). */
  department: string | null;
  kind: 'employee' | 'group' | 'none';
}

export const MISSING: PartyHealth = { ok: false, active: false, display: null, department: null, kind: 'none' };

export interface GateFacts {
  owner: PartyHealth;
  /** undefined when no sponsor is set. */
  sponsor?: PartyHealth;
  riskTier: string | null;
  approvedRuntime: string | null;
}

/** Activation gate (SPEC 3.1): empty list = ready to activate. Order is stable for clients. */
export function activationBlockers(f: GateFacts): string[] {
  const out: string[] = [];
  if (!f.owner.ok) out.push('owner_missing');
  else if (!f.owner.active) out.push('owner_inactive');
  if (!f.sponsor) out.push('sponsor_missing');
  else if (!f.sponsor.ok) out.push('sponsor_unresolved');
  else if (!f.sponsor.active) out.push('sponsor_inactive');
  if (!f.riskTier) out.push('risk_tier_missing');
  if (!f.approvedRuntime) out.push('approved_runtime_missing');
  return out;
}

// ---------------------------------------------------------------------------------------------
// Cascade planner

export interface CascadeAgentFact {
  name: string;
  status: AgentStatus;
  owner: PartyHealth;
  /** The owner is an employee (owner_inactive applies to employees only; team_inactive is manual). */
  ownerIsEmployee: boolean;
  sponsor?: PartyHealth;
}

export interface CascadeDelegationFact {
  id: string;
  agentId: string;
  status: DelegationStatus;
  expiresAt: number | null;
  grantorActive: boolean;
  /** undefined when the delegation names no required group. */
  grantorInRequiredGroup?: boolean;
}

export interface AgentMove {
  name: string;
  to: 'suspended' | 'quarantined';
  reason: 'owner_missing' | 'owner_inactive' | 'sponsor_inactive';
  detail: string;
}

export interface DelegationMove {
  id: string;
  agentId: string;
  to: 'revoked' | 'invalidated' | 'expired';
  reason: CascadeReason;
  detail: string;
}

export interface CascadePlan {
  agents: AgentMove[];
  delegations: DelegationMove[];
}

/**
 * Which agents the cascade moves. Only agents that hold or are about to hold authority
 * (approved, active) are suspended/quarantined; a suspended agent whose owner becomes
 * unresolvable escalates to quarantined. Draft and pending agents are left alone on purpose:
 * suspended/quarantined both lead straight to `active` in the lifecycle table, so moving a draft
 * there would open a path to activation that skips approval. They surface in /issues instead.
 */
export function planAgentMove(a: CascadeAgentFact): AgentMove | undefined {
  const live = a.status === 'approved' || a.status === 'active';
  if (!a.owner.ok && (live || a.status === 'suspended')) {
    return { name: a.name, to: 'quarantined', reason: 'owner_missing', detail: 'owner reference does not resolve in the tenant' };
  }
  if (!live) return undefined;
  if (a.ownerIsEmployee && !a.owner.active) {
    return { name: a.name, to: 'suspended', reason: 'owner_inactive', detail: `owning employee ${a.owner.display ?? '(no name)'} is inactive` };
  }
  if (a.sponsor && !a.sponsor.active) {
    return {
      name: a.name,
      to: 'suspended',
      reason: 'sponsor_inactive',
      detail: a.sponsor.ok ? `business sponsor ${a.sponsor.display ?? ''} is inactive` : 'business sponsor does not resolve in the tenant',
    };
  }
  return undefined;
}

/**
 * The whole cascade for one tenant, as data. Precedence per delegation: the agent's owner
 * (revoked), the agent's own state (invalidated), time (expired), the grantor (invalidated),
 * the required group (invalidated). Only live delegations move, so a second run over the same
 * facts (after the first run's writes) yields an empty plan.
 */
export function planCascade(agentFacts: readonly CascadeAgentFact[], delegationFacts: readonly CascadeDelegationFact[], nowMs: number): CascadePlan {
  const agents: AgentMove[] = [];
  const after = new Map<string, CascadeAgentFact>();
  for (const a of agentFacts) {
    const m = planAgentMove(a);
    if (m) agents.push(m);
    after.set(a.name, m ? { ...a, status: m.to } : a);
  }
  const nowSec = Math.floor(nowMs / 1000);
  const delegations: DelegationMove[] = [];
  for (const d of delegationFacts) {
    if (!LIVE_DELEGATION.has(d.status)) continue;
    const a = after.get(d.agentId);
    const base = { id: d.id, agentId: d.agentId };
    if (a && !a.owner.ok) {
      delegations.push({ ...base, to: 'revoked', reason: 'owner_missing', detail: 'agent owner does not resolve in the tenant' });
    } else if (a && a.ownerIsEmployee && !a.owner.active) {
      delegations.push({ ...base, to: 'revoked', reason: 'owner_inactive', detail: 'agent owner is inactive' });
    } else if (!a || INACTIVE_AGENT.has(a.status)) {
      delegations.push({ ...base, to: 'invalidated', reason: 'agent_inactive', detail: a ? `agent is ${a.status}` : 'agent has no governed record' });
    } else if (d.expiresAt !== null && d.expiresAt <= nowSec) {
      delegations.push({ ...base, to: 'expired', reason: 'delegation_expired', detail: `expires_at ${d.expiresAt} reached` });
    } else if (!d.grantorActive) {
      delegations.push({ ...base, to: 'invalidated', reason: 'delegation_grantor_lost_authority', detail: 'granting employee is inactive or gone' });
    } else if (d.grantorInRequiredGroup === false) {
      delegations.push({ ...base, to: 'invalidated', reason: 'group_removed', detail: 'grantor is no longer in the required group' });
    }
  }
  return { agents, delegations };
}

export interface CascadeCounts {
  agents_suspended: number;
  agents_quarantined: number;
  delegations_revoked: number;
  delegations_invalidated: number;
  delegations_expired: number;
  by_reason: Record<string, number>;
}

export function countPlan(p: CascadePlan): CascadeCounts {
  const by: Record<string, number> = {};
  const bump = (r: string) => (by[r] = (by[r] ?? 0) + 1);
  p.agents.forEach((m) => bump(m.reason));
  p.delegations.forEach((m) => bump(m.reason));
  return {
    agents_suspended: p.agents.filter((m) => m.to === 'suspended').length,
    agents_quarantined: p.agents.filter((m) => m.to === 'quarantined').length,
    delegations_revoked: p.delegations.filter((m) => m.to === 'revoked').length,
    delegations_invalidated: p.delegations.filter((m) => m.to === 'invalidated').length,
    delegations_expired: p.delegations.filter((m) => m.to === 'expired').length,
    by_reason: by,
  };
}

/** vc_status that follows a delegation status (invalidated credentials read as revoked). */
export function vcStatusOf(s: DelegationStatus): 'valid' | 'revoked' | 'expired' | 'superseded' {
  if (s === 'expired') return 'expired';
  if (s === 'superseded') return 'superseded';
  if (s === 'revoked' || s === 'invalidated') return 'revoked';
  return 'valid';
}

export const logKindOf = (to: DelegationMove['to']): LogKind =>
  to === 'revoked' ? 'delegation_revoke' : to === 'expired' ? 'delegation_expire' : 'delegation_invalidate';
