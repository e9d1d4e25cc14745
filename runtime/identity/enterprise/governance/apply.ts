/**
 * The producers' declarative write path for governed agents (DESIGN principle 2, the registry's
 * `apply(desired, {owner})` model): a producer (`folder:<path>`, `kubernetes:<cluster>`) hands
 * its whole desired set; one transaction under the governance lock of every tenant it touches
 *
 * - registers what is missing (`draft`, `created_by` = `managed_by` = the owner),
 * - sets the fields that differ (owner, team, sponsor, risk tier, runtime: one history entry
 *   each, by the caller), then walks SPEC 3.1 to the declared status one manual move at a time
 *   (the gate applies; an agent suspended or quarantined by anyone else is held, never undone),
 * - retires (SPEC 3.1 `-> retired`, history kept) what the owner manages and no longer declares,
 * - and writes nothing at all when nothing differs (no row touched, no history entry).
 *
 * A name managed by another producer, or registered through the API by someone else, is a
 * conflict and is not touched. Each agent's refusal (400 owner, 409 gate, ...) is its own result;
 * the others proceed.
 */
import { ApiError, conflict, isUniqueViolation } from '../../../lib/errors.js';
import type { DbOrTx } from '../tenant.js';
import { agentOut, healthOf, moveIn, registerIn, updateFieldsIn, type AgentRecord, type FieldsInput, type GovDeps, type RegisterInput } from './agents.js';
import { preloadedView, type DirectoryView } from './directory-view.js';
import { pathTo, type AgentStatus } from './model.js';
import { governanceRepo, managedBy, tenantOfAgent, type AgentRow, type GovernanceRepo } from './repo.js';

export interface DesiredGoverned extends RegisterInput {
  status: AgentStatus;
}

export type ApplyOutcome = 'created' | 'updated' | 'unchanged' | 'conflict' | 'rejected' | 'blocked' | 'held' | 'retired';

export interface AgentApplyResult {
  agent_name: string;
  outcome: ApplyOutcome;
  /** Why, for every outcome but created/updated/unchanged. */
  message?: string;
  /** The agent as it stands after the apply (absent for a conflict or a refused registration). */
  agent?: AgentRecord;
}

export interface GovernanceApplyResult {
  owner: string;
  agents: AgentApplyResult[];
  /** Agents the owner managed and no longer declares, retired by this apply. */
  retired: string[];
}

const HOLDING: ReadonlySet<AgentStatus> = new Set(['suspended', 'quarantined']);

/** The declared fields as an update: what the declaration leaves out is cleared. */
const fieldsOf = (g: DesiredGoverned): FieldsInput => ({
  ownerType: g.ownerType,
  ownerRef: g.ownerRef,
  teamRef: g.teamRef ?? null,
  businessSponsor: g.businessSponsor ?? null,
  riskTier: g.riskTier ?? null,
  approvedRuntime: g.approvedRuntime ?? null,
});

interface Ctx {
  tx: DbOrTx;
  owner: string;
  /** History `by` of this apply's writes: the caller, and the owner it applied as. */
  by: string;
  at: string;
  /** Each tenant's directory, read once per apply (the apply writes no directory row). */
  views: Map<string, Promise<DirectoryView>>;
}

function viewOf(c: Ctx, tenant: string): Promise<DirectoryView> {
  let v = c.views.get(tenant);
  if (!v) c.views.set(tenant, (v = preloadedView(c.tx, tenant)));
  return v;
}

/** A move made by this producer (any of its callers), so the producer may move it back. */
const byProducer = (entryBy: string | undefined, c: Ctx) => entryBy === c.by || entryBy === c.owner || !!entryBy?.endsWith(`:${c.owner}`);

/** Walks the locked `row` to `want` along SPEC 3.1; the row after the walk or the refusal. */
async function walk(
  c: Ctx,
  repo: GovernanceRepo,
  row: AgentRow,
  want: AgentStatus,
): Promise<{ row: AgentRow; refusal?: Pick<AgentApplyResult, 'outcome' | 'message'> }> {
  if (row.status === want) return { row };
  if (row.status === 'retired') return { row, refusal: { outcome: 'retired', message: 'the governed agent is retired (terminal)' } };
  const last = row.history[row.history.length - 1];
  if (HOLDING.has(row.status) && !byProducer(last?.by, c))
    return { row, refusal: { outcome: 'held', message: `${row.status} by ${last?.by} (${last?.action}); a producer does not undo it` } };
  const path = pathTo(row.status, want);
  if (!path) return { row, refusal: { outcome: 'rejected', message: `no SPEC 3.1 path from ${row.status} to ${want}` } };
  for (const step of path) {
    try {
      row = await moveIn(c.tx, repo, row, step, c.by, c.at);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      return { row, refusal: { outcome: e.code === 'activation_blocked' ? 'blocked' : 'rejected', message: `${e.status} ${e.code}: ${e.message}` } };
    }
  }
  return { row };
}

