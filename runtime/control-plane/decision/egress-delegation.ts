/**
 * The egress path's human layers: a regulated target needs an approved delegation (task-based
 * access control, checked on every call; an outage denies, it is no approval question), and what
 * needs a human's approval (no delegation, or an unlisted external host through the proxy) is
 * answered 401 needs-approval at /authz and held for a human at the proxy. Pure.
 */
import { H } from '../../lib/brand.js';
import { ask, pass, refuse, skip, type PolicyLayer, type Verdict } from './driver.js';
import { EXTERNAL, type EgressContext } from './egress.js';
import type { DelegationAnswer } from '../identity-port.js';
import { delegationCovers } from '../../lib/access-token.js';
import { isFailure, type Answers } from './types.js';

type V = Verdict<EgressContext>;

/**
 * Needs a human: /authz answers 401 needs-approval (also with a hop named: the egress gateway holds
 * nothing); the proxy hands the request to the approval layer.
 */
function needsHuman(c: Readonly<EgressContext>, why: string): V {
  if (c.proxy && c.facts.via === 'proxy') return skip({ needsApproval: why });
  return refuse(401, 'delegation', why, { extra: { needsApproval: true, headers: { [H.needsApproval]: 'true' } } });
}

function delegation(c: Readonly<EgressContext>, a: Answers): V {
  const { target, external } = c;
  if (!target && !external) return needsHuman(c, `needs approval: external host ${c.proxy!.hostPort} is not in ${c.actor!.name}.egressAllow`);
  if (target?.dataClass !== 'regulated' && !c.regulatedTool)
    return pass({ reason: `allowed by registry allowlist and budget${c.ticketed ? ' (call counted by the proxy hop)' : ''}` });
  if (!c.snap.settings.identityAuthority) return refuse(403, 'delegation', 'regulated target and no identity authority configured (fail closed)');
  const task = c.task;
  const action = c.facts.action?.trim();
  const resource = c.facts.resource?.trim();
  if (!task || !action || !resource) return refuse(403, 'delegation', 'regulated target needs task, action and resource');
  // A Writ access token whose delegation covers this call is that delegation, checked offline
  // (its revocation and the agent's standing were read by the identity layer).
  const t = c.token;
  if (t?.delegation && target && delegationCovers(t, { target: target.name, task, action, resource })) {
    return pass({ rule: 'delegation', reason: 'approved delegation (access token)', delegation: { id: t.delegation.id, exp: t.exp } });
  }
  const d = a.delegation;
  if (!d) return ask({ kind: 'delegation', query: { actor: c.actorName, task, action, resource } });
  // An outage is not an approval question: no human can fix it.
  if (isFailure(d)) return refuse(403, 'delegation', d.failed);
  if (d.unavailable) return refuse(403, 'delegation', `delegation check failed: ${d.reason}`);
  const expired = d.ok && d.notAfter !== undefined && d.notAfter <= Math.floor(c.now / 1000);
  if (!d.ok || expired) return needsHuman(c, `needs approval: ${expired ? 'delegation expired' : d.reason || 'no approved delegation'}`);
  return pass({ rule: 'delegation', reason: 'approved delegation', delegation: delegationOf(d) });
}

function delegationOf(d: DelegationAnswer): EgressContext['delegation'] {
  const id = d.delegationId ?? d.vcJti;
  if (!id) return undefined;
  return d.notAfter !== undefined ? { id, exp: d.notAfter } : { id };
}

/** Through the proxy a human decides: the request is held until approved, denied or expired. */
function approval(c: Readonly<EgressContext>, a: Answers): V {
  const why = c.needsApproval;
  if (!why) return skip();
  const f = c.facts;
  const h = a.hold;
  if (!h) {
    // The human approves the request that is held and forwarded (the proxy's facts are the
    // request itself), and is shown what the agent declared beside it.
    const said = f.declared;
    return ask({
      kind: 'hold',
      request: {
        actor: c.actorName,
        actorDid: c.agentDid,
        target: c.proxy!.hostPort,
        service: c.service ?? EXTERNAL,
        action: f.action?.trim() ?? '',
        resource: f.resource?.trim() ?? '',
        reason: said ? `${why}; the agent declared ${said.action} ${said.resource}` : why,
      },
    });
  }
  const ref = h.id ? `egress request ${h.id}` : 'egress request';
  if (h.result === 'pending') return refuse(401, 'delegation', `${why} (would be held for a human)`, { extra: { needsApproval: true } });
  if (h.result === 'denied') return refuse(403, 'delegation', `${ref} denied${h.detail ? `: ${h.detail}` : ''}`);
  if (h.result === 'expired') return refuse(403, 'delegation', `${ref} expired${h.detail ? `: ${h.detail}` : ''}`);
  if (h.result === 'unavailable') return refuse(403, 'delegation', `needs approval and the approval queue is unavailable: ${h.detail}`);
  return pass({ rule: 'delegation', reason: `${ref} approved${h.detail ? ` by ${h.detail}` : ''}` });
}

export const delegationLayer: PolicyLayer<EgressContext> = { name: 'delegation', decide: delegation, why: (c) => c.reason };
export const approvalLayer: PolicyLayer<EgressContext> = { name: 'approval', decide: approval, why: (c) => c.reason };
