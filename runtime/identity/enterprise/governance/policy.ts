/**
 * Pure governance policy beyond the lifecycle table (model.ts): the grant decision of an
 * authority delegation (SPEC 4.4 "stated rules for a grant"), and the portal's posture buckets
 * (Portal section). Facts in, decision out; the service gathers the facts from the directory.
 */
import { GRANTABLE_AGENT, type AgentStatus, type PartyHealth } from './model.js';

/** A person as the grant sees them: resolved in the agent's tenant, or not. */
export interface PersonFact {
  ref: string;
  /** Set when the reference resolved to an employee of the agent's tenant. */
  subject?: string;
  /** The reference names another tenant (subject `<idp>:<other>:…`). */
  crossTenant: boolean;
  active: boolean;
  display?: string | null;
  department?: string | null;
  /** Last sign-in seen by identity resolution, if any (evidence only). */
  sessionSeenAt?: string | null;
}

export interface GrantFacts {
  agent: { name: string; status: AgentStatus; ownerType: string; ownerRef: string; owner: PartyHealth };
  approver: PersonFact;
  requester: PersonFact;
  breakGlass: boolean;
  /** undefined = the request names no required group. */
  requiredGroup?: { ref: string; key?: string; exists: boolean; approverMember: boolean };
  /** The approver is the owning employee. */
  approverIsOwner: boolean;
  /** The approver is a durable member of the owning group (team-owned agents). */
  approverInOwningTeam: boolean;
  /** Position of the approver in the owning employee's manager chain (1 = direct manager), or 0. */
  managerLevel: number;
}

/**
 * Authority bases, strongest first. `required_group_member` is only ever recorded beside another
 * basis (the required group is a constraint the request names). `break_glass` is not a basis of
 * authority: it is recorded when an otherwise unauthorised (but active, same-tenant) approver
 * invokes the emergency path.
 */
export const AUTHORITY_BASES = ['agent_owner', 'owning_team_member', 'owner_manager_chain', 'required_group_member'] as const;
export type AuthorityBasis = (typeof AUTHORITY_BASES)[number] | 'break_glass';

export interface Check {
  check: string;
  ok: boolean;
  detail: string;
}

export interface GrantDecision {
  allow: boolean;
  /** Error code of the first failed check when denied. */
  code?: string;
  message?: string;
  basis?: AuthorityBasis;
  bases: AuthorityBasis[];
  checks: Check[];
}

function personCheck(role: 'approver' | 'requester', p: PersonFact): Check & { code?: string } {
  if (p.crossTenant) return { check: `${role}_in_tenant`, ok: false, detail: `${role} ${p.ref} belongs to another tenant`, code: 'cross_tenant_reference' };
  if (!p.subject)
    return { check: `${role}_in_tenant`, ok: false, detail: `${role} ${p.ref} does not resolve to one employee of the tenant`, code: `${role}_unknown` };
  if (!p.active) return { check: `${role}_active`, ok: false, detail: `${role} ${p.subject} is inactive`, code: `${role}_inactive` };
  return { check: `${role}_active`, ok: true, detail: `${role} ${p.subject} is an active employee of the tenant` };
}

/** How a person stands to an agent, as the grant's authority rule reads it. */
export interface StandingRelation {
  /** The owning employee. */
  isOwner: boolean;
  /** A durable member of the owning group (team-owned agents). */
  inOwningTeam: boolean;
  /** Position in the owning employee's manager chain (1 = direct manager), or 0. */
  managerLevel: number;
}

/**
 * The standing authority bases a person holds over an agent, strongest first: what lets them
 * approve its delegations (decideGrant) and what the authority preview reports for `approve`.
 */
export function standingBases(r: StandingRelation): AuthorityBasis[] {
  const out: AuthorityBasis[] = [];
  if (r.isOwner) out.push('agent_owner');
  if (r.inOwningTeam) out.push('owning_team_member');
  if (r.managerLevel > 0) out.push('owner_manager_chain');
  return out;
}

