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

function* egress(facts: EgressFacts, deps: DecisionDeps): Step<Outcome> {
  let stage: Rule = 'identity';
  let target: Service | undefined = facts.resolvedTarget;
  let kind = facts.targetKind?.trim().toLowerCase() || undefined;
  let agentDid: string | undefined;
  let delegation: Outcome['delegation'];
  let releaseCall: (() => void) | undefined;
  const actorName = facts.actor.trim();
  const subject = facts.onBehalfOf?.trim() || actorName;
  const done = (d: Outcome['decision']): Outcome => {
    if (!d.allow) releaseCall?.();
    const audit = auditOf(egressAction(kind ?? target?.kind, facts.via), d, {
      subject,
      actor: actorName,
      task: facts.task,
      service: target?.name ?? facts.target,
    });
    if (d.allow && delegation) {
      audit.delegationId = delegation.id;
      if (delegation.exp !== undefined) audit.delegationExp = delegation.exp;
    }
    const out: Outcome = { decision: d, audit, serviceLabel: target?.name ?? UNKNOWN_LABEL };
    if (delegation && d.allow) out.delegation = delegation;
    if (agentDid) out.agentDid = agentDid;
    return out;
  };
  const timeoutMs = deps.identityTimeoutMs ?? DEFAULT_IDENTITY_TIMEOUT_MS;

  try {
    if (!actorName) return done(deny(403, 'identity', 'empty actor'));
    if (deps.identityMode === 'vc' && !deps.identity) {
      return done(deny(403, 'identity', 'vc identity mode needs the identity authority (AGENT_IDP_URL)'));
    }

    // 1-2. Agent token and VP. The agent token is the agent's Membership VP in VC-JWT form
    //      (what the sidecar mints); a token of any other shape is not a VP and is ignored.
    const token = bearerToken(facts.authorization);
    const vps = [facts.vp?.trim(), token && isVpJwt(token) ? token : undefined].filter((v): v is string => !!v);
    const uniqueVps = [...new Set(vps)];
    if (uniqueVps.length === 0 && deps.identityMode === 'vc') {
      return done(deny(403, 'identity', 'agent VP required (vc identity mode)'));
    }
    for (const vp of uniqueVps) {
      if (!deps.identity) return done(deny(403, 'identity', 'agent VP presented but no identity authority is configured to verify it'));
      const v = yield* wait(withTimeout(deps.identity.verifyPresentation(vp, deps.vpAudience ?? VP_AUDIENCE), timeoutMs, 'VP verification'));
      if (!v.ok) return done(deny(403, 'identity', `invalid agent VP: ${v.reason}`));
      if (v.agentName !== actorName) {
        return done(deny(403, 'identity', `VP proves agent ${JSON.stringify(v.agentName ?? '')}, not ${JSON.stringify(actorName)}`));
      }
      if (agentDid && v.agentDid !== agentDid) return done(deny(403, 'identity', 'agent token and VP prove different DIDs'));
      agentDid = v.agentDid;
    }

    // 3. Registry: the actor is a registered agent, the target a registered service.
    stage = 'registry';
    const actor = deps.registry.get(actorName);
    if (!actor || actor.kind !== 'agent') return done(deny(403, 'registry', `unknown agent ${JSON.stringify(actorName)}`));
    if (!target) {
      const name = facts.target?.trim();
      if (!name) return done(deny(403, 'registry', 'no target named'));
      target = deps.registry.get(name);
      if (!target) return done(deny(403, 'registry', `unknown target ${JSON.stringify(name)}`));
    }
    if (kind && target.kind && target.kind !== kind) {
      return done(deny(403, 'registry', `target kind mismatch: request says ${kind}, registry says ${target.kind}`));
    }
    kind = kind ?? target.kind ?? '';

    // 4a. Allowlist (deny by default).
    stage = 'inline';
    const { list, field } = allowListFor(actor, kind);
    if (!list.includes(target.name)) {
      return done(deny(403, 'inline', `${target.name} is not in ${actor.name}.${field}`));
    }

    // 4b. Budget; the call is counted now and released if a later layer denies.
    const over = deps.budget.check(actor.name, actor.budget, deps.now());
    if (over) return done(deny(403, 'inline', over));
    releaseCall = deps.budget.reserveCall(actor.name, deps.now());

    // 4c. Delegation (task-based access control) for regulated targets, on every call.
    let rule: Rule = 'inline';
    let reason = 'allowed by registry allowlist and budget';
    if (target.dataClass === 'regulated') {
      stage = 'delegation';
      if (!deps.identity) return done(deny(403, 'delegation', 'regulated target and no identity authority configured (fail closed)'));
      const task = facts.task?.trim();
      const action = facts.action?.trim();
      const resource = facts.resource?.trim();
      if (!task || !action || !resource) {
        return done(deny(403, 'delegation', 'regulated target needs task, action and resource'));
      }
      let answer: DelegationAnswer;
      try {
        answer = yield* wait(withTimeout(deps.identity.checkDelegation({ actor: actor.name, task, action, resource }), timeoutMs, 'delegation check'));
      } catch (e) {
        return done(deny(403, 'delegation', `delegation check failed: ${errMsg(e)}`));
      }
      const nowSec = Math.floor(deps.now() / 1000);
      const expired = answer.ok && answer.notAfter !== undefined && answer.notAfter <= nowSec;
      if (!answer.ok || expired) {
        return done(
          deny(401, 'delegation', `needs approval: ${expired ? 'delegation expired' : answer.reason || 'no approved delegation'}`, {
            needsApproval: true,
            headers: { [H.needsApproval]: 'true' },
          }),
        );
      }
      const id = answer.delegationId ?? answer.vcJti;
      if (id) delegation = answer.notAfter !== undefined ? { id, exp: answer.notAfter } : { id };
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
        agentDid: agentDid ?? '',
        onBehalfOf: facts.onBehalfOf ?? '',
        task: facts.task ?? '',
        target: target.name,
        targetKind: kind,
        dataClass: target.dataClass ?? '',
        action: facts.action ?? '',
        resource: facts.resource ?? '',
          delegationId: delegation?.id ?? '',
        }),
      );
      if (!v.allow) return done(deny(403, 'opa', `opa: ${v.reason}`));
    }

    const headers: Record<string, string> = {
      [H.subject]: subject,
      [H.upstream]: target.upstream,
      [H.actor]: actor.name,
    };
    if (agentDid) headers[H.agentDid] = agentDid;
    return done(allow(rule, reason, headers));
  } catch (e) {
    return done(deny(403, stage, `decision error: ${errMsg(e)}`));
  }
}
