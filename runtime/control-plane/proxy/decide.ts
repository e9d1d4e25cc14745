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
import type { EgressFacts, Outcome } from '../decision/types.js';
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

/**
 * Bounds identity calls with one timer for all of them. Every call gets the same timeout, so
 * deadlines come due in the order the calls were made: a FIFO queue swept by a single timer
 * (armed for the oldest open deadline) replaces a setTimeout + Promise.race per request.
 */
interface Deadline {
  at: number;
  open: boolean;
  fail: (e: Error) => void;
  what: string;
  ms: number;
}
const deadlines: Deadline[] = [];
let deadlineHead = 0;
let deadlineTimer: NodeJS.Timeout | undefined;

function dropSettled(): void {
  while (deadlineHead < deadlines.length && !deadlines[deadlineHead]!.open) deadlineHead++;
  if (deadlineHead === deadlines.length) {
    deadlines.length = 0;
    deadlineHead = 0;
  } else if (deadlineHead > 1024 && deadlineHead * 2 > deadlines.length) {
    deadlines.splice(0, deadlineHead);
    deadlineHead = 0;
  }
}

function sweepDeadlines(): void {
  deadlineTimer = undefined;
  const now = performance.now();
  while (deadlineHead < deadlines.length) {
    const d = deadlines[deadlineHead]!;
    if (d.open && d.at > now) break;
    deadlineHead++;
    if (d.open) {
      d.open = false;
      d.fail(new Timeout(`${d.what} timed out after ${d.ms} ms`));
    }
  }
  dropSettled();
  armDeadlines(now);
}

function armDeadlines(now: number): void {
  if (deadlineTimer || deadlineHead >= deadlines.length) return;
  deadlineTimer = setTimeout(sweepDeadlines, Math.max(1, Math.ceil(deadlines[deadlineHead]!.at - now)));
  deadlineTimer.unref();
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const now = performance.now();
    const d: Deadline = { at: now + ms, open: true, fail: reject, what, ms };
    // A caller with a shorter timeout than those queued would be swept late: give it its own timer.
    const last = deadlines[deadlines.length - 1];
    if (last && last.at > d.at) {
      const t = setTimeout(() => {
        if (d.open) {
          d.open = false;
          reject(new Timeout(`${what} timed out after ${ms} ms`));
        }
      }, ms);
      p.then(
        (v) => {
          clearTimeout(t);
          if (!d.open) return;
          d.open = false;
          resolve(v);
        },
        (e: unknown) => {
          clearTimeout(t);
          if (!d.open) return;
          d.open = false;
          reject(e as Error);
        },
      );
      return;
    }
    deadlines.push(d);
    armDeadlines(now);
    p.then(
      (v) => {
        if (!d.open) return;
        d.open = false;
        dropSettled();
        resolve(v);
      },
      (e: unknown) => {
        if (!d.open) return;
        d.open = false;
        dropSettled();
        reject(e as Error);
      },
    );
  });
}

/**
 * The identity port handed to decideEgress: it answers the VP that decideProxy just verified from
 * that verification. decideEgress calls verifyPresentation synchronously (before its first
 * await), so `decideOnce` sets the answer just before the call and clears it right after; any
 * other call (another token, another audience, or a later call) goes to the real port.
 */
class MemoIdentity implements IdentityPort {
  vp: string | undefined;
  audience: string | undefined;
  answer: PresentationAnswer | undefined;
  constructor(private readonly inner: IdentityPort) {}
  verifyPresentation(v: string, aud?: string): Promise<PresentationAnswer> {
    const a = this.answer;
    if (a && v === this.vp && (aud ?? VP_AUDIENCE) === this.audience) return Promise.resolve(a);
    return this.inner.verifyPresentation(v, aud);
  }
  checkDelegation(q: Parameters<IdentityPort['checkDelegation']>[0]): ReturnType<IdentityPort['checkDelegation']> {
    return this.inner.checkDelegation(q);
  }
}

