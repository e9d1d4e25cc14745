/**
 * Governed agents (SPEC 2.8, 3.1, 4.4): register, read with live owner health, transition and
 * transfer ownership (issues and the portal summary: reports.ts). Every write is one transaction
 * under the tenant's governance lock; every read and write goes through the tenant-scoped
 * repositories.
 */
import { revokeMemberships } from './standing.js';
import { badRequest, conflict, isUniqueViolation, notFound } from '../../../lib/errors.js';
import type { Db } from '../../../store/factory.js';
import type { ChangeFeed } from '../../change-feed.js';
import type { HistoryEntry } from '../../../store/schema/governance.js';
import { iso } from '../directory/repo.js';
import { tenantOfSubject, type DbOrTx } from '../tenant.js';
import { employeeHealth, groupKeyIn, lazyView, ownerHealth, preloadedView, type DirectoryView } from './directory-view.js';
import { activationBlockers, AGENT_STATUSES, canTransition, INACTIVE_AGENT, TRANSITIONS, type AgentStatus, type OwnerType, type PartyHealth } from './model.js';
import { governanceRepo, governanceTenants, tenantOfAgent, type AgentRow, type GovernanceRepo, type LogEntry } from './repo.js';

export interface GovDeps {
  db: Db;
  /** Epoch milliseconds. */
  now: () => number;
  /**
   * The change feed's barrier: a governed agent's registration or status move answers once every
   * replica has it (its standing, the Membership VCs it revoked).
   */
  changes?: Pick<ChangeFeed, 'settled'>;
}

export interface AgentRecord {
  agent_name: string;
  tenant_id: string;
  owner_type: OwnerType;
  owner_ref: string;
  team_ref: string | null;
  business_sponsor: string | null;
  risk_tier: 'low' | 'medium' | 'high' | 'critical' | null;
  approved_runtime: string | null;
  status: AgentStatus;
  created_by: string | null;
  created_at: string;
  updated_at: string;
  last_reviewed_at: string | null;
  history: HistoryEntry[];
  owner_display: string | null;
  owner_ok: boolean;
  owner_active: boolean;
  sponsor_display?: string | null;
  sponsor_active?: boolean;
  activation_blockers: string[];
}

export interface Health {
  owner: PartyHealth;
  sponsor?: PartyHealth;
  blockers: string[];
}

export async function healthOf(view: DirectoryView, a: AgentRow): Promise<Health> {
  const owner = await ownerHealth(view, a.ownerType, a.ownerRef);
  const sponsor = a.businessSponsor ? employeeHealth(await view.employee(a.businessSponsor)) : undefined;
  return { owner, sponsor, blockers: activationBlockers({ owner, sponsor, riskTier: a.riskTier, approvedRuntime: a.approvedRuntime }) };
}

export function agentOut(a: AgentRow, h: Health): AgentRecord {
  const out: AgentRecord = {
    agent_name: a.agentName,
    tenant_id: a.tenantId,
    owner_type: a.ownerType,
    owner_ref: a.ownerRef,
    team_ref: a.teamRef,
    business_sponsor: a.businessSponsor,
    risk_tier: a.riskTier,
    approved_runtime: a.approvedRuntime,
    status: a.status,
    created_by: a.createdBy,
    created_at: iso(a.createdAt),
    updated_at: iso(a.updatedAt),
    last_reviewed_at: iso(a.lastReviewedAt),
    history: a.history,
    owner_display: h.owner.display,
    owner_ok: h.owner.ok,
    owner_active: h.owner.ok && h.owner.active,
    activation_blockers: h.blockers,
  };
  if (h.sponsor) {
    out.sponsor_display = h.sponsor.display;
    out.sponsor_active = h.sponsor.ok && h.sponsor.active;
  }
  return out;
}

/**
 * Resolves an owner reference in the tenant to its canonical form: an employee subject (a subject,
 * external id, email or unique display name is accepted) or a group key `<tenant>:<ext>` (a bare
 * external id is accepted). undefined when it does not resolve; cross-tenant references never do.
 */
