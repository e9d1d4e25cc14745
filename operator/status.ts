/**
 * Pure status projection: what a resource's status says after a reconcile and an apply.
 *
 *   Accepted    True Accepted | False Invalid | False Conflict (another resource holds the name)
 *   Programmed  True Programmed | False Pending, Conflict (another owner, e.g. `api`, holds the
 *               entry), Rejected (the apply refused it), ApplyFailed, IdentityFailed, Blocked
 *               (activation gate), Held (suspended/quarantined by someone else: never undone by
 *               the operator), Retired (terminal)
 *   Ready       True Ready, or False with the first failing condition's reason
 *
 * `lastTransitionTime` moves only when a condition's status changes (metav1.Condition rules).
 */
import type { ApplyResult } from '../runtime/control-plane/registry/index.js';
import type { Observed } from './resource.js';
import { keyOf } from './resource.js';
import type { Desired } from './reconcile.js';

/** What the registry's apply answered (runtime/control-plane/registry). */
export type { ApplyResult };

export type GovernedReason = 'Blocked' | 'Held' | 'Retired' | 'Rejected' | 'ApplyFailed';

export interface GovernedOutcome {
  lifecycle?: string;
  blockers: string[];
  /** Absent when the agent is at its desired state with nothing to report. */
  reason?: GovernedReason;
  message?: string;
}

export interface Outcome {
  /** Registry version after the apply (the snapshot the resources are programmed at). */
  version?: number;
  apply?: ApplyResult;
  applyError?: string;
  /** Identity-authority agent name -> error (absent = registered). */
  identityErrors: Map<string, string>;
  governed: Map<string, GovernedOutcome>;
}

export interface Condition {
  type: 'Accepted' | 'Programmed' | 'Ready';
  status: 'True' | 'False' | 'Unknown';
  observedGeneration: number;
  lastTransitionTime: string;
  reason: string;
  message: string;
}

export interface CrStatus {
  observedGeneration: number;
  policyVersion?: number;
  conditions: Condition[];
  lifecycle?: string;
  activationBlockers?: string[];
}

type Cond = Pick<Condition, 'status' | 'reason' | 'message'>;
const ok = (reason: string, message: string): Cond => ({ status: 'True', reason, message });
const no = (reason: string, message: string): Cond => ({ status: 'False', reason, message });

type Fate = 'created' | 'updated' | 'unchanged' | 'conflict' | { invalid: string };
const indexes = new WeakMap<ApplyResult, Map<string, Fate>>();
/** name -> what the apply did with it (built once per result: 10k lookups stay linear). */
function fates(a: ApplyResult): Map<string, Fate> {
  let m = indexes.get(a);
  if (!m) {
    m = new Map();
    for (const n of a.created) m.set(n, 'created');
    for (const n of a.updated) m.set(n, 'updated');
    for (const n of a.unchanged) m.set(n, 'unchanged');
    for (const n of a.conflicts) m.set(n, 'conflict');
    for (const i of a.invalid) m.set(i.name, { invalid: i.error });
    indexes.set(a, m);
  }
  return m;
}

function programmedService(name: string, o: Outcome): Cond {
  if (o.applyError) return no('ApplyFailed', o.applyError);
  const a = o.apply;
  if (!a) return { status: 'Unknown', reason: 'Pending', message: 'not applied yet' };
  const fate = fates(a).get(name);
  if (fate === undefined) return { status: 'Unknown', reason: 'Pending', message: `registry entry ${name} not in the apply result` };
  if (fate === 'conflict') return no('Conflict', `registry entry ${name} is owned by ${a.conflictOwners[name] ?? 'another owner'}`);
  if (typeof fate === 'object') return no('Rejected', fate.invalid);
  return ok('Programmed', `registry entry ${name} is programmed`);
}

/** True when this resource's own registry entry was written by this apply. */
function entryWritten(r: Observed, o: Outcome): boolean {
  if (!o.apply || r.kind === 'GovernedAgent') return false;
  const f = fates(o.apply).get(r.kind === 'AgentPolicy' ? String(r.spec!.agent) : r.name);
  return f === 'created' || f === 'updated';
}

function programmed(r: Observed, o: Outcome): Cond {
  if (r.kind === 'RegistryService') return programmedService(r.name, o);
  if (r.kind === 'AgentPolicy') {
    const agent = String(r.spec!.agent);
    const svc = programmedService(agent, o);
    if (svc.status !== 'True') return svc;
    const err = o.identityErrors.get(agent);
    return err ? no('IdentityFailed', err) : svc;
  }
  const g = o.governed.get(r.name);
  if (!g) return { status: 'Unknown', reason: 'Pending', message: 'not applied yet' };
  if (g.reason) return no(g.reason, g.message ?? g.reason);
  return ok('Programmed', `governed agent is ${g.lifecycle}`);
}

/** The status one resource should carry. `prev` keeps lastTransitionTime of unchanged conditions. */
export function statusFor(r: Observed, d: Desired, o: Outcome, now: string, prev?: CrStatus): CrStatus {
  const verdict = d.verdicts.get(`${keyOf(r)}@${r.origin}`) ??
    d.verdicts.get(keyOf(r)) ?? { accepted: false as const, reason: 'Invalid' as const, message: r.errors.join('; ') };
  const accepted: Cond = verdict.accepted ? ok('Accepted', 'valid and not in conflict') : no(verdict.reason, verdict.message);
  const prog: Cond = verdict.accepted ? programmed(r, o) : no(verdict.reason, 'not programmed: not accepted');
  const ready: Cond =
    accepted.status !== 'True'
      ? accepted
      : prog.status !== 'True'
        ? { ...prog, status: prog.status === 'Unknown' ? 'Unknown' : 'False' }
        : ok('Ready', prog.message);
  const g = r.kind === 'GovernedAgent' ? o.governed.get(r.name) : undefined;
  const cond = (type: Condition['type'], c: Cond): Condition => {
    const old = prev?.conditions.find((x) => x.type === type);
    const lastTransitionTime = old && old.status === c.status ? old.lastTransitionTime : now;
    return { type, status: c.status, observedGeneration: r.generation, lastTransitionTime, reason: c.reason, message: c.message.slice(0, 32768) };
  };
  const out: CrStatus = { observedGeneration: r.generation, conditions: [cond('Accepted', accepted), cond('Programmed', prog), cond('Ready', ready)] };
  // The version this resource was programmed at: it moves when its own entry is written (or it
  // had none yet), not whenever another resource changes the snapshot (no status churn).
  if (verdict.accepted && prog.status === 'True' && o.version !== undefined && (entryWritten(r, o) || prev?.policyVersion === undefined))
    out.policyVersion = o.version;
  else if (prev?.policyVersion !== undefined) out.policyVersion = prev.policyVersion;
  if (g?.lifecycle) out.lifecycle = g.lifecycle;
  if (g) out.activationBlockers = [...g.blockers];
  return out;
}

/** Equal statuses (so a source writes nothing when nothing changed). */
export function sameStatus(a: CrStatus | undefined, b: CrStatus | undefined): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
