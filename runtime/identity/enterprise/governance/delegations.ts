/**
 * Authority delegations (SPEC 2.9, 3.4, 4.4): grant (an authorization decision), list, get,
 * usable, revoke; plus the on-demand cascade and the revocation log. Writes are one transaction
 * under the tenant's governance lock, so a grant cannot interleave with a cascade or a transition.
 */
import { randomUUID } from 'node:crypto';
import type { Principal } from '../../../lib/api-auth.js';
import { ApiError, conflict, forbidden, notFound } from '../../../lib/errors.js';
import type { HistoryEntry } from '../../../store/schema/governance.js';
import { iso } from '../directory/repo.js';
import type { EmployeeRecord } from '../directory/repo.js';
import { tenantOfSubject } from '../tenant.js';
import { healthOf, type GovDeps } from './agents.js';
import { runCascade, type CascadeCounts } from './cascade.js';
import { groupKeyIn, lazyView, type DirectoryView } from './directory-view.js';
import { GRANTABLE_AGENT, LIVE_DELEGATION, type DelegationStatus, type RevokeReason } from './model.js';
import { decideGrant, type PersonFact } from './policy.js';
import { governanceRepo, governanceTenants, tenantOfDelegation, type DelegationRow, type RevocationLogRecord } from './repo.js';

/** Default lifetime of a grant without expiresInSeconds: delegations are always time-boxed. */
export const DEFAULT_GRANT_TTL = 24 * 3600;
/** Break-glass grants live at most this long, whatever was asked. */
export const BREAK_GLASS_MAX_TTL = 3600;

export interface DelegationRecord {
  delegation_id: string;
  tenant_id: string;
  agent_id: string;
  granted_by: string;
  requester_ref: string | null;
  task_id: string | null;
  task_description: string | null;
  action: string;
  resource: string;
  resource_type: string | null;
  required_group: string | null;
  status: DelegationStatus;
  vc_status: 'valid' | 'revoked' | 'expired' | 'superseded';
  break_glass: boolean;
  authority_basis: string;
  authority_evidence: Record<string, unknown>;
  policy_decision: Record<string, unknown>;
  expires_at: number | null;
  created_at: string;
  approved_at: string | null;
  revoked_at: string | null;
  revocation_reason: string | null;
  history: HistoryEntry[];
}

export function delegationOut(d: DelegationRow): DelegationRecord {
  return {
    delegation_id: d.delegationId,
    tenant_id: d.tenantId,
    agent_id: d.agentId,
    granted_by: d.grantedBy,
    requester_ref: d.requesterRef,
    task_id: d.taskId,
    task_description: d.taskDescription,
    action: d.action,
    resource: d.resource,
    resource_type: d.resourceType,
    required_group: d.requiredGroup,
    status: d.status,
    vc_status: d.vcStatus,
    break_glass: d.breakGlass,
    authority_basis: d.authorityBasis,
    authority_evidence: d.authorityEvidence,
    policy_decision: d.policyDecision,
    expires_at: d.expiresAt,
    created_at: iso(d.createdAt),
    approved_at: iso(d.approvedAt),
    revoked_at: iso(d.revokedAt),
    revocation_reason: d.revocationReason,
    history: d.history,
  };
}

export interface GrantInput {
  tenantId: string;
  agentId: string;
  approverRef?: string;
  grantedBy?: string;
  requesterRef?: string;
  breakGlass: boolean;
  action: string;
  resource: string;
  taskId?: string;
  taskDescription?: string;
  resourceType?: string;
  requiredGroup?: string;
  expiresInSeconds?: number;
}

async function person(view: DirectoryView, ref: string): Promise<{ fact: PersonFact; e?: EmployeeRecord }> {
  const t = ref.split(':').length >= 3 ? tenantOfSubject(ref) : undefined;
  if (t !== undefined && t !== view.tenantId) return { fact: { ref, crossTenant: true, active: false } };
  const e = (await view.employee(ref)) ?? (await view.findEmployee(ref));
  if (!e) return { fact: { ref, crossTenant: false, active: false } };
  const seen = (e.session as { last_seen_at?: unknown } | null)?.last_seen_at;
  return {
    e,
    fact: {
      ref,
      subject: e.employee_subject,
      crossTenant: false,
      active: e.status === 'active',
      display: e.display_name,
      department: e.department,
      sessionSeenAt: typeof seen === 'string' ? seen : null,
    },
  };
}