/** Every check runs (the decision lists them all); the first failure decides the code. */
export function decideGrant(f: GrantFacts): GrantDecision {
  const checks: (Check & { code?: string })[] = [];
  const st = f.agent.status;
  checks.push(
    GRANTABLE_AGENT.has(st)
      ? { check: 'agent_grantable', ok: true, detail: `agent is ${st}` }
      : {
          check: 'agent_grantable',
          ok: false,
          detail: `agent is ${st}; only approved or active agents receive delegations`,
          code: st === 'suspended' ? 'agent_suspended' : 'agent_not_grantable',
        },
  );
  checks.push(
    f.agent.owner.ok && f.agent.owner.active
      ? { check: 'agent_owner_active', ok: true, detail: 'agent owner resolves and is active' }
      : {
          check: 'agent_owner_active',
          ok: false,
          detail: f.agent.owner.ok ? 'agent owner is inactive' : 'agent owner does not resolve',
          code: f.agent.owner.ok ? 'owner_inactive' : 'owner_missing',
        },
  );
  checks.push(personCheck('approver', f.approver));
  checks.push(personCheck('requester', f.requester));
  if (f.requiredGroup) {
    const g = f.requiredGroup;
    if (!g.key || !g.exists)
      checks.push({ check: 'required_group', ok: false, detail: `required group ${g.ref} is not a group of the tenant`, code: 'required_group_unknown' });
    else if (!g.approverMember)
      checks.push({ check: 'required_group', ok: false, detail: `approver is not a member of ${g.key}`, code: 'approver_not_in_required_group' });
    else checks.push({ check: 'required_group', ok: true, detail: `approver is a member of ${g.key}` });
  }
  const bases: AuthorityBasis[] = standingBases({ isOwner: f.approverIsOwner, inOwningTeam: f.approverInOwningTeam, managerLevel: f.managerLevel });
  // The requester names the required group: membership narrows who may approve, it is no
  // authority of its own (any employee is in some group). It is recorded beside a basis.
  if (bases.length && f.requiredGroup?.approverMember && f.requiredGroup.exists) bases.push('required_group_member');
  if (bases.length) {
    checks.push({ check: 'approver_authority', ok: true, detail: `approver holds authority: ${bases.join(', ')}` });
  } else if (f.breakGlass) {
    bases.push('break_glass');
    checks.push({ check: 'approver_authority', ok: true, detail: 'BREAK-GLASS: approver holds no standing authority over the agent' });
  } else {
    checks.push({
      check: 'approver_authority',
      ok: false,
      detail:
        "approver is neither the agent owner, a member of the owning team, nor in the owner's manager chain (a required group only narrows who of them may approve)",
      code: 'approver_lacks_authority',
    });
  }
  const failed = checks.find((c) => !c.ok);
  const out: GrantDecision = { allow: !failed, bases, checks: checks.map(({ check, ok, detail }) => ({ check, ok, detail })) };
  if (failed) {
    out.code = failed.code ?? 'grant_denied';
    out.message = failed.detail;
  } else {
    out.basis = bases[0];
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Portal posture buckets

export type Posture = 'owner_inactive' | 'blocked' | 'active_healthy' | 'other';

/**
 * Fixed precedence owner_inactive > blocked > active_healthy (Portal section); retired agents are
 * excluded by the caller. An unresolvable owner counts as owner_inactive (there is no active owner);
 * blocked = suspended/quarantined, or any activation blocker; `other` = a healthy agent on its way
 * to activation (draft, pending, approved with no blocker), so the buckets add up to the fleet.
 */
export function postureOf(status: AgentStatus, owner: PartyHealth, blockers: readonly string[]): Posture {
  if (!owner.ok || !owner.active) return 'owner_inactive';
  if (status === 'suspended' || status === 'quarantined' || blockers.length > 0) return 'blocked';
  if (status === 'active') return 'active_healthy';
  return 'other';
}

/** Portal sentinel buckets. */
export const UNATTRIBUTED = '(unattributed)';
export const TEAM_OWNED = '(team-owned)';
export const UNASSIGNED = '(unassigned)';

export function ownerBucket(ownerRef: string, owner: PartyHealth): string {
  if (!owner.ok) return UNATTRIBUTED;
  if (owner.kind === 'group') return TEAM_OWNED;
  return ownerRef;
}

export function departmentBucket(owner: PartyHealth): string {
  if (!owner.ok) return UNATTRIBUTED;
  if (owner.kind === 'group') return TEAM_OWNED;
  return owner.department?.trim() ? owner.department : UNASSIGNED;
}
