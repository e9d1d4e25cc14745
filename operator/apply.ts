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
 * 3. Identity agents: ONE `POST /v1/agents/apply` with the owner's whole set, the same model:
 *    created, updated, retired when no longer declared (credentials revoked, record kept),
 *    conflicts for names another producer manages, nothing written when nothing changed.
 * 4. Governed agents: ONE `POST /v1/governance/agents/apply`: the identity authority registers
 *    the missing ones, sets changed fields (owner, team, sponsor, risk tier, runtime), walks
 *    SPEC 3.1 to the declared state (activation gate; an agent suspended or quarantined by
 *    someone else is held: never undone), retires what this owner manages and no longer
 *    declares, and writes nothing when nothing changed. Each agent's answer becomes its status.
 * 5. Statuses (status.ts) for every observed resource.
 */
import { errMsg } from '../runtime/lib/log.js';
import { errorText, postJson, type IdentityRequest, type RegistryPort } from './ports.js';
import { reconcile, type Desired } from './reconcile.js';
import type { ObservedWithAge } from './reconcile.js';
import { keyOf } from './resource.js';
import { statusFor, type ApplyResult, type CrStatus, type GovernedOutcome, type GovernedReason, type Outcome } from './status.js';

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

/** What `POST /v1/governance/agents/apply` answers for one declared agent. */
interface GovernedAnswer {
  agent_name: string;
  outcome: 'created' | 'updated' | 'unchanged' | 'conflict' | 'rejected' | 'blocked' | 'held' | 'retired';
  message?: string;
  agent?: { status: string; activation_blockers: string[] };
}

const REFUSALS: Partial<Record<GovernedAnswer['outcome'], GovernedReason>> = {
  conflict: 'Rejected',
  rejected: 'Rejected',
  blocked: 'Blocked',
  held: 'Held',
  retired: 'Retired',
};

/** One governed agent's answer as the outcome its status reports. */
export function governedOutcome(a: GovernedAnswer): GovernedOutcome {
  const out: GovernedOutcome = { blockers: a.agent?.activation_blockers ?? [] };
  if (a.agent) out.lifecycle = a.agent.status;
  const reason = REFUSALS[a.outcome];
  if (reason) {
    out.reason = reason;
    out.message = a.message ?? a.outcome;
  }
  return out;
}

export function createApplier(opts: ApplierOptions) {
  const now = opts.now ?? (() => new Date());
  /**
   * The last successful apply: the same desired entries against an unchanged registry version
   * (nobody wrote anything since, not even by hand) would plan nothing, so it is not re-sent.
   */
  let last: { desired: string; result: ApplyResult } | undefined;

  async function applyRegistry(d: Desired): Promise<ApplyResult> {
    const desired = JSON.stringify(d.services);
    if (last && last.desired === desired && (await opts.registry.version()) === last.result.version) return last.result;
    const r = await opts.registry.apply(d.services, { owner: opts.owner, by: opts.owner });
    // What a re-apply would answer now: everything written is unchanged, the rest as it was.
    last = { desired, result: { ...r, created: [], updated: [], deleted: [], unchanged: [...r.unchanged, ...r.created, ...r.updated] } };
    return r;
  }

  /** The owner's identity agents, one apply; a refused or failed apply is every agent's error. */
  async function identities(d: Desired, errors: Map<string, string>): Promise<boolean> {
    const agents = d.identities.map((a) => ({ name: a.name, role: a.role, capabilities: a.capabilities }));
    let r: { status: number; body: any };
    try {
      r = await postJson(opts.identity!, '/v1/agents/apply', { owner: opts.owner, agents });
    } catch (e) {
      r = { status: 0, body: errMsg(e) };
    }
    if (r.status !== 200) {
      for (const a of d.identities) errors.set(a.name, r.status ? errorText(r.status, r.body) : String(r.body));
      return false;
    }
    const owners: Record<string, string> = r.body.conflictOwners ?? {};
    for (const name of r.body.conflicts ?? []) errors.set(name, `identity agent ${name} is managed by ${owners[name] ?? 'another producer'}`);
    return true;
  }

  /** The owner's governed agents, one apply; false when it did not complete (nothing withdrawn for sure). */
  async function governance(d: Desired, out: Map<string, GovernedOutcome>): Promise<boolean> {
    const agents = d.governed.map((g) => {
      const a: Record<string, unknown> = { agentName: g.name, tenantId: g.tenant, ownerType: g.ownerType, ownerRef: g.ownerRef, status: g.state };
      for (const k of ['teamRef', 'businessSponsor', 'riskTier', 'approvedRuntime'] as const) if (g[k] !== undefined) a[k] = g[k];
      return a;
    });
    let r: { status: number; body: any };
    try {
      r = await postJson(opts.identity!, '/v1/governance/agents/apply', { owner: opts.owner, agents });
    } catch (e) {
      r = { status: 0, body: errMsg(e) };
    }
    if (r.status !== 200) {
      const message = r.status ? errorText(r.status, r.body) : String(r.body);
      for (const g of d.governed) out.set(g.name, { blockers: [], reason: 'ApplyFailed', message });
      return false;
    }
    for (const a of r.body.agents as GovernedAnswer[]) out.set(a.agent_name, governedOutcome(a));
    return true;
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
      withdrawnOk = (await identities(desired, outcome.identityErrors)) && withdrawnOk;
      withdrawnOk = (await governance(desired, outcome.governed)) && withdrawnOk;
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
