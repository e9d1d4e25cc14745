/**
 * The forward proxy's decision (SPEC 4.2): the agent's Membership VP from
 * `Proxy-Authorization: Bearer`, the target resolved from host:port, then the very same pure
 * egress decision as /authz (`decideEgress` with `via: 'proxy'`, audited as `egress.proxy`,
 * metered like /authz by `settle`).
 *
 *   - no usable Proxy-Authorization                 -> challenge (407)
 *   - VP invalid, revoked, or not a registered agent -> deny (403)
 *   - host:port is a registry upstream               -> decideEgress with that entry
 *       (allowlist of the entry's kind, budget, delegation for regulated data, OPA veto);
 *       a regulated target without a delegation    -> hold for a human (SPEC 3.2)
 *   - host:port is external (no registry upstream):
 *       listed in the agent's egressAllow as `host:port` or `host` -> decideEgress on it
 *       otherwise                                    -> hold for a human (SPEC 3.2)
 *   - CONNECT to a port that is not allowed          -> deny (403); see connectPortAllowed
 *
 * A held request gets exactly one audit row, written when the hold ends (approved, denied,
 * expired), so every proxied request is audited once.
 */
import { VP_AUDIENCE } from '../../lib/brand.js';
import { errMsg } from '../../lib/log.js';
import type { HoldResult } from '../approvals/record.js';
import type { EgressRequestInput } from '../approvals/record.js';
import { bearerToken } from '../decision/credentials.js';
import { allowListFor, decideEgress } from '../decision/egress.js';
import type { HeaderBag } from '../decision/facts.js';
import { UNKNOWN_LABEL, allow, auditOf, deny } from '../decision/outcome.js';
import { settle, type PipelineDeps } from '../decision/pipeline.js';
import type { Outcome } from '../decision/types.js';
import type { IdentityPort, PresentationAnswer } from '../identity-port.js';
import { H } from '../../lib/brand.js';
import type { Decision, Service } from '../types.js';
import type { ProxyTarget } from './target.js';

export const EXTERNAL = 'external';

export interface ProxyPolicy {
  /** Ports CONNECT may reach on hosts outside the registry (default 443). */
  connectPorts: ReadonlySet<number>;
}

export interface ProxyRequest {
  via: 'http' | 'connect';
  method: string;
  target: ProxyTarget;
  proxyAuthorization: string | undefined;
  /** Request headers (lower-cased): X-Writ-On-Behalf-Of, -Task, -Action, -Resource feed the decision. */
  headers: HeaderBag;
}

export interface HoldTicket {
  /** What goes into the approval queue. */
  input: EgressRequestInput;
  /** Settles (audits, meters) the final outcome once the hold ends. */
  finish(result: HoldResult | 'unavailable', requestId: string | undefined, detail: string): Outcome;
}

export type ProxyVerdict =
  | { kind: 'challenge'; outcome: Outcome }
  | { kind: 'deny'; outcome: Outcome }
  | { kind: 'allow'; outcome: Outcome }
  | { kind: 'hold'; ticket: HoldTicket };

