/**
 * Egress evaluation, SPEC 4.1: "may this agent make this call, on behalf of this human, for this
 * task, right now?". Pure. Order: agent token and VP (identity), governance standing (identity),
 * registry (actor and target; through the proxy the target is resolved from host:port),
 * allowlist, budget, delegation for regulated targets (or a human's approval of a held proxy
 * request), optional OPA veto. /authz and the forward proxy evaluate the same function.
 */
import { H } from '../../lib/brand.js';
import { formatReservation, UNKNOWN_RETRY_SECONDS } from '../../lib/reservation-header.js';
import { overBudget } from '../budget/policy.js';
import type { AuditAction, Decision, Service } from '../types.js';
import { bearerToken, isVpJwt } from './credentials.js';
import { HEADER_SAFE, Run } from './run.js';
import {
  isFailure,
  type Answers,
  type EgressFacts,
  type Effects,
  type Evaluation,
  type PolicySnapshot,
  type ProxyHop,
  type RegistryView,
  type Step,
} from './types.js';

export const EXTERNAL = 'external';
const ACTIVE = 'active';

/** Audit action by target kind (SPEC 2.3, 6); every proxy decision is `egress.proxy`. */
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

/** Some registry model is served at `upstream` (a broker): only there does a call ticket mean anything. */
const servesModel = (reg: RegistryView, upstream: string) => reg.byUpstream(upstream).some((s) => s.kind === 'model');
const allowedFor = (actor: Service, svc: Service) => allowListFor(actor, svc.kind ?? '').list.includes(svc.name);

/**
 * The registry entry a proxied host:port reaches. Several entries may share one upstream (models
 * behind one broker): the first by name the agent may reach wins, else the first by name.
 */
export function resolveUpstream(reg: RegistryView, hostPort: string, actor: Service): Service | undefined {
  const hits = reg.byUpstream(hostPort);
  return hits.find((s) => allowedFor(actor, s)) ?? hits[0];
}

/**
 * The egressAllow entry naming an external host: an exact `host:port`, or a bare `host` on the
 * scheme's default port (80 for plain HTTP, a CONNECT port for tunnels). A registry name in
 * egressAllow names that registry entry only, never a host name.
 */
export function externalAllowEntry(actor: Service, hop: ProxyHop, reg: RegistryView, connectPorts: ReadonlySet<number>): string | undefined {
  const list = actor.egressAllow ?? [];
  for (const e of list) if (e.toLowerCase() === hop.hostPort) return e;
  const defaultPort = hop.connect ? connectPorts.has(hop.port) : hop.port === 80;
  if (!defaultPort) return undefined;
  for (const e of list) if (!e.includes(':') && e.toLowerCase() === hop.host && !reg.get(e)) return e;
  return undefined;
}

/** The governance verdict on an agent: undefined when it may act, else why not. */
function governanceDenial(snap: PolicySnapshot, agent: string, now: number): string | undefined {
  const g = snap.governance;
  const status = g?.agents.get(agent);
  const fresh = g !== undefined && now - g.fetchedAt <= snap.settings.governanceMaxAgeMs;
  if (status !== undefined) {
    if (!fresh) return `governance standing of agent ${JSON.stringify(agent)} is unknown: identity authority unreachable (fail closed)`;
    return status === ACTIVE ? undefined : `agent ${JSON.stringify(agent)} is ${status} (governance)`;
  }
  if (!snap.settings.requireGoverned) return undefined;
  if (!fresh) return `governance standing of agent ${JSON.stringify(agent)} is unknown: identity authority unreachable (fail closed)`;
  return `agent ${JSON.stringify(agent)} has no governed record (governance required)`;
}

