/**
 * Egress decision, SPEC 4.1: "may this agent make this call, on behalf of this human, for this
 * task, right now?". Order: agent token, VP, registry (actor and target), allowlist, budget,
 * delegation (regulated targets), optional OPA veto. Audit and metrics are the caller's
 * (pipeline.ts); the forward proxy calls this same function with `via: 'proxy'` and a target it
 * resolved from host:port. Any exception is a deny (fail closed).
 */
import { H, VP_AUDIENCE } from '../../lib/brand.js';
import { errMsg } from '../../lib/log.js';
import type { AuditAction, Service } from '../types.js';
import type { DelegationAnswer } from '../identity-port.js';
import { bearerToken, isVpJwt } from './credentials.js';
import { UNKNOWN_LABEL, allow, auditOf, deny } from './outcome.js';
import { drive, wait, type Step } from './maybe.js';
import type { DecisionDeps, EgressFacts, Outcome, Rule } from './types.js';

const DEFAULT_IDENTITY_TIMEOUT_MS = 2000;

/** Audit action by target kind (SPEC 2.3, 6). */
export function egressAction(kind: string | undefined, via: EgressFacts['via']): AuditAction {
  if (via === 'proxy') return 'egress.proxy';
  if (kind === 'model') return 'model.invoke';
  if (kind === 'tool') return 'tool.read';
  if (kind === 'agent') return 'agent.invoke';
  return 'egress';
}

/** The allow list of `actor` that governs a target of `kind` (deny by default). */
export function allowListFor(actor: Service, kind: string): { list: readonly string[]; field: string } {
  if (kind === 'model') return { list: actor.allowModels ?? [], field: 'allowModels' };
  if (kind === 'tool') return { list: actor.allowTools ?? [], field: 'allowTools' };
  if (kind === 'agent') return { list: actor.allowAgents ?? [], field: 'allowAgents' };
  // Plain services and unknown kinds: the agent's general egress list (SPEC 2.1 EgressAllow).
  return { list: actor.egressAllow ?? [], field: 'egressAllow' };
}