export async function resolveOwner(view: DirectoryView, type: OwnerType, ref: string): Promise<{ ref: string; health: PartyHealth } | undefined> {
  if (type === 'employee') {
    const e = (await view.employee(ref)) ?? (await view.findEmployee(ref));
    return e ? { ref: e.employee_subject, health: employeeHealth(e) } : undefined;
  }
  const key = groupKeyIn(view.tenantId, ref);
  if (!key || !(await view.group(key))) return undefined;
  return { ref: key, health: await ownerHealth(view, type, key) };
}

const crossTenant = (tenant: string, ref: string) => {
  const t = ref.includes(':') ? (ref.split(':').length >= 3 ? tenantOfSubject(ref) : ref.slice(0, ref.indexOf(':'))) : undefined;
  return t !== undefined && t !== tenant;
};

export interface RegisterInput {
  agentName: string;
  tenantId: string;
  ownerType: OwnerType;
  ownerRef: string;
  teamRef?: string;
  businessSponsor?: string;
  riskTier?: 'low' | 'medium' | 'high' | 'critical';
  approvedRuntime?: string;
  createdBy?: string;
}

/** An owner reference resolved in tenant `t`, or 400 (unknown or cross-tenant). */
async function ownerIn(view: DirectoryView, t: string, type: OwnerType, ref: string): Promise<{ ref: string; health: PartyHealth }> {
  if (crossTenant(t, ref)) throw badRequest('owner_cross_tenant', `owner ${JSON.stringify(ref)} belongs to another tenant`);
  const owner = await resolveOwner(view, type, ref);
  if (!owner) throw badRequest('owner_unresolved', `owner ${JSON.stringify(ref)} is not a ${type === 'employee' ? 'unique employee' : 'group'} of tenant ${t}`);
  return owner;
}

/** A team reference names a group of this tenant (stored as its group key); another tenant's group denies (SPEC 7). */
async function teamIn(view: DirectoryView, t: string, ref: string | null): Promise<string | null> {
  if (ref === null) return null;
  if (crossTenant(t, ref)) throw badRequest('team_cross_tenant', `team ${JSON.stringify(ref)} belongs to another tenant`);
  const key = groupKeyIn(t, ref);
  if (!key || !(await view.group(key))) throw badRequest('team_unresolved', `team ${JSON.stringify(ref)} is not a group of tenant ${t}`);
  return key;
}

/** A business sponsor names a unique employee of this tenant (stored as the subject). */
async function sponsorIn(view: DirectoryView, t: string, ref: string | null): Promise<string | null> {
  if (ref === null) return null;
  const s = crossTenant(t, ref) ? undefined : ((await view.employee(ref)) ?? (await view.findEmployee(ref)));
  if (!s) throw badRequest('sponsor_unresolved', `business sponsor ${JSON.stringify(ref)} is not a unique employee of tenant ${t}`);
  return s.employee_subject;
}

/**
 * Registration inside the caller's transaction, under the tenant's lock (`repo.lock()` taken):
 * always `draft`; `managedBy` records the producer that manages it (apply.ts), null from the API.
 */
export async function registerIn(
  tx: DbOrTx,
  repo: GovernanceRepo,
  b: RegisterInput,
  at: string,
  managedBy: string | null = null,
  by = b.createdBy ?? 'unknown',
): Promise<AgentRow> {
  const t = repo.tenantId;
  if ((await tenantOfAgent(tx, b.agentName)) !== undefined) throw conflict('agent_exists', `governed agent ${JSON.stringify(b.agentName)} already exists`);
  const view = lazyView(tx, t);
  const owner = await ownerIn(view, t, b.ownerType, b.ownerRef);
  const team = await teamIn(view, t, b.teamRef ?? null);
  const sponsor = await sponsorIn(view, t, b.businessSponsor ?? null);
  const detail = owner.health.active ? `owner ${owner.ref}` : `owner ${owner.ref} is inactive: the agent stays draft until ownership is fixed`;
  await repo.insertAgent({
    agentName: b.agentName,
    ownerType: b.ownerType,
    ownerRef: owner.ref,
    teamRef: team,
    businessSponsor: sponsor,
    riskTier: b.riskTier ?? null,
    approvedRuntime: b.approvedRuntime ?? null,
    status: 'draft',
    createdBy: b.createdBy ?? null,
    managedBy,
    createdAt: at,
    updatedAt: at,
    history: [{ at, action: 'registered', by, detail }],
  });
  return (await repo.getAgent(b.agentName))!;
}