/** Per deps object: the deps decideEgress sees (live view of deps, identity memoised). */
const memoDeps = new WeakMap<PipelineDeps, { deps: PipelineDeps; memo: MemoIdentity; inner: IdentityPort }>();

function decideOnce(deps: PipelineDeps, identity: IdentityPort, facts: EgressFacts, audience: string, vp: PresentationAnswer): Outcome | Promise<Outcome> {
  let m = memoDeps.get(deps);
  if (!m || m.inner !== identity) {
    const memo = new MemoIdentity(identity);
    // A prototype view: every other field is read from deps itself, as it is at call time.
    const view = Object.create(deps) as PipelineDeps;
    Object.defineProperty(view, 'identity', { value: memo, enumerable: true });
    m = { deps: view, memo, inner: identity };
    memoDeps.set(deps, m);
  }
  const memo = m.memo;
  memo.vp = facts.vp;
  memo.audience = audience;
  memo.answer = vp;
  try {
    return decideEgress(facts, m.deps);
  } finally {
    memo.vp = undefined;
    memo.audience = undefined;
    memo.answer = undefined;
  }
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

interface Who {
  actor?: string;
  service?: string;
  svc?: Service;
}

/** One request's decision context (a class, not per-request closures: this is the hot path). */
class ProxyDecision {
  readonly t0 = performance.now();
  readonly task: string | undefined;
  readonly onBehalfOf: string | undefined;
  readonly action: string;
  readonly resource: string;
  actorName = '';
  agentDid: string | undefined;

  constructor(
    readonly req: ProxyRequest,
    readonly deps: PipelineDeps,
  ) {
    const h = req.headers;
    this.task = first(h, H.task)?.trim() || undefined;
    this.onBehalfOf = first(h, H.onBehalfOf)?.trim() || undefined;
    this.action = first(h, H.action)?.trim() || `http:${req.method.toLowerCase()}`;
    this.resource = first(h, H.resource)?.trim() || req.target.resource;
  }

  finalise(d: Decision, who: Who, agentDid?: string, startedAt = this.t0): Outcome {
    const audit = auditOf('egress.proxy', d, {
      subject: this.onBehalfOf ?? who.actor,
      actor: who.actor,
      task: this.task,
      service: who.service ?? this.req.target.hostPort,
    });
    const out: Outcome = { decision: d, audit, serviceLabel: who.svc?.name ?? UNKNOWN_LABEL };
    if (agentDid) out.agentDid = agentDid;
    return settle(out, this.deps, startedAt);
  }

  denied(rule: Decision['rule'], reason: string, who: Who = {}): ProxyVerdict {
    return { kind: 'deny', outcome: this.finalise(deny(403, rule, reason), who) };
  }

  async runCore(identity: IdentityPort, token: string, audience: string, vp: PresentationAnswer, resolved: Service, service: string, svc: Service | undefined): Promise<ProxyVerdict> {
    const facts: EgressFacts = {
      actor: this.actorName,
      onBehalfOf: this.onBehalfOf,
      task: this.task,
      action: this.action,
      resource: this.resource,
      resolvedTarget: resolved,
      vp: token,
      via: 'proxy',
    };
    const out = await decideOnce(this.deps, identity, facts, audience, vp);
    if (out.decision.needsApproval) return { kind: 'hold', ticket: new Ticket(this, service, svc, out.decision.reason) };
    const settled = settle(out, this.deps, this.t0);
    return { kind: settled.decision.allow ? 'allow' : 'deny', outcome: settled };
  }
}

class Ticket implements HoldTicket {
  readonly input: EgressRequestInput;
  constructor(
    private readonly c: ProxyDecision,
    private readonly service: string,
    private readonly svc: Service | undefined,
    why: string,
  ) {
    const t = c.req.target;
    this.input = { actor: c.actorName, actorDid: c.agentDid, target: t.hostPort, service, action: c.action, resource: c.resource, reason: why };
  }

  finish(result: HoldResult | 'unavailable', id: string | undefined, detail: string): Outcome {
    const c = this.c;
    const actorName = c.actorName;
    const ref = id ? `egress request ${id}` : 'egress request';
    let d: Decision;
    if (result === 'approved') {
      // The human's approval is the deciding layer; the call still counts against the budget.
      c.deps.budget.reserveCall(actorName, c.deps.now());
      const headers: Record<string, string> = { [H.subject]: c.onBehalfOf ?? actorName, [H.upstream]: c.req.target.hostPort, [H.actor]: actorName };
      if (c.agentDid) headers[H.agentDid] = c.agentDid;
      d = allow('delegation', `${ref} approved${detail ? ` by ${detail}` : ''}`, headers);
    } else if (result === 'denied') {
      d = deny(403, 'delegation', `${ref} denied${detail ? `: ${detail}` : ''}`);
    } else if (result === 'expired') {
      d = deny(403, 'delegation', `${ref} expired${detail ? `: ${detail}` : ''}`);
    } else {
      d = deny(403, 'delegation', `needs approval and the approval queue is unavailable: ${detail}`);
    }
    // Metered from the wake-up: the hold is a human's time, not the decision's.
    return c.finalise(d, { actor: actorName, service: this.service, svc: this.svc }, c.agentDid, performance.now());
  }
}

export async function decideProxy(req: ProxyRequest, deps: PipelineDeps, policy: ProxyPolicy): Promise<ProxyVerdict> {
  const c = new ProxyDecision(req, deps);
  const token = bearerToken(req.proxyAuthorization);
  if (!token) {
    const why = req.proxyAuthorization ? 'Proxy-Authorization must be "Bearer <Membership VP>"' : 'missing Proxy-Authorization';
    return { kind: 'challenge', outcome: c.finalise(deny(403, 'identity', why), {}) };
  }
  const identity = deps.identity;
  if (!identity) return c.denied('identity', 'no identity authority configured to verify the agent VP (fail closed)');
  const audience = deps.vpAudience ?? VP_AUDIENCE;
  let vp: PresentationAnswer;
  try {
    vp = await withTimeout(identity.verifyPresentation(token, audience), deps.identityTimeoutMs ?? 2000, 'VP verification');
  } catch (e) {
    return c.denied('identity', `VP verification failed: ${errMsg(e)}`);
  }
  if (!vp.ok || !vp.agentName) return c.denied('identity', `invalid agent VP: ${vp.ok ? 'no agent name' : vp.reason}`);
  const actorName = vp.agentName;
  c.actorName = actorName;
  c.agentDid = vp.agentDid;

  const actor = deps.registry.get(actorName);
  if (!actor || actor.kind !== 'agent') return c.denied('registry', `unknown agent ${JSON.stringify(actorName)}`, { actor: actorName });
  const target = resolveTarget(deps, req.target.hostPort, actor);

  if (req.via === 'connect' && !connectPortAllowed(policy, req.target, target, actor)) {
    return c.denied('inline', `CONNECT to port ${req.target.port} is not allowed for ${req.target.host} (not a registry upstream, not in egressAllow)`, {
      actor: actorName,
    });
  }

  try {
    if (target) return await c.runCore(identity, token, audience, vp, target, target.name, target);
    const entry = externalAllowEntry(actor, req.target);
    if (entry) return await c.runCore(identity, token, audience, vp, { name: entry, upstream: req.target.hostPort, kind: 'service' }, entry, target);
    const over = deps.budget.check(actor.name, actor.budget, deps.now());
    if (over) return c.denied('inline', over, { actor: actorName, service: EXTERNAL });
    return {
      kind: 'hold',
      ticket: new Ticket(c, EXTERNAL, undefined, `needs approval: external host ${req.target.hostPort} is not in ${actor.name}.egressAllow`),
    };
  } catch (e) {
    return c.denied('inline', `decision error: ${errMsg(e)}`, { actor: actorName });
  }
}