class Timeout extends Error {}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Timeout(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/**
 * The outcome itself when nothing had to be awaited (no VP, no regulated target, no OPA), else a
 * promise of it (see maybe.ts). The first identity call, if any, is made synchronously.
 */
export function decideEgress(facts: EgressFacts, deps: DecisionDeps): Outcome | Promise<Outcome> {
  return drive(egress(facts, deps));
}

/** One egress decision's state, filled in as the layers pass; what its outcome is built from. */
interface EgressRun {
  readonly facts: EgressFacts;
  readonly actorName: string;
  readonly subject: string;
  target?: Service;
  kind?: string;
  agentDid?: string;
  delegation?: Outcome['delegation'];
  releaseCall?: () => void;
}

/** The outcome of a decision; a deny releases the budget call reserved for it. */
function egressOutcome(st: EgressRun, d: Outcome['decision']): Outcome {
  if (!d.allow) st.releaseCall?.();
  const { facts, target, delegation } = st;
  const audit = auditOf(egressAction(st.kind ?? target?.kind, facts.via), d, {
    subject: st.subject,
    actor: st.actorName,
    task: facts.task,
    service: target?.name ?? facts.target,
  });
  if (d.allow && delegation) {
    audit.delegationId = delegation.id;
    if (delegation.exp !== undefined) audit.delegationExp = delegation.exp;
  }
  const out: Outcome = { decision: d, audit, serviceLabel: target?.name ?? UNKNOWN_LABEL };
  if (delegation && d.allow) out.delegation = delegation;
  if (st.agentDid) out.agentDid = st.agentDid;
  return out;
}

function* egress(facts: EgressFacts, deps: DecisionDeps): Step<Outcome> {
  let stage: Rule = 'identity';
  const actorName = facts.actor.trim();
  const st: EgressRun = {
    facts,
    actorName,
    subject: facts.onBehalfOf?.trim() || actorName,
    target: facts.resolvedTarget,
    kind: facts.targetKind?.trim().toLowerCase() || undefined,
  };
  const timeoutMs = deps.identityTimeoutMs ?? DEFAULT_IDENTITY_TIMEOUT_MS;

  try {
    if (!actorName) return egressOutcome(st, deny(403, 'identity', 'empty actor'));
    if (deps.identityMode === 'vc' && !deps.identity) {
      return egressOutcome(st, deny(403, 'identity', 'vc identity mode needs the identity authority (AGENT_IDP_URL)'));
    }

    // 1-2. Agent token and VP. The agent token is the agent's Membership VP in VC-JWT form
    //      (what the sidecar mints); a token of any other shape is not a VP and is ignored.
    const token = bearerToken(facts.authorization);
    // No per-call closures on this path (under tsx each costs a __name defineProperty).
    const uniqueVps: string[] = [];
    const headerVp = facts.vp?.trim();
    if (headerVp) uniqueVps.push(headerVp);
    if (token && isVpJwt(token) && token !== headerVp) uniqueVps.push(token);
    if (uniqueVps.length === 0 && deps.identityMode === 'vc') {
      return egressOutcome(st, deny(403, 'identity', 'agent VP required (vc identity mode)'));
    }
    for (const vp of uniqueVps) {
      if (!deps.identity) return egressOutcome(st, deny(403, 'identity', 'agent VP presented but no identity authority is configured to verify it'));
      const audience = deps.vpAudience ?? VP_AUDIENCE;
      const v =
        deps.identity.cachedPresentation?.(vp, audience) ??
        (yield* wait(withTimeout(deps.identity.verifyPresentation(vp, audience), timeoutMs, 'VP verification')));
      if (!v.ok) return egressOutcome(st, deny(403, 'identity', `invalid agent VP: ${v.reason}`));
      if (v.agentName !== actorName) {
        return egressOutcome(st, deny(403, 'identity', `VP proves agent ${JSON.stringify(v.agentName ?? '')}, not ${JSON.stringify(actorName)}`));
      }
      if (st.agentDid && v.agentDid !== st.agentDid) return egressOutcome(st, deny(403, 'identity', 'agent token and VP prove different DIDs'));
      st.agentDid = v.agentDid;
    }

    // 3. Registry: the actor is a registered agent, the target a registered service.
    stage = 'registry';
    const actor = deps.registry.get(actorName);
    if (!actor || actor.kind !== 'agent') return egressOutcome(st, deny(403, 'registry', `unknown agent ${JSON.stringify(actorName)}`));
    if (!st.target) {
      const name = facts.target?.trim();
      if (!name) return egressOutcome(st, deny(403, 'registry', 'no target named'));
      st.target = deps.registry.get(name);
      if (!st.target) return egressOutcome(st, deny(403, 'registry', `unknown target ${JSON.stringify(name)}`));
    }
    if (st.kind && st.target.kind && st.target.kind !== st.kind) {
      return egressOutcome(st, deny(403, 'registry', `target kind mismatch: request says ${st.kind}, registry says ${st.target.kind}`));
    }
    st.kind = st.kind ?? st.target.kind ?? '';

    // 4a. Allowlist (deny by default).
    stage = 'inline';
    const { list, field } = allowListFor(actor, st.kind);
    if (!list.includes(st.target.name)) {
      return egressOutcome(st, deny(403, 'inline', `${st.target.name} is not in ${actor.name}.${field}`));
    }

    // 4b. Budget; the call is counted now and released if a later layer denies.
    const over = deps.budget.check(actor.name, actor.budget, deps.now());
    if (over) return egressOutcome(st, deny(403, 'inline', over));
    st.releaseCall = deps.budget.reserveCall(actor.name, deps.now());

    // 4c. Delegation (task-based access control) for regulated targets, on every call.
    let rule: Rule = 'inline';
    let reason = 'allowed by registry allowlist and budget';
    if (st.target.dataClass === 'regulated') {
      stage = 'delegation';
      if (!deps.identity) return egressOutcome(st, deny(403, 'delegation', 'regulated target and no identity authority configured (fail closed)'));
      const task = facts.task?.trim();
      const action = facts.action?.trim();
      const resource = facts.resource?.trim();
      if (!task || !action || !resource) {
        return egressOutcome(st, deny(403, 'delegation', 'regulated target needs task, action and resource'));
      }
      let answer: DelegationAnswer;
      try {
        answer = yield* wait(withTimeout(deps.identity.checkDelegation({ actor: actor.name, task, action, resource }), timeoutMs, 'delegation check'));
      } catch (e) {
        return egressOutcome(st, deny(403, 'delegation', `delegation check failed: ${errMsg(e)}`));
      }
      const nowSec = Math.floor(deps.now() / 1000);
      const expired = answer.ok && answer.notAfter !== undefined && answer.notAfter <= nowSec;
      if (!answer.ok || expired) {
        return egressOutcome(st, 
          deny(401, 'delegation', `needs approval: ${expired ? 'delegation expired' : answer.reason || 'no approved delegation'}`, {
            needsApproval: true,
            headers: { [H.needsApproval]: 'true' },
          }),
        );
      }
      const id = answer.delegationId ?? answer.vcJti;
      if (id) st.delegation = answer.notAfter !== undefined ? { id, exp: answer.notAfter } : { id };
      rule = 'delegation';
      reason = 'approved delegation';
    }

    // 4d. Optional org-wide veto.
    if (deps.opa) {
      stage = 'opa';
      const v = yield* wait(
        deps.opa.evaluate({
        path: 'egress',
        via: facts.via ?? 'authz',
        actor: actor.name,
        agentDid: st.agentDid ?? '',
        onBehalfOf: facts.onBehalfOf ?? '',
        task: facts.task ?? '',
        target: st.target.name,
        targetKind: st.kind,
        dataClass: st.target.dataClass ?? '',
        action: facts.action ?? '',
        resource: facts.resource ?? '',
          delegationId: st.delegation?.id ?? '',
        }),
      );
      if (!v.allow) return egressOutcome(st, deny(403, 'opa', `opa: ${v.reason}`));
    }

    const headers: Record<string, string> = {
      [H.subject]: st.subject,
      [H.upstream]: st.target.upstream,
      [H.actor]: actor.name,
    };
    if (st.agentDid) headers[H.agentDid] = st.agentDid;
    return egressOutcome(st, allow(rule, reason, headers));
  } catch (e) {
    return egressOutcome(st, deny(403, stage, `decision error: ${errMsg(e)}`));
  }
}