/** SPEC 3.1: every agent starts `draft`; an unknown or cross-tenant owner (or sponsor) is 400. */
export async function registerAgent(deps: GovDeps, b: RegisterInput): Promise<AgentRecord> {
  try {
    const made = await deps.db.transaction(async (tx) => {
      const repo = governanceRepo(tx, b.tenantId);
      await repo.lock();
      const row = await registerIn(tx, repo, b, new Date(deps.now()).toISOString());
      return agentOut(row, await healthOf(lazyView(tx, b.tenantId), row));
    });
    await deps.changes?.settled();
    return made;
  } catch (e) {
    // Names are unique across tenants; a concurrent registration in another tenant lost the race.
    if (isUniqueViolation(e)) throw conflict('agent_exists', `governed agent ${JSON.stringify(b.agentName)} already exists`);
    throw e;
  }
}

/** The tenant that holds `name`, or 404 (also when `tenantHint` names another tenant). */
export async function agentTenant(db: DbOrTx, name: string, tenantHint?: string): Promise<string> {
  const t = await tenantOfAgent(db, name);
  if (t === undefined || (tenantHint !== undefined && tenantHint !== t)) throw notFound('governed agent', name);
  return t;
}

export async function getAgent(deps: GovDeps, name: string, tenantHint?: string): Promise<AgentRecord> {
  const t = await agentTenant(deps.db, name, tenantHint);
  const row = await governanceRepo(deps.db, t).getAgent(name);
  if (!row) throw notFound('governed agent', name);
  return agentOut(row, await healthOf(lazyView(deps.db, t), row));
}

/** The tenants a read covers: the one given, else every tenant with governance state (assembled per tenant). */
export async function tenantsOf(db: Db, tenant?: string): Promise<string[]> {
  return tenant !== undefined ? [tenant] : governanceTenants(db);
}

export async function listAgents(deps: GovDeps, q: { tenant?: string; status?: AgentStatus }): Promise<AgentRecord[]> {
  const out: AgentRecord[] = [];
  for (const t of await tenantsOf(deps.db, q.tenant)) {
    const rows = await governanceRepo(deps.db, t).listAgents({ status: q.status });
    if (!rows.length) continue;
    const view = await preloadedView(deps.db, t);
    for (const r of rows) out.push(agentOut(r, await healthOf(view, r)));
  }
  return out;
}

/**
 * Invalidates the live delegations of an agent that just left service (SPEC 3.4 `agent_inactive`),
 * in the caller's transaction, so no live delegation survives on a suspended/quarantined/retired
 * agent between cascades.
 */
export async function invalidateAgentDelegations(repo: GovernanceRepo, agent: string, at: string, by: string, status: AgentStatus): Promise<number> {
  const live = await repo.listDelegations({ agent, live: true });
  const detail = `agent is ${status}`;
  await repo.moveDelegations(
    live.map((d) => ({
      id: d.delegationId,
      status: 'invalidated',
      vcStatus: 'revoked',
      revokedAt: at,
      reason: 'agent_inactive',
      history: { at, action: 'invalidate', by, detail: `agent_inactive: ${detail}` },
    })),
  );
  const log: LogEntry[] = live.map((d) => ({
    kind: 'delegation_invalidate',
    reasonCode: 'agent_inactive',
    agentId: agent,
    delegationId: d.delegationId,
    source: 'admin',
    by,
    detail,
    at,
  }));
  await repo.appendLog(log);
  return live.length;
}