/** Brings one declared agent to its declaration, in the apply's transaction (its tenant locked). */
async function applyOne(c: Ctx, g: DesiredGoverned): Promise<AgentApplyResult> {
  const name = g.agentName;
  const holder = await tenantOfAgent(c.tx, name);
  if (holder !== undefined && holder !== g.tenantId)
    return { agent_name: name, outcome: 'conflict', message: `governed agent ${name} exists in another tenant` };
  const repo = governanceRepo(c.tx, g.tenantId);
  const view = await viewOf(c, g.tenantId);
  let row = await repo.getAgent(name);
  let outcome: ApplyOutcome = 'unchanged';
  try {
    if (!row) {
      row = await registerIn(c.tx, repo, { ...g, createdBy: c.owner }, c.at, c.owner, c.by);
      outcome = 'created';
    } else {
      const manager = row.managedBy ?? (row.createdBy === c.owner ? c.owner : null);
      if (manager !== c.owner)
        return {
          agent_name: name,
          outcome: 'conflict',
          message: `governed agent ${name} is managed by ${row.managedBy ?? 'the API (registered by ' + (row.createdBy ?? 'unknown') + ')'}`,
        };
      if (row.managedBy === null) {
        // Registered by this producer before ownership was recorded: adopt it (recorded once).
        await repo.updateAgent(name, { managedBy: c.owner }, [{ at: c.at, action: 'managed', by: c.by, detail: `managed by ${c.owner}` }]);
        row = (await repo.getAgent(name))!;
        outcome = 'updated';
      }
      if (row.status !== 'retired') {
        const before = row;
        row = await updateFieldsIn(repo, view, row, fieldsOf(g), c.by, c.at);
        if (row !== before) outcome = 'updated';
      }
    }
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    const agent = row ? agentOut(row, await healthOf(view, row)) : undefined;
    return { agent_name: name, outcome: 'rejected', message: `${e.status} ${e.code}: ${e.message}`, ...(agent ? { agent } : {}) };
  }
  const from = row.status;
  const walked = await walk(c, repo, row, g.status);
  if (walked.row.status !== from && outcome === 'unchanged') outcome = 'updated';
  const agent = agentOut(walked.row, await healthOf(view, walked.row));
  return walked.refusal ? { agent_name: name, ...walked.refusal, agent } : { agent_name: name, outcome, agent };
}

/** Retires what the owner manages and no longer declares (already retired: nothing). */
async function prune(c: Ctx, owned: { tenantId: string; agentName: string }[], declared: ReadonlySet<string>): Promise<string[]> {
  const retired: string[] = [];
  for (const o of owned) {
    if (declared.has(o.agentName)) continue;
    const repo = governanceRepo(c.tx, o.tenantId);
    const row = await repo.getAgent(o.agentName);
    if (!row || row.status === 'retired') continue;
    await moveIn(c.tx, repo, row, 'retired', c.by, c.at);
    retired.push(o.agentName);
  }
  return retired;
}

/** `POST /v1/governance/agents/apply`: the owner's whole desired set, one transaction. */
export async function applyGoverned(deps: GovDeps, owner: string, desired: readonly DesiredGoverned[], by: string): Promise<GovernanceApplyResult> {
  const names = new Set<string>();
  for (const g of desired) {
    if (names.has(g.agentName)) throw conflict('duplicate_agent', `governed agent ${g.agentName} is declared twice`);
    names.add(g.agentName);
  }
  const sorted = [...desired].sort((a, b) => (a.agentName < b.agentName ? -1 : a.agentName > b.agentName ? 1 : 0));
  let wrote = false;
  try {
    const result = await deps.db.transaction(async (tx) => {
      const owned = await managedBy(tx, owner);
      // Every tenant this apply may write, locked in one order (no deadlock between producers).
      const tenants = [...new Set([...sorted.map((g) => g.tenantId), ...owned.map((o) => o.tenantId)])].sort();
      for (const t of tenants) await governanceRepo(tx, t).lock();
      const c: Ctx = { tx, owner, by, at: new Date(deps.now()).toISOString(), views: new Map() };
      const agents: AgentApplyResult[] = [];
      for (const g of sorted) agents.push(await applyOne(c, g));
      const retired = await prune(c, owned, names);
      wrote = retired.length > 0 || agents.some((a) => a.outcome !== 'unchanged' && a.outcome !== 'conflict');
      return { owner, agents, retired };
    });
    if (wrote) await deps.changes?.settled();
    return result;
  } catch (e) {
    // Names are unique across tenants; a concurrent registration elsewhere won the race: retry.
    if (isUniqueViolation(e)) throw conflict('agent_exists', 'a governed agent of this apply was registered concurrently: apply again');
    throw e;
  }
}
