/**
 * Revocation cascade (SPEC 3.4) for ONE tenant, inside the caller's transaction: the directory
 * sync calls it with the new directory state uncommitted (source `auto`), POST
 * /v1/revocation/cascade calls it on demand (source `admin`). Load facts -> plan (pure, model.ts)
 * -> write status moves, history entries and log rows. Only live records move, so a second run
 * with nothing changed moves nothing. Every statement goes through the tenant-scoped repos.
 */
import type { DbOrTx } from '../tenant.js';
import { revokeMemberships } from './standing.js';
import { groupKeyIn, ownerHealth, preloadedView, employeeHealth } from './directory-view.js';
import {
  countPlan,
  logKindOf,
  planCascade,
  vcStatusOf,
  type CascadeAgentFact,
  type CascadeCounts,
  type CascadeDelegationFact,
  type CascadePlan,
} from './model.js';
import { governanceRepo, type LogEntry } from './repo.js';

export type { CascadeCounts };

export interface CascadeOptions {
  /** Epoch milliseconds. */
  now: number;
  source: 'auto' | 'admin';
  by: string;
}

/** Loads the tenant's facts and plans the cascade without writing anything. */
export async function planTenantCascade(tx: DbOrTx, tenantId: string, nowMs: number): Promise<CascadePlan> {
  const repo = governanceRepo(tx, tenantId);
  const [agents, live] = [await repo.listAgents(), await repo.listDelegations({ live: true })];
  if (!agents.length && !live.length) return { agents: [], delegations: [] };
  const view = await preloadedView(tx, tenantId);
  const agentFacts: CascadeAgentFact[] = [];
  for (const a of agents) {
    agentFacts.push({
      name: a.agentName,
      status: a.status,
      owner: await ownerHealth(view, a.ownerType, a.ownerRef),
      ownerIsEmployee: a.ownerType === 'employee',
      sponsor: a.businessSponsor ? employeeHealth(await view.employee(a.businessSponsor)) : undefined,
    });
  }
  const delegationFacts: CascadeDelegationFact[] = [];
  for (const d of live) {
    const grantor = await view.employee(d.grantedBy);
    let inGroup: boolean | undefined;
    if (d.requiredGroup) {
      const key = groupKeyIn(tenantId, d.requiredGroup);
      inGroup = !!key && (await view.isMember(d.grantedBy, key));
    }
    delegationFacts.push({
      id: d.delegationId,
      agentId: d.agentId,
      status: d.status,
      expiresAt: d.expiresAt,
      grantorActive: grantor?.status === 'active',
      grantorInRequiredGroup: inGroup,
    });
  }
  return planCascade(agentFacts, delegationFacts, nowMs);
}

/**
 * Runs the cascade for `tenantId` in `tx` (a drizzle db or transaction). When given a bare db
 * the writes are still consistent per row, but callers should pass a transaction so the
 * cascade commits or rolls back as one unit with whatever caused it.
 */
export async function runCascade(tx: DbOrTx, tenantId: string, opts: CascadeOptions): Promise<CascadeCounts> {
  const repo = governanceRepo(tx, tenantId);
  await repo.lock();
  const plan = await planTenantCascade(tx, tenantId, opts.now);
  const at = new Date(opts.now).toISOString();
  const log: LogEntry[] = [];
  // One statement per kind of write, whatever the number of moves (a reorg can move thousands).
  await repo.moveAgents(
    plan.agents.map((m) => ({
      name: m.name,
      status: m.to,
      history: { at, action: m.to === 'suspended' ? 'cascade_suspend' : 'cascade_quarantine', by: opts.by, detail: `${m.reason}: ${m.detail}` },
    })),
    at,
  );
  // Suspension and quarantine also revoke the agent's Membership VC (log kind vc_revoke).
  const byReason = new Map<string, string[]>();
  for (const m of plan.agents) byReason.set(m.reason, [...(byReason.get(m.reason) ?? []), m.name]);
  for (const [reason, names] of byReason) await revokeMemberships(tx, repo, names, at, opts.source, opts.by, reason);
  for (const m of plan.agents) {
    log.push({
      kind: m.to === 'suspended' ? 'agent_suspend' : 'agent_quarantine',
      reasonCode: m.reason,
      agentId: m.name,
      delegationId: null,
      source: opts.source,
      by: opts.by,
      detail: m.detail,
      at,
    });
  }
  await repo.moveDelegations(
    plan.delegations.map((m) => ({
      id: m.id,
      status: m.to,
      vcStatus: vcStatusOf(m.to),
      revokedAt: m.to === 'expired' ? null : at,
      reason: m.reason,
      history: {
        at,
        action: `cascade_${m.to === 'revoked' ? 'revoke' : m.to === 'expired' ? 'expire' : 'invalidate'}`,
        by: opts.by,
        detail: `${m.reason}: ${m.detail}`,
      },
    })),
  );
  for (const m of plan.delegations) {
    log.push({ kind: logKindOf(m.to), reasonCode: m.reason, agentId: m.agentId, delegationId: m.id, source: opts.source, by: opts.by, detail: m.detail, at });
  }
  await repo.appendLog(log);
  return countPlan(plan);
}