/**
 * One SPEC 3.1 manual move of the locked `row`, in the caller's transaction: 409 bad_transition
 * off the table, 409 activation_blocked at the gate. Moves out of service invalidate the agent's
 * live delegations and revoke its Membership VC in the same transaction.
 */
export async function moveIn(tx: DbOrTx, repo: GovernanceRepo, row: AgentRow, to: string, by: string, at: string): Promise<AgentRow> {
  const name = row.agentName;
  const from = row.status;
  if (!(AGENT_STATUSES as readonly string[]).includes(to) || !canTransition(from, to as AgentStatus)) {
    throw conflict('bad_transition', `cannot move governed agent ${name} from ${from} to ${to}`, { from, to, allowed: [...TRANSITIONS[from]] });
  }
  const next = to as AgentStatus;
  if (next === 'active') {
    const { blockers } = await healthOf(lazyView(tx, repo.tenantId), row);
    if (blockers.length) throw conflict('activation_blocked', `activation gate not met: ${blockers.join(', ')}`, { blockers });
  }
  const reviewed = next === 'approved' || next === 'active' ? { lastReviewedAt: at } : {};
  await repo.updateAgent(name, { status: next, updatedAt: at, ...reviewed }, [{ at, action: 'transition', by, detail: `${from} -> ${next}` }]);
  if (INACTIVE_AGENT.has(next)) {
    await invalidateAgentDelegations(repo, name, at, by, next);
    await revokeMemberships(tx, repo, [name], at, 'admin', by, 'agent_inactive');
  }
  return (await repo.getAgent(name))!;
}

/** SPEC 3.1 manual move: 409 bad_transition off the table, 409 activation_blocked at the gate. */
export async function transitionAgent(deps: GovDeps, name: string, to: string, by = 'unknown', tenantHint?: string): Promise<AgentRecord> {
  const t = await agentTenant(deps.db, name, tenantHint);
  const moved = await deps.db.transaction(async (tx) => {
    const repo = governanceRepo(tx, t);
    await repo.lock();
    const row = await repo.getAgent(name);
    if (!row) throw notFound('governed agent', name);
    const updated = await moveIn(tx, repo, row, to, by, new Date(deps.now()).toISOString());
    return agentOut(updated, await healthOf(lazyView(tx, t), updated));
  });
  await deps.changes?.settled();
  return moved;
}

/** The new owner must resolve in the agent's tenant and be active, otherwise 400. */
export async function transferOwnership(
  deps: GovDeps,
  name: string,
  b: { ownerType: OwnerType; ownerRef: string; by?: string },
  tenantHint?: string,
): Promise<AgentRecord> {
  return updateAgentFields(deps, name, { ownerType: b.ownerType, ownerRef: b.ownerRef }, b.by ?? 'unknown', tenantHint, { activeOwner: true });
}

/** The fields of a governed agent that an update sets (SPEC 2.8); null clears an optional one. */
export interface FieldsInput {
  ownerType?: OwnerType;
  ownerRef?: string;
  teamRef?: string | null;
  businessSponsor?: string | null;
  riskTier?: 'low' | 'medium' | 'high' | 'critical' | null;
  approvedRuntime?: string | null;
}

type Fields = Pick<AgentRow, 'ownerType' | 'ownerRef' | 'teamRef' | 'businessSponsor' | 'riskTier' | 'approvedRuntime'>;

/** `patch` resolved in the tenant to the stored form (owner subject or group key, team key, sponsor subject), or 400. */
async function resolvedFields(view: DirectoryView, row: AgentRow, patch: FieldsInput): Promise<{ set: Partial<Fields>; ownerActive: boolean }> {
  const t = row.tenantId;
  const set: Partial<Fields> = {};
  let ownerActive = true;
  if (patch.ownerRef !== undefined || patch.ownerType !== undefined) {
    const type = patch.ownerType ?? row.ownerType;
    const owner = await ownerIn(view, t, type, patch.ownerRef ?? row.ownerRef);
    set.ownerType = type;
    set.ownerRef = owner.ref;
    ownerActive = owner.health.active;
  }
  if (patch.teamRef !== undefined) set.teamRef = await teamIn(view, t, patch.teamRef);
  if (patch.businessSponsor !== undefined) set.businessSponsor = await sponsorIn(view, t, patch.businessSponsor);
  if (patch.riskTier !== undefined) set.riskTier = patch.riskTier;
  if (patch.approvedRuntime !== undefined) set.approvedRuntime = patch.approvedRuntime;
  return { set, ownerActive };
}