/**
 * Grant = decision + record. Denials are 403 with the failed check's code and the whole decision
 * (nothing is stored); an unknown agent of the tenant is 404. Granted delegations start `active`:
 * the approver's approval is the grant itself.
 *
 * `caller` (auth on): a workforce OIDC caller grants as itself, so the approver named must be the
 * employee its token's subject resolves to (else 403 `approver_not_caller`); an API key (the route
 * needs `approvals:decide`, the scope of systems trusted to record a human's approval) asserts the
 * approver, and the evidence and history name the key as `asserted_by`.
 */
export async function grantDelegation(deps: GovDeps, b: GrantInput, caller?: Principal): Promise<DelegationRecord> {
  const t = b.tenantId;
  return deps.db.transaction(async (tx) => {
    const repo = governanceRepo(tx, t);
    await repo.lock();
    const agent = await repo.getAgent(b.agentId);
    if (!agent) throw notFound('governed agent', b.agentId);
    const view = lazyView(tx, t);
    const approverRef = b.approverRef ?? b.grantedBy!;
    const approver = await person(view, approverRef);
    if (caller?.kind === 'oidc') {
      const me = await person(view, caller.id.slice('oidc:'.length));
      if (!me.fact.subject || me.fact.subject !== approver.fact.subject) {
        throw forbidden('approver_not_caller', `a signed-in employee grants as themselves: ${approverRef} is not ${caller.id}`);
      }
    }
    const assertedBy = caller && caller.kind !== 'oidc' ? caller.id : undefined;
    if (b.approverRef !== undefined && b.grantedBy !== undefined) {
      const other = await person(view, b.grantedBy);
      if (other.fact.subject !== approver.fact.subject) {
        throw new ApiError(400, 'ambiguous_approver', 'approverRef and grantedBy name different employees');
      }
    }
    const requester = b.requesterRef !== undefined ? await person(view, b.requesterRef) : approver;
    const health = await healthOf(view, agent);
    const isEmployeeOwner = agent.ownerType === 'employee';
    const ownerKey = isEmployeeOwner ? undefined : groupKeyIn(t, agent.ownerRef);
    const approverSubject = approver.fact.subject;
    let managerLevel = 0;
    let chain: string[] = [];
    if (isEmployeeOwner && approverSubject) {
      chain = (await view.managerChain(agent.ownerRef)).map((m) => m.employee_subject);
      managerLevel = chain.indexOf(approverSubject) + 1;
    }
    let requiredGroup: Parameters<typeof decideGrant>[0]['requiredGroup'];
    if (b.requiredGroup !== undefined) {
      const key = groupKeyIn(t, b.requiredGroup);
      const exists = !!key && !!(await view.group(key));
      requiredGroup = { ref: b.requiredGroup, key, exists, approverMember: exists && !!approverSubject && (await view.isMember(approverSubject, key!)) };
    }
    const decision = decideGrant({
      agent: { name: agent.agentName, status: agent.status, ownerType: agent.ownerType, ownerRef: agent.ownerRef, owner: health.owner },
      approver: approver.fact,
      requester: requester.fact,
      breakGlass: b.breakGlass,
      requiredGroup,
      approverIsOwner: isEmployeeOwner && !!approverSubject && approverSubject === agent.ownerRef,
      approverInOwningTeam: !!ownerKey && !!approverSubject && (await view.isMember(approverSubject, ownerKey)),
      managerLevel,
    });
    const nowMs = deps.now();
    const at = new Date(nowMs).toISOString();
    const policy = {
      decision: decision.allow ? 'allow' : 'deny',
      evaluated_at: at,
      checks: decision.checks,
      ...(decision.allow ? {} : { code: decision.code }),
    };
    if (!decision.allow) throw new ApiError(403, decision.code!, `delegation denied: ${decision.message}`, { policy_decision: policy });

    const basis = decision.basis!;
    const breakGlass = basis === 'break_glass';
    const asked = b.expiresInSeconds ?? (breakGlass ? BREAK_GLASS_MAX_TTL : DEFAULT_GRANT_TTL);
    const ttl = breakGlass ? Math.min(asked, BREAK_GLASS_MAX_TTL) : asked;
    const evidence: Record<string, unknown> = {
      basis,
      bases: decision.bases,
      break_glass: b.breakGlass,
      approver: {
        subject: approverSubject,
        display: approver.fact.display ?? null,
        department: approver.fact.department ?? null,
        session_seen_at: approver.fact.sessionSeenAt ?? null,
      },
      requester: { subject: requester.fact.subject, display: requester.fact.display ?? null, session_seen_at: requester.fact.sessionSeenAt ?? null },
      agent: { name: agent.agentName, status: agent.status, owner_type: agent.ownerType, owner_ref: agent.ownerRef },
      ...(managerLevel ? { manager_chain: chain.slice(0, managerLevel), manager_level: managerLevel } : {}),
      ...(requiredGroup ? { required_group: requiredGroup.key ?? requiredGroup.ref } : {}),
      ...(breakGlass ? { ttl_capped_at: BREAK_GLASS_MAX_TTL } : {}),
      ...(assertedBy ? { asserted_by: assertedBy } : {}),
    };
    const id = randomUUID();
    const requesterSubject = requester.fact.subject!;
    const history: HistoryEntry[] = [
      { at, action: 'requested', by: requesterSubject, detail: `${b.action} on ${b.resource}${b.taskId ? ` for task ${b.taskId}` : ''}` },
      { at, action: 'granted', by: approverSubject!, detail: `basis ${basis}${assertedBy ? `; approval asserted by ${assertedBy}` : ''}` },
    ];
    if (b.breakGlass) {
      history.push({
        at,
        action: 'break_glass',
        by: approverSubject!,
        detail: breakGlass ? `emergency grant without standing authority; expires in ${ttl}s` : 'break-glass requested; standing authority applied',
      });
    }
    await repo.insertDelegation({
      delegationId: id,
      agentId: agent.agentName,
      grantedBy: approverSubject!,
      requesterRef: requesterSubject,
      taskId: b.taskId ?? null,
      taskDescription: b.taskDescription ?? null,
      action: b.action,
      resource: b.resource,
      resourceType: b.resourceType ?? null,
      requiredGroup: requiredGroup?.key ?? null,
      status: 'active',
      vcStatus: 'valid',
      breakGlass: b.breakGlass,
      authorityBasis: basis,
      authorityEvidence: evidence,
      policyDecision: policy,
      expiresAt: Math.floor(nowMs / 1000) + ttl,
      createdAt: at,
      approvedAt: at,
      history,
    });
    return delegationOut((await repo.getDelegation(id))!);
  });
}