export function evaluateEgress(f: EgressFacts, snap: PolicySnapshot, a: Answers, now: number, explain = false): Step {
  const run = new Run(snap, explain);
  const s = snap.settings;
  const reg = snap.registry;
  const proxy = f.via === 'proxy' ? f.hop : undefined;
  let actorName = f.actor?.trim() ?? '';
  let agentDid: string | undefined;
  let target: Service | undefined;
  let service = proxy?.hostPort ?? f.target?.trim();
  let kind = f.targetKind?.trim().toLowerCase() || undefined;
  const task = f.task?.trim() || undefined;
  const subjectOf = () => f.onBehalfOf?.trim() || actorName || undefined;
  const end = (d: Decision, extra: Parameters<Run['end']>[4] = {}, out: Partial<Evaluation> = {}): Evaluation =>
    run.end(
      d,
      egressAction(kind ?? target?.kind, f.via),
      { subject: subjectOf(), actor: actorName || undefined, task, service },
      target?.name,
      extra,
      agentDid ? { agentDid, ...out } : out,
    );

  // 1-2. Agent token and VP. The agent token is the agent's Membership VP in VC-JWT form (what
  //      the sidecar mints); a token of any other shape is not a VP and is ignored.
  if (f.via === 'proxy' && !f.vp) return end(run.deny(403, 'identity', f.credentialIssue ?? 'missing Proxy-Authorization', { challenge: true }));
  if (f.via === 'authz' && !actorName) return end(run.deny(403, 'identity', 'empty actor'));
  if (f.repeatedCredential) return end(run.deny(403, 'identity', `${f.repeatedCredential} sent more than once: one credential speaks for the agent`));
  if (s.identityMode === 'vc' && !s.identityAuthority) return end(run.deny(403, 'identity', 'vc identity mode needs the identity authority (AGENT_IDP_URL)'));
  const vps: string[] = [];
  const headerVp = f.vp?.trim();
  if (headerVp) vps.push(headerVp);
  const token = bearerToken(f.authorization);
  if (token && token !== headerVp && isVpJwt(token)) vps.push(token);
  if (vps.length === 0 && s.identityMode === 'vc') return end(run.deny(403, 'identity', 'agent VP required (vc identity mode)'));
  for (const vp of vps) {
    if (!s.identityAuthority) return end(run.deny(403, 'identity', 'agent VP presented but no identity authority is configured to verify it (fail closed)'));
    const v = a.vps?.find((p) => p[0] === vp)?.[1];
    if (!v) return run.ask({ kind: 'vp', vp, audience: s.vpAudience });
    if (isFailure(v)) return end(run.deny(403, 'identity', v.failed));
    if (!v.ok || !v.agentName) return end(run.deny(403, 'identity', `invalid agent VP: ${v.ok ? 'no agent name' : v.reason}`));
    if (actorName && v.agentName !== actorName)
      return end(run.deny(403, 'identity', `VP proves agent ${JSON.stringify(v.agentName)}, not ${JSON.stringify(actorName)}`));
    if (agentDid && v.agentDid !== agentDid) return end(run.deny(403, 'identity', 'agent token and VP prove different DIDs'));
    actorName = v.agentName;
    agentDid = v.agentDid;
  }
  const subject = subjectOf() ?? actorName;
  if (!HEADER_SAFE.test(subject) || !HEADER_SAFE.test(actorName)) return end(run.deny(403, 'identity', 'actor or on-behalf-of is not a valid header value'));
  // A call is made for one human. Repeated headers reach here joined with commas (node, Envoy):
  // which of them the call is for is ambiguous, and a principal has no comma in it.
  if (f.onBehalfOf?.includes(',')) return end(run.deny(403, 'identity', `more than one ${H.onBehalfOf}: a call is made on behalf of one human`));
  run.pass(run.explain ? (agentDid ? `agent ${actorName} proved by VP (${agentDid})` : `agent ${actorName} (header identity)`) : '', 'governance');

  // Governance standing (rule identity): a governed agent that is not active acts for no one.
  const gov = governanceDenial(snap, actorName, now);
  if (gov) {
    run.stage = 'governance';
    return end(run.deny(403, 'identity', gov));
  }
  run.pass(run.explain ? (snap.governance?.agents.has(actorName) ? 'governed agent is active' : 'not governed') : '', 'registry');

  // 3. Registry: the actor is a registered agent; the target a registered service (or, through
  //    the proxy, an external host).
  const actor = reg.get(actorName);
  if (!actor || actor.kind !== 'agent') return end(run.deny(403, 'registry', `unknown agent ${JSON.stringify(actorName)}`));
  let external: string | undefined;
  if (proxy) {
    target = resolveUpstream(reg, proxy.hostPort, actor);
    if (target) service = target.name;
    else {
      external = externalAllowEntry(actor, proxy, reg, s.connectPorts);
      service = external ?? EXTERNAL;
      if (proxy.connect && !external && !s.connectPorts.has(proxy.port)) {
        run.stage = 'inline';
        return end(run.deny(403, 'inline', `CONNECT to port ${proxy.port} is not allowed for ${proxy.host} (not a registry upstream, not in egressAllow)`));
      }
    }
  } else {
    if (!service) return end(run.deny(403, 'registry', 'no target named'));
    target = reg.get(service);
    if (!target) return end(run.deny(403, 'registry', `unknown target ${JSON.stringify(service)}`));
  }
  if (target && kind && target.kind && target.kind !== kind) {
    return end(run.deny(403, 'registry', `target kind mismatch: request says ${kind}, registry says ${target.kind}`));
  }
  if (target) kind = kind ?? target.kind ?? '';
  run.pass(
    run.explain ? (target ? `target ${target.name}` : external ? `external ${proxy!.hostPort} listed as ${external}` : `external ${proxy!.hostPort}`) : '',
    'inline',
  );
  // Repeated scoping headers reach here joined ("acct/1, other/2"): the call would be decided
  // on one reading and the upstream may act on another.
  if (f.repeated) return end(run.deny(403, 'inline', `${f.repeated} sent more than once: the call is scoped by one value`));

  // 4a. Allowlist (deny by default). An unlisted external host is a human's question (below).
  if (target) {
    const { list, field } = allowListFor(actor, kind ?? '');
    if (!list.includes(target.name)) return end(run.deny(403, 'inline', `${target.name} is not in ${actor.name}.${field}`));
    run.pass(run.explain ? `${target.name} is in ${actor.name}.${field}` : '', 'budget');
  } else {
    run.pass(run.explain ? (external ? `${external} is in ${actor.name}.egressAllow` : 'unlisted external host') : '', 'budget');
  }

  // 4b. Budget. A call ticket from a proxy hop means that hop already counted this call.
  let ticketed = false;
  if (f.ticket && target) {
    if (a.ticket === undefined) return run.ask({ kind: 'ticket', ticket: f.ticket, actor: actorName, upstream: target.upstream });
    ticketed = a.ticket;
  }
  const ask = f.reserve;
  if (ask && 'error' in ask) return end(run.deny(403, 'inline', `malformed ${H.reserve}: ${ask.error}`));
  if (ask && kind !== 'model') return end(run.deny(403, 'inline', `${H.reserve} applies to model calls only`));
  let overAudit = '';
  if (actor.budget) {
    if (!a.usage) return run.ask({ kind: 'usage', agent: actorName });
    const over = overBudget(a.usage, actor.budget, { calls: !ticketed });
    // Audit mode: allowed, and the allow's audit record says what enforce would have denied.
    if (over && actor.budget.mode !== 'audit') {
      // To the broker (it asked to reserve) this is a budget refusal, as a reservation that does
      // not fit is: it answers the agent 429 insufficient_quota with a retry-after, not a 403.
      const refused = ask
        ? {
            headers: {
              [H.reservation]: formatReservation({ kind: 'refused', retryAfterSeconds: UNKNOWN_RETRY_SECONDS }),
              'retry-after': String(UNKNOWN_RETRY_SECONDS),
            },
          }
        : {};
      return end(run.deny(403, 'inline', over, refused));
    }
    if (over) overAudit = `over budget (audit mode): ${over}`;
  }
  run.pass(run.explain ? overAudit || (ticketed ? 'within budget (call counted by the proxy hop)' : 'within budget') : '');
  // What the allow adds to its effects (a ticket below); built in place, never copied.
  const extra: Pick<Effects, 'reserveCall' | 'reserveTokens' | 'ticket'> = ticketed ? {} : { reserveCall: { agent: actorName, budget: actor.budget } };
  if (ask) extra.reserveTokens = { ...ask, agent: actorName };

  // 4c. Delegation (task-based access control) for regulated targets, on every call; an
  //     unlisted external host through the proxy waits for a human instead.
  run.stage = 'delegation';
  let rule: Decision['rule'] = 'inline';
  let reason = external || target ? `allowed by registry allowlist and budget${ticketed ? ' (call counted by the proxy hop)' : ''}` : '';
  let delegation: Evaluation['delegation'];
  let needsApproval: string | undefined =
    !target && !external ? `needs approval: external host ${proxy!.hostPort} is not in ${actor.name}.egressAllow` : undefined;
  if (target?.dataClass === 'regulated') {
    if (!s.identityAuthority) return end(run.deny(403, 'delegation', 'regulated target and no identity authority configured (fail closed)'));
    const action = f.action?.trim();
    const resource = f.resource?.trim();
    if (!task || !action || !resource) return end(run.deny(403, 'delegation', 'regulated target needs task, action and resource'));
    const d = a.delegation;
    if (!d) return run.ask({ kind: 'delegation', query: { actor: actorName, task, action, resource } });
    // An outage is not an approval question: no human can fix it.
    if (isFailure(d)) return end(run.deny(403, 'delegation', d.failed));
    if (d.unavailable) return end(run.deny(403, 'delegation', `delegation check failed: ${d.reason}`));
    const expired = d.ok && d.notAfter !== undefined && d.notAfter <= Math.floor(now / 1000);
    if (!d.ok || expired) needsApproval = `needs approval: ${expired ? 'delegation expired' : d.reason || 'no approved delegation'}`;
    else {
      const id = d.delegationId ?? d.vcJti;
      if (id) delegation = d.notAfter !== undefined ? { id, exp: d.notAfter } : { id };
      rule = 'delegation';
      reason = 'approved delegation';
    }
  }
  if (needsApproval) {
    if (!proxy) return end(run.deny(401, 'delegation', needsApproval, { needsApproval: true, headers: { [H.needsApproval]: 'true' } }));
    // Through the proxy a human decides: the request is held until approved, denied or expired.
    run.stage = 'approval';
    const h = a.hold;
    if (!h) {
      // The human approves the request that is held and forwarded (the proxy's facts are the
      // request itself), and is shown what the agent declared beside it.
      const said = f.declared;
      return run.ask({
        kind: 'hold',
        request: {
          actor: actorName,
          actorDid: agentDid,
          target: proxy.hostPort,
          service: service ?? EXTERNAL,
          action: f.action?.trim() ?? '',
          resource: f.resource?.trim() ?? '',
          reason: said ? `${needsApproval}; the agent declared ${said.action} ${said.resource}` : needsApproval,
        },
      });
    }
    const ref = h.id ? `egress request ${h.id}` : 'egress request';
    if (h.result === 'pending') return end(run.deny(401, 'delegation', `${needsApproval} (would be held for a human)`, { needsApproval: true }));
    if (h.result === 'denied') return end(run.deny(403, 'delegation', `${ref} denied${h.detail ? `: ${h.detail}` : ''}`));
    if (h.result === 'expired') return end(run.deny(403, 'delegation', `${ref} expired${h.detail ? `: ${h.detail}` : ''}`));
    if (h.result === 'unavailable') return end(run.deny(403, 'delegation', `needs approval and the approval queue is unavailable: ${h.detail}`));
    rule = 'delegation';
    reason = `${ref} approved${h.detail ? ` by ${h.detail}` : ''}`;
  }
  run.pass(run.explain ? reason : '', 'opa');

  // 4d. Optional org-wide veto.
  if (s.opa) {
    const v = a.opa;
    if (!v) {
      return run.ask({
        kind: 'opa',
        input: {
          path: 'egress',
          via: f.via,
          actor: actorName,
          agentDid: agentDid ?? '',
          onBehalfOf: f.onBehalfOf ?? '',
          task: task ?? '',
          target: target?.name ?? proxy?.hostPort ?? '',
          targetKind: kind ?? '',
          dataClass: target?.dataClass ?? '',
          action: f.action ?? '',
          resource: f.resource ?? '',
          delegationId: delegation?.id ?? '',
        },
      });
    }
    if (isFailure(v)) return end(run.deny(403, 'opa', `decision error: ${v.failed}`));
    if (!v.allow) return end(run.deny(403, 'opa', `opa: ${v.reason}`));
    run.pass(run.explain ? v.reason || 'policy allowed' : '');
  }

  const headers: Record<string, string> = { [H.subject]: subject, [H.upstream]: target?.upstream ?? proxy!.hostPort, [H.actor]: actorName };
  if (agentDid) headers[H.agentDid] = agentDid;
  // A call ticket only where a next hop can present it: an upstream that also serves a model (a
  // broker asking /authz for the same agent's completion).
  if (proxy && target && servesModel(reg, target.upstream)) extra.ticket = { actor: actorName, upstream: target.upstream };
  const ev = end(run.allow(rule, overAudit ? `${overAudit}; ${reason}` : reason, headers), extra, delegation ? { delegation } : {});
  if (delegation) {
    ev.effects.audit.delegationId = delegation.id;
    if (delegation.exp !== undefined) ev.effects.audit.delegationExp = delegation.exp;
  }
  return ev;
}