const FIELD_NAMES: Record<Exclude<keyof Fields, 'ownerType' | 'ownerRef'>, string> = {
  teamRef: 'team_ref',
  businessSponsor: 'business_sponsor',
  riskTier: 'risk_tier',
  approvedRuntime: 'approved_runtime',
};

/** One history entry per changed field (an owner change is an `ownership_transferred`); empty: nothing changes. */
export function fieldChanges(row: Fields, set: Partial<Fields>, at: string, by: string): HistoryEntry[] {
  const out: HistoryEntry[] = [];
  const type = set.ownerType ?? row.ownerType;
  const ref = set.ownerRef ?? row.ownerRef;
  if (type !== row.ownerType || ref !== row.ownerRef)
    out.push({ at, action: 'ownership_transferred', by, detail: `${row.ownerType}:${row.ownerRef} -> ${type}:${ref}` });
  for (const [k, col] of Object.entries(FIELD_NAMES) as [keyof typeof FIELD_NAMES, string][]) {
    const v = set[k];
    if (v !== undefined && v !== row[k]) out.push({ at, action: 'updated', by, detail: `${col}: ${JSON.stringify(row[k])} -> ${JSON.stringify(v)}` });
  }
  return out;
}

/**
 * Sets the changed fields of the locked `row` in the caller's transaction, one history entry each
 * (`by`: the principal). Nothing changed: nothing is written (no row touched, no history entry).
 * A new owner must resolve and be active (as a transfer); a retired agent is terminal (409).
 */
export async function updateFieldsIn(
  repo: GovernanceRepo,
  view: DirectoryView,
  row: AgentRow,
  patch: FieldsInput,
  by: string,
  at: string,
  opts: { activeOwner?: boolean } = {},
): Promise<AgentRow> {
  const name = row.agentName;
  if (row.status === 'retired') throw conflict('bad_transition', `governed agent ${name} is retired (terminal)`, { from: 'retired', allowed: [] });
  const { set, ownerActive } = await resolvedFields(view, row, patch);
  const history = fieldChanges(row, set, at, by);
  const transferred = history.some((h) => h.action === 'ownership_transferred');
  // The owner an agent moves to must be active; a transfer (SPEC 4.4) says so even when it names the current one.
  if ((transferred || opts.activeOwner) && !ownerActive) throw badRequest('owner_inactive', `new owner ${set.ownerRef} is inactive`);
  if (!history.length) return row;
  await repo.updateAgent(name, { ...set, updatedAt: at, ...(transferred ? { lastReviewedAt: at } : {}) }, history);
  return (await repo.getAgent(name))!;
}

/** PATCH /v1/governance/agents/{name}: one transaction under the tenant's governance lock. */
export async function updateAgentFields(
  deps: GovDeps,
  name: string,
  patch: FieldsInput,
  by: string,
  tenantHint?: string,
  opts: { activeOwner?: boolean } = {},
): Promise<AgentRecord> {
  const t = await agentTenant(deps.db, name, tenantHint);
  return deps.db.transaction(async (tx) => {
    const repo = governanceRepo(tx, t);
    await repo.lock();
    const row = await repo.getAgent(name);
    if (!row) throw notFound('governed agent', name);
    const view = lazyView(tx, t);
    const updated = await updateFieldsIn(repo, view, row, patch, by, new Date(deps.now()).toISOString(), opts);
    return agentOut(updated, await healthOf(view, updated));
  });
}