async function delegationTenant(deps: GovDeps, id: string, tenantHint?: string): Promise<string> {
  const t = await tenantOfDelegation(deps.db, id);
  if (t === undefined || (tenantHint !== undefined && tenantHint !== t)) throw notFound('delegation', id);
  return t;
}

export async function getDelegation(deps: GovDeps, id: string, tenantHint?: string): Promise<DelegationRecord> {
  const t = await delegationTenant(deps, id, tenantHint);
  const d = await governanceRepo(deps.db, t).getDelegation(id);
  if (!d) throw notFound('delegation', id);
  return delegationOut(d);
}

export async function listDelegations(deps: GovDeps, q: { tenant?: string; agent?: string; status?: DelegationStatus }): Promise<DelegationRecord[]> {
  const tenants = q.tenant !== undefined ? [q.tenant] : await governanceTenants(deps.db);
  const out: DelegationRow[] = [];
  for (const t of tenants) out.push(...(await governanceRepo(deps.db, t).listDelegations({ agent: q.agent, status: q.status })));
  // Newest first: by creation time across tenants, by insertion sequence within one.
  if (tenants.length > 1) out.sort((a, b) => (iso(a.createdAt) < iso(b.createdAt) ? 1 : iso(a.createdAt) > iso(b.createdAt) ? -1 : b.seq - a.seq));
  return out.map(delegationOut);
}

