/**
 * The applier: one pass of reconcile -> apply -> status, shared by every source.
 *
 * 1. `reconcile(observed)` (pure) gives the desired registry entries, identity agents and
 *    governed agents.
 * 2. Registry: ONE `apply(services, {owner})`. It prunes what this owner held and no longer
 *    declares (deleted resources: the grant is withdrawn), rewrites an entry of ours that was
 *    changed by hand (drift), reports names another owner holds as conflicts, and writes nothing
 *    when nothing changed. Not even sent when the desired entries and the registry version are
 *    both what they were after the last apply.
 * 3. Identity agents: `POST /v1/agents` (idempotent on name), only when the declaration changed
 *    since this applier last registered it.
 * 4. Governed agents: one `GET /v1/governance/agents`; register the missing ones (createdBy =
 *    owner), transfer a changed owner, then walk the SPEC 3.1 table to the wanted state one
 *    `transition` at a time (by = owner), reporting the identity authority's answer (activation
 *    blockers included). An agent suspended or quarantined by someone else (the revocation
 *    cascade, an admin) is held there: the operator never undoes a security action. An agent this
 *    owner created that is no longer declared is withdrawn: moved to `suspended` if it could act.
 * 5. Statuses (status.ts) for every observed resource.
 */
import { TRANSITIONS, type AgentStatus } from '../runtime/identity/enterprise/governance/model.js';
import { errMsg } from '../runtime/lib/log.js';
import { errorText, postJson, type IdentityRequest, type RegistryPort } from './ports.js';
import { reconcile, type Desired, type DesiredGoverned, type ObservedWithAge } from './reconcile.js';
import { keyOf } from './resource.js';
import { statusFor, type ApplyResult, type CrStatus, type GovernedOutcome, type Outcome } from './status.js';

export interface ApplierOptions {
  /** The registry owner and governance actor: `folder:<path>`, `kubernetes:<cluster>`. */
  owner: string;
  registry: RegistryPort;
  /** Absent: identity agents and governed agents are not programmed (reported Pending). */
  identity?: IdentityRequest;
  now?: () => Date;
}

export interface PassResult {
  desired: Desired;
  outcome: Outcome;
  /** Resource key -> the status it should carry. */
  statuses: Map<string, CrStatus>;
  /** Keys of deleting resources whose withdrawal is complete (their finalizer may go). */
  withdrawn: string[];
}

interface GovRecord {
  agent_name: string;
  tenant_id: string;
  owner_type: string;
  owner_ref: string;
  team_ref: string | null;
  business_sponsor: string | null;
  risk_tier: string | null;
  approved_runtime: string | null;
  status: AgentStatus;
  created_by: string | null;
  history: { action: string; by: string }[];
  activation_blockers: string[];
}

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

const HOLDING: ReadonlySet<AgentStatus> = new Set(['suspended', 'quarantined']);
const CAN_ACT: ReadonlySet<AgentStatus> = new Set(['approved', 'active']);

