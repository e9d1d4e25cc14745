/**
 * Governance reports (SPEC 4.4): the issues of non-retired agents and the portal summary
 * (totals, posture buckets, breakdowns by owner and department, the ungoverned fleet). Read-only,
 * computed now from the directory, tenant by tenant through the tenant-scoped repositories.
 */
import { count, notExists, eq, and } from 'drizzle-orm';
import type { Db } from '../../../store/factory.js';
import { governedAgents } from '../../../store/schema/governance.js';
import { agents as identityAgents } from '../../../store/schema/identity.js';
import { healthOf, tenantsOf, type GovDeps } from './agents.js';
import { preloadedView } from './directory-view.js';
import { AGENT_STATUSES, type AgentStatus } from './model.js';
import { departmentBucket, ownerBucket, postureOf, type Posture } from './policy.js';
import { governanceRepo } from './repo.js';

export interface IssueRecord {
  agent_name: string;
  tenant_id: string;
  type: 'owner_missing' | 'owner_inactive' | 'incomplete_active';
  detail: string;
  status: AgentStatus;
}

/** Issues of non-retired agents, computed now from the directory (status = the agent's status). */
export async function listIssues(deps: GovDeps, tenant?: string): Promise<IssueRecord[]> {
  const out: IssueRecord[] = [];
  for (const t of await tenantsOf(deps.db, tenant)) {
    const rows = (await governanceRepo(deps.db, t).listAgents()).filter((r) => r.status !== 'retired');
    if (!rows.length) continue;
    const view = await preloadedView(deps.db, t);
    for (const r of rows) {
      const h = await healthOf(view, r);
      const base = { agent_name: r.agentName, tenant_id: t, status: r.status };
      if (!h.owner.ok) out.push({ ...base, type: 'owner_missing', detail: `owner ${r.ownerType}:${r.ownerRef} does not resolve in the tenant` });
      else if (!h.owner.active) out.push({ ...base, type: 'owner_inactive', detail: `owner ${h.owner.display ?? r.ownerRef} is inactive` });
      const rest = h.blockers.filter((x) => !x.startsWith('owner_'));
      if (r.status === 'active' && rest.length) out.push({ ...base, type: 'incomplete_active', detail: `active without: ${rest.join(', ')}` });
    }
  }
  return out;
}

type PostureCounts = Record<Posture, number>;
const zeroPosture = (): PostureCounts => ({ owner_inactive: 0, blocked: 0, active_healthy: 0, other: 0 });

/**
 * Identity-authority agents (SPEC 2.5) with no governed record: the ungoverned fleet. A governed
 * record governs the identity agent of its name whatever tenant it is in: names are unique across
 * tenants and the standing the data plane enforces is applied by name (standing.ts), while the
 * identity authority keeps its agents in one tenant of its own. `tenant` filters the identity
 * agents by their tenant.
 */
async function countUngoverned(db: Db, tenant?: string): Promise<number> {
  const noRecord = notExists(db.select({ n: governedAgents.agentName }).from(governedAgents).where(eq(governedAgents.agentName, identityAgents.name)));
  const rows = await db
    .select({ n: count() })
    .from(identityAgents)
    .where(tenant !== undefined ? and(eq(identityAgents.tenantId, tenant), noRecord) : noRecord);
  return Number(rows[0]?.n ?? 0);
}

export async function summary(deps: GovDeps, tenant?: string) {
  const posture = zeroPosture();
  const byStatus: Record<string, number> = Object.fromEntries(AGENT_STATUSES.map((s) => [s, 0]));
  const owners = new Map<
    string,
    { key: string; owner_type: string | null; owner_ref: string | null; display: string | null; agents: number; posture: PostureCounts }
  >();
  const depts = new Map<string, { key: string; agents: number; posture: PostureCounts }>();
  let governed = 0;
  let retired = 0;
  for (const t of await tenantsOf(deps.db, tenant)) {
    const rows = await governanceRepo(deps.db, t).listAgents();
    if (!rows.length) continue;
    const view = await preloadedView(deps.db, t);
    for (const r of rows) {
      byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
      if (r.status === 'retired') {
        retired++;
        continue;
      }
      governed++;
      const h = await healthOf(view, r);
      const p = postureOf(r.status, h.owner, h.blockers);
      posture[p]++;
      // Owner refs embed their tenant (subjects, group keys), so tenants never merge except in sentinels.
      const oKey = ownerBucket(r.ownerRef, h.owner);
      const sentinel = oKey !== r.ownerRef;
      const o = owners.get(oKey) ?? {
        key: oKey,
        owner_type: sentinel ? null : r.ownerType,
        owner_ref: sentinel ? null : r.ownerRef,
        display: sentinel ? null : h.owner.display,
        agents: 0,
        posture: zeroPosture(),
      };
      o.agents++;
      o.posture[p]++;
      owners.set(oKey, o);
      const dk = departmentBucket(h.owner);
      const d = depts.get(dk) ?? { key: dk, agents: 0, posture: zeroPosture() };
      d.agents++;
      d.posture[p]++;
      depts.set(dk, d);
    }
  }
  const order = <T extends { key: string; agents: number }>(m: Map<string, T>) =>
    [...m.values()].sort((a, b) => b.agents - a.agents || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  return {
    tenant_id: tenant ?? null,
    generated_at: new Date(deps.now()).toISOString(),
    totals: { governed, ungoverned: await countUngoverned(deps.db, tenant), retired, by_status: byStatus },
    posture,
    by_owner: order(owners),
    by_department: order(depts),
  };
}