/**
 * SPEC 3.4: usable only for an active, non-expired delegation. Also denied (fail closed) when its
 * agent is gone or not approved/active (the cascade would invalidate it on its next run).
 */
export async function usable(deps: GovDeps, id: string, tenantHint?: string): Promise<{ usable: boolean; status: DelegationStatus; reason: string | null }> {
  const t = await delegationTenant(deps, id, tenantHint);
  const repo = governanceRepo(deps.db, t);
  const d = await repo.getDelegation(id);
  if (!d) throw notFound('delegation', id);
  if (d.status !== 'active')
    return { usable: false, status: d.status, reason: d.revocationReason ?? (d.status === 'expired' ? 'delegation_expired' : `delegation_${d.status}`) };
  if (d.expiresAt !== null && d.expiresAt <= Math.floor(deps.now() / 1000)) return { usable: false, status: d.status, reason: 'delegation_expired' };
  const agent = await repo.getAgent(d.agentId);
  if (!agent || !GRANTABLE_AGENT.has(agent.status)) return { usable: false, status: d.status, reason: agent ? `agent_${agent.status}` : 'agent_missing' };
  return { usable: true, status: d.status, reason: null };
}

export async function revokeDelegation(deps: GovDeps, id: string, b: { reason?: RevokeReason; by?: string }, tenantHint?: string): Promise<DelegationRecord> {
  const t = await delegationTenant(deps, id, tenantHint);
  return deps.db.transaction(async (tx) => {
    const repo = governanceRepo(tx, t);
    await repo.lock();
    const d = await repo.getDelegation(id);
    if (!d) throw notFound('delegation', id);
    if (!LIVE_DELEGATION.has(d.status))
      throw conflict('not_live', `delegation ${id} is ${d.status}; only pending, approved or active delegations can be revoked`, { status: d.status });
    const reason = b.reason ?? 'manual_admin_revocation';
    const by = b.by ?? 'admin';
    const at = new Date(deps.now()).toISOString();
    await repo.updateDelegation(id, { status: 'revoked', vcStatus: 'revoked', revokedAt: at, revocationReason: reason }, [
      { at, action: 'revoke', by, detail: reason },
    ]);
    await repo.appendLog([
      { kind: 'delegation_revoke', reasonCode: reason, agentId: d.agentId, delegationId: id, source: 'admin', by, detail: 'manual revocation', at },
    ]);
    return delegationOut((await repo.getDelegation(id))!);
  });
}

const ZERO: CascadeCounts = {
  agents_suspended: 0,
  agents_quarantined: 0,
  delegations_revoked: 0,
  delegations_invalidated: 0,
  delegations_expired: 0,
  by_reason: {},
};

/** POST /v1/revocation/cascade: one transaction per tenant; counts summed when no tenant is named. */
export async function cascadeNow(deps: GovDeps, tenant: string | undefined, by: string): Promise<CascadeCounts> {
  const tenants = tenant !== undefined ? [tenant] : await governanceTenants(deps.db);
  const sum: CascadeCounts = { ...ZERO, by_reason: {} };
  for (const t of tenants) {
    const c = await deps.db.transaction((tx) => runCascade(tx, t, { now: deps.now(), source: 'admin', by }));
    sum.agents_suspended += c.agents_suspended;
    sum.agents_quarantined += c.agents_quarantined;
    sum.delegations_revoked += c.delegations_revoked;
    sum.delegations_invalidated += c.delegations_invalidated;
    sum.delegations_expired += c.delegations_expired;
    for (const [k, v] of Object.entries(c.by_reason)) sum.by_reason[k] = (sum.by_reason[k] ?? 0) + v;
  }
  await deps.changes?.settled(); // every replica has the suspensions and revocations when this answers
  return sum;
}

export async function revocationLog(deps: GovDeps, tenant: string | undefined, limit: number): Promise<RevocationLogRecord[]> {
  const tenants = tenant !== undefined ? [tenant] : await governanceTenants(deps.db);
  const out: RevocationLogRecord[] = [];
  for (const t of tenants) out.push(...(await governanceRepo(deps.db, t).listLog(limit)));
  if (tenants.length > 1) out.sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : 0));
  return out.slice(0, limit);
}