export function createApplier(opts: ApplierOptions) {
  const now = opts.now ?? (() => new Date());
  const by = opts.owner;
  /** name -> JSON of the identity declaration last registered (skip unchanged re-posts). */
  const registered = new Map<string, string>();
  /**
   * The last successful apply: the same desired entries against an unchanged registry version
   * (nobody wrote anything since, not even by hand) would plan nothing, so it is not re-sent.
   */
  let last: { desired: string; result: ApplyResult } | undefined;

  async function applyRegistry(d: Desired): Promise<ApplyResult> {
    const desired = JSON.stringify(d.services);
    if (last && last.desired === desired && (await opts.registry.version()) === last.result.version) return last.result;
    const r = await opts.registry.apply(d.services, { owner: opts.owner, by });
    // What a re-apply would answer now: everything written is unchanged, the rest as it was.
    last = { desired, result: { ...r, created: [], updated: [], deleted: [], unchanged: [...r.unchanged, ...r.created, ...r.updated] } };
    return r;
  }

  async function identities(d: Desired, errors: Map<string, string>): Promise<void> {
    const req = opts.identity!;
    for (const a of d.identities) {
      const body = JSON.stringify({ name: a.name, role: a.role, capabilities: a.capabilities });
      if (registered.get(a.name) === body) continue;
      try {
        const r = await postJson(req, '/v1/agents', JSON.parse(body));
        if (r.status >= 300) errors.set(a.name, errorText(r.status, r.body));
        else registered.set(a.name, body);
      } catch (e) {
        errors.set(a.name, errMsg(e));
      }
    }
  }

  async function transition(name: string, tenant: string, to: AgentStatus): Promise<{ status: number; body: any }> {
    return postJson(opts.identity!, `/v1/governance/agents/${encodeURIComponent(name)}/transition?tenant=${encodeURIComponent(tenant)}`, { status: to, by });
  }

  /** Brings one governed agent to its declaration; returns what to report. */
  async function governOne(g: DesiredGoverned, cur: GovRecord | undefined): Promise<GovernedOutcome> {
    const req = opts.identity!;
    if (!cur) {
      const body: Record<string, unknown> = { agentName: g.name, tenantId: g.tenant, ownerType: g.ownerType, ownerRef: g.ownerRef, createdBy: by };
      for (const k of ['teamRef', 'businessSponsor', 'riskTier', 'approvedRuntime'] as const) if (g[k] !== undefined) body[k] = g[k];
      const r = await postJson(req, '/v1/governance/agents', body);
      if (r.status !== 201) return { blockers: [], reason: 'Rejected', message: errorText(r.status, r.body) };
      cur = r.body as GovRecord;
    }
    if (cur.tenant_id !== g.tenant)
      return { lifecycle: cur.status, blockers: cur.activation_blockers, reason: 'Rejected', message: `governed agent ${g.name} exists in another tenant` };
    if (cur.owner_type !== g.ownerType || cur.owner_ref !== g.ownerRef) {
      const r = await postJson(req, `/v1/governance/agents/${encodeURIComponent(g.name)}/transfer-ownership?tenant=${encodeURIComponent(g.tenant)}`, {
        ownerType: g.ownerType,
        ownerRef: g.ownerRef,
        by,
      });
      if (r.status !== 200)
        return { lifecycle: cur.status, blockers: cur.activation_blockers, reason: 'Rejected', message: `ownership transfer: ${errorText(r.status, r.body)}` };
      cur = r.body as GovRecord;
    }
    // Fields the identity authority has no update route for: say so instead of pretending.
    const drifted = (
      [
        ['teamRef', cur.team_ref],
        ['businessSponsor', cur.business_sponsor],
        ['riskTier', cur.risk_tier],
        ['approvedRuntime', cur.approved_runtime],
      ] as const
    ).filter(([k, v]) => (g[k] ?? null) !== v);
    const want = g.state as AgentStatus;
    if (cur.status === want) {
      if (drifted.length)
        return {
          lifecycle: cur.status,
          blockers: cur.activation_blockers,
          reason: 'Drifted',
          message: `cannot update ${drifted.map(([k, v]) => `${k} (registered ${JSON.stringify(v)})`).join(', ')}: the identity authority has no update route`,
        };
      return { lifecycle: cur.status, blockers: cur.activation_blockers };
    }
    if (cur.status === 'retired') return { lifecycle: cur.status, blockers: [], reason: 'Retired', message: 'the governed agent is retired (terminal)' };
    const last = cur.history[cur.history.length - 1];
    if (HOLDING.has(cur.status) && last && last.by !== by) {
      return {
        lifecycle: cur.status,
        blockers: cur.activation_blockers,
        reason: 'Held',
        message: `${cur.status} by ${last.by} (${last.action}); the operator does not undo it`,
      };
    }
    const path = pathTo(cur.status, want);
    if (!path)
      return { lifecycle: cur.status, blockers: cur.activation_blockers, reason: 'Rejected', message: `no SPEC 3.1 path from ${cur.status} to ${want}` };
    for (const step of path) {
      const r = await transition(g.name, g.tenant, step);
      if (r.status !== 200) {
        const blockers: string[] = r.body?.error?.blockers ?? cur.activation_blockers;
        const reason = r.body?.error?.code === 'activation_blocked' ? 'Blocked' : 'Rejected';
        return { lifecycle: cur.status, blockers, reason, message: errorText(r.status, r.body) };
      }
      cur = r.body as GovRecord;
    }
    return { lifecycle: cur.status, blockers: cur.activation_blockers };
  }

  async function governance(d: Desired, out: Map<string, GovernedOutcome>): Promise<boolean> {
    const res = await opts.identity!('/v1/governance/agents');
    if (res.status !== 200) throw new Error(`GET /v1/governance/agents: ${res.status}`);
    const all = (await res.json()) as GovRecord[];
    const byName = new Map(all.map((a) => [a.agent_name, a]));
    for (const g of d.governed) {
      try {
        out.set(g.name, await governOne(g, byName.get(g.name)));
      } catch (e) {
        out.set(g.name, { blockers: [], reason: 'ApplyFailed', message: errMsg(e) });
      }
    }
    // Withdraw: agents this owner created and no longer declares lose the ability to act.
    const declared = new Set(d.governed.map((g) => g.name));
    let complete = true;
    for (const a of all) {
      if (a.created_by !== by || declared.has(a.agent_name) || !CAN_ACT.has(a.status)) continue;
      const r = await transition(a.agent_name, a.tenant_id, 'suspended').catch(() => ({ status: 0, body: undefined }));
      if (r.status !== 200) complete = false;
    }
    return complete;
  }

  /** One pass over the observed set. `prev` holds the statuses the resources carry now. */
  /** The last pass: a source that hands the same observed array again (nothing changed) reuses it. */
  let memo: { observed: readonly ObservedWithAge[]; desired: Desired; apply?: ApplyResult; statuses: Map<string, CrStatus> } | undefined;

  async function run(observed: readonly ObservedWithAge[], prev: ReadonlyMap<string, CrStatus> = new Map()): Promise<PassResult> {
    const same = memo?.observed === observed;
    const desired = same ? memo!.desired : reconcile(observed);
    const outcome: Outcome = { identityErrors: new Map(), governed: new Map() };
    let withdrawnOk = true;
    try {
      outcome.apply = await applyRegistry(desired);
      outcome.version = outcome.apply.version;
    } catch (e) {
      outcome.applyError = errMsg(e);
      withdrawnOk = false;
    }
    if (opts.identity) {
      await identities(desired, outcome.identityErrors);
      try {
        withdrawnOk = (await governance(desired, outcome.governed)) && withdrawnOk;
      } catch (e) {
        withdrawnOk = false;
        for (const g of desired.governed) outcome.governed.set(g.name, { blockers: [], reason: 'ApplyFailed', message: errMsg(e) });
      }
    }
    // Same resources, the registry answer reused, nothing at the identity authority: same statuses.
    const governed = desired.governed.length > 0 || desired.identities.length > 0;
    if (same && outcome.apply && outcome.apply === memo!.apply && !governed && prev === memo!.statuses) {
      return { desired, outcome, statuses: memo!.statuses, withdrawn: withdrawnOk ? desired.deleting : [] };
    }
    const at = now()
      .toISOString()
      .replace(/\.\d+Z$/, 'Z');
    const statuses = new Map<string, CrStatus>();
    for (const r of observed) {
      if (r.deleting) continue;
      const key = desired.verdicts.has(`${keyOf(r)}@${r.origin}`) ? `${keyOf(r)}@${r.origin}` : keyOf(r);
      statuses.set(key, statusFor(r, desired, outcome, at, prev.get(key)));
    }
    memo = { observed, desired, apply: outcome.apply, statuses };
    return { desired, outcome, statuses, withdrawn: withdrawnOk ? desired.deleting : [] };
  }

  return { run, owner: opts.owner };
}

export type Applier = ReturnType<typeof createApplier>;