function first(h: HeaderBag, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

class Timeout extends Error {}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Timeout(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** An identity port that answers this one VP from the verification already made. */
function memoIdentity(inner: IdentityPort, vp: string, audience: string, answer: PresentationAnswer): IdentityPort {
  return {
    verifyPresentation: (v, aud) => (v === vp && (aud ?? VP_AUDIENCE) === audience ? Promise.resolve(answer) : inner.verifyPresentation(v, aud)),
    checkDelegation: (q) => inner.checkDelegation(q),
  };
}

function isAllowedFor(actor: Service, svc: Service): boolean {
  return allowListFor(actor, svc.kind ?? '').list.includes(svc.name);
}

/**
 * The registry entry whose upstream is host:port. Several entries may share one upstream (models
 * behind one broker): the first by name that the agent may reach wins, else the first by name.
 */
export function resolveTarget(deps: PipelineDeps, hostPort: string, actor: Service | undefined): Service | undefined {
  const reg = deps.registry;
  const firstHit = reg.findByUpstream ? reg.findByUpstream(hostPort) : reg.list().find((s) => s.upstream.toLowerCase() === hostPort);
  if (!firstHit || !actor || isAllowedFor(actor, firstHit)) return firstHit;
  return reg.list().find((s) => s.upstream.toLowerCase() === hostPort && isAllowedFor(actor, s)) ?? firstHit;
}

/** The egressAllow entry naming an external target: exact `host:port`, else bare `host`. */
export function externalAllowEntry(actor: Service, t: ProxyTarget): string | undefined {
  const list = actor.egressAllow ?? [];
  for (const e of list) if (e.toLowerCase() === t.hostPort) return e;
  for (const e of list) if (e.toLowerCase() === t.host) return e;
  return undefined;
}

/**
 * CONNECT reaches: any registry upstream (its declared host:port), an external host on one of
 * `connectPorts` (default 443), or an external `host:port` the agent lists explicitly in
 * egressAllow. Everything else (SMTP, SSH, databases, ...) is refused before any tunnel opens.
 */
export function connectPortAllowed(policy: ProxyPolicy, t: ProxyTarget, target: Service | undefined, actor: Service): boolean {
  if (target) return true;
  if (policy.connectPorts.has(t.port)) return true;
  return (actor.egressAllow ?? []).some((e) => e.toLowerCase() === t.hostPort);
}

export async function decideProxy(req: ProxyRequest, deps: PipelineDeps, policy: ProxyPolicy): Promise<ProxyVerdict> {
  const t0 = performance.now();
  const task = first(req.headers, H.task)?.trim() || undefined;
  const onBehalfOf = first(req.headers, H.onBehalfOf)?.trim() || undefined;
  const action = first(req.headers, H.action)?.trim() || `http:${req.method.toLowerCase()}`;
  const resource = first(req.headers, H.resource)?.trim() || req.target.resource;
  const label = (svc: Service | undefined) => svc?.name ?? UNKNOWN_LABEL;

  const finalise = (d: Decision, who: { actor?: string; service?: string; svc?: Service }, agentDid?: string, startedAt = t0): Outcome => {
    const audit = auditOf('egress.proxy', d, {
      subject: onBehalfOf ?? who.actor,
      actor: who.actor,
      task,
      service: who.service ?? req.target.hostPort,
    });
    const out: Outcome = { decision: d, audit, serviceLabel: label(who.svc) };
    if (agentDid) out.agentDid = agentDid;
    return settle(out, deps, startedAt);
  };
  const denied = (status: 403, rule: Decision['rule'], reason: string, who: { actor?: string; service?: string; svc?: Service } = {}) => {
    const outcome = finalise(deny(status, rule, reason), who);
    return { kind: 'deny' as const, outcome };
  };

  const token = bearerToken(req.proxyAuthorization);
  if (!token) {
    const why = req.proxyAuthorization ? 'Proxy-Authorization must be "Bearer <Membership VP>"' : 'missing Proxy-Authorization';
    return { kind: 'challenge', outcome: finalise(deny(403, 'identity', why), {}) };
  }
  const identity = deps.identity;
  if (!identity) return denied(403, 'identity', 'no identity authority configured to verify the agent VP (fail closed)');
  const audience = deps.vpAudience ?? VP_AUDIENCE;
  let vp: PresentationAnswer;
  try {
    vp = await withTimeout(identity.verifyPresentation(token, audience), deps.identityTimeoutMs ?? 2000, 'VP verification');
  } catch (e) {
    return denied(403, 'identity', `VP verification failed: ${errMsg(e)}`);
  }
  if (!vp.ok || !vp.agentName) return denied(403, 'identity', `invalid agent VP: ${vp.ok ? 'no agent name' : vp.reason}`);
  const actorName = vp.agentName;
  const agentDid = vp.agentDid;

  const actor = deps.registry.get(actorName);
  if (!actor || actor.kind !== 'agent') return denied(403, 'registry', `unknown agent ${JSON.stringify(actorName)}`, { actor: actorName });
  const target = resolveTarget(deps, req.target.hostPort, actor);

  if (req.via === 'connect' && !connectPortAllowed(policy, req.target, target, actor)) {
    return denied(403, 'inline', `CONNECT to port ${req.target.port} is not allowed for ${req.target.host} (not a registry upstream, not in egressAllow)`, {
      actor: actorName,
    });
  }

  const runCore = async (resolved: Service, service: string): Promise<ProxyVerdict> => {
    const out = await decideEgress(
      { actor: actorName, onBehalfOf, task, action, resource, resolvedTarget: resolved, vp: token, via: 'proxy' },
      { ...deps, identity: memoIdentity(identity, token, audience, vp) },
    );
    if (out.decision.needsApproval) return { kind: 'hold', ticket: ticket(service, target, out.decision.reason) };
    const settled = settle(out, deps, t0);
    return { kind: settled.decision.allow ? 'allow' : 'deny', outcome: settled };
  };

  const ticket = (service: string, svc: Service | undefined, why: string): HoldTicket => ({
    input: { actor: actorName, actorDid: agentDid, target: req.target.hostPort, service, action, resource, reason: why },
    finish(result, id, detail) {
      const ref = id ? `egress request ${id}` : 'egress request';
      let d: Decision;
      if (result === 'approved') {
        // The human's approval is the deciding layer; the call still counts against the budget.
        deps.budget.reserveCall(actorName, deps.now());
        const headers: Record<string, string> = { [H.subject]: onBehalfOf ?? actorName, [H.upstream]: req.target.hostPort, [H.actor]: actorName };
        if (agentDid) headers[H.agentDid] = agentDid;
        d = allow('delegation', `${ref} approved${detail ? ` by ${detail}` : ''}`, headers);
      } else if (result === 'denied') {
        d = deny(403, 'delegation', `${ref} denied${detail ? `: ${detail}` : ''}`);
      } else if (result === 'expired') {
        d = deny(403, 'delegation', `${ref} expired${detail ? `: ${detail}` : ''}`);
      } else {
        d = deny(403, 'delegation', `needs approval and the approval queue is unavailable: ${detail}`);
      }
      // Metered from the wake-up: the hold is a human's time, not the decision's.
      return finalise(d, { actor: actorName, service, svc }, agentDid, performance.now());
    },
  });

  try {
    if (target) return await runCore(target, target.name);
    const entry = externalAllowEntry(actor, req.target);
    if (entry) return await runCore({ name: entry, upstream: req.target.hostPort, kind: 'service' }, entry);
    const over = deps.budget.check(actor.name, actor.budget, deps.now());
    if (over) return denied(403, 'inline', over, { actor: actorName, service: EXTERNAL });
    return {
      kind: 'hold',
      ticket: ticket(EXTERNAL, undefined, `needs approval: external host ${req.target.hostPort} is not in ${actor.name}.egressAllow`),
    };
  } catch (e) {
    return denied(403, 'inline', `decision error: ${errMsg(e)}`, { actor: actorName });
  }
}
