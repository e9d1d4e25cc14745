/**
 * The egress path's identity layers: who the agent is (its name, and the VPs that prove it), and
 * its governance standing (a governed agent that is not active acts for no one). Pure.
 */
import { H } from '../../lib/brand.js';
import { mayAct } from '../../lib/governance-standing.js';
import { bearerToken, HEADER_SAFE, isVpJwt } from './credentials.js';
import { ask, pass, refuse, type PolicyLayer, type Verdict } from './driver.js';
import type { EgressContext } from './egress.js';
import { isFailure, type Answers, type PolicySnapshot } from './types.js';

type V = Verdict<EgressContext>;

/** An identity deny; the audit row names the agent a VP proved before it. */
const no = (reason: string, proved?: Pick<EgressContext, 'actorName' | 'agentDid'>, challenge = false): V =>
  refuse(403, 'identity', reason, { adds: proved, extra: challenge ? { challenge } : undefined });

/**
 * The agent token and the VP. The agent token is the agent's Membership VP in VC-JWT form (what
 * the sidecar mints); a token of any other shape is not a VP and is ignored.
 */
function agentIdentity(c: Readonly<EgressContext>, a: Answers): V {
  const f = c.facts;
  const s = c.snap.settings;
  if (f.via === 'proxy' && !f.vp) return no(f.credentialIssue ?? 'missing Proxy-Authorization', undefined, true);
  if (f.via === 'authz' && !c.actorName) return no('empty actor');
  if (f.repeatedCredential) return no(`${f.repeatedCredential} sent more than once: one credential speaks for the agent`);
  if (s.identityMode === 'vc' && !s.identityAuthority) return no('vc identity mode needs the identity authority (AGENT_IDP_URL)');
  const headerVp = f.vp?.trim() || undefined;
  const token = bearerToken(f.authorization);
  const tokenVp = token && token !== headerVp && isVpJwt(token) ? token : undefined;
  if (!headerVp && !tokenVp && s.identityMode === 'vc') return no('agent VP required (vc identity mode)');
  let proved: Pick<EgressContext, 'actorName' | 'agentDid'> = { actorName: c.actorName, agentDid: undefined };
  for (const vp of [headerVp, tokenVp]) {
    if (!vp) continue;
    const v = provedBy(c, a, vp, proved);
    if (v.kind !== 'pass') return v;
    proved = v.adds as typeof proved;
  }
  const { actorName } = proved;
  const subject = f.onBehalfOf?.trim() || actorName;
  if (!HEADER_SAFE.test(subject) || !HEADER_SAFE.test(actorName)) return no('actor or on-behalf-of is not a valid header value', proved);
  // A call is made for one human. Repeated headers reach here joined with commas (node, Envoy):
  // which of them the call is for is ambiguous, and a principal has no comma in it.
  if (f.onBehalfOf?.includes(',')) return no(`more than one ${H.onBehalfOf}: a call is made on behalf of one human`, proved);
  return pass({ actorName, agentDid: proved.agentDid, subject });
}

/** One VP's verification: passes with the agent it proves, which must be the one named and proved so far. */
function provedBy(c: Readonly<EgressContext>, a: Answers, vp: string, so: Pick<EgressContext, 'actorName' | 'agentDid'>): V {
  const s = c.snap.settings;
  if (!s.identityAuthority) return no('agent VP presented but no identity authority is configured to verify it (fail closed)', so);
  const v = a.vps?.find((p) => p[0] === vp)?.[1];
  if (!v) return ask({ kind: 'vp', vp, audience: s.vpAudience });
  if (isFailure(v)) return no(v.failed, so);
  if (!v.ok || !v.agentName) return no(`invalid agent VP: ${v.ok ? 'no agent name' : v.reason}`, so);
  if (so.actorName && v.agentName !== so.actorName) return no(`VP proves agent ${JSON.stringify(v.agentName)}, not ${JSON.stringify(so.actorName)}`, so);
  if (so.agentDid && v.agentDid !== so.agentDid) return no('agent token and VP prove different DIDs', so);
  return pass({ actorName: v.agentName, agentDid: v.agentDid });
}

/** The governance verdict on an agent: undefined when it may act, else why not. */
function governanceDenial(snap: PolicySnapshot, agent: string, now: number): string | undefined {
  const g = snap.governance;
  const status = g?.agents.get(agent);
  const fresh = g !== undefined && now - g.fetchedAt <= snap.settings.governanceMaxAgeMs;
  if (status !== undefined) {
    if (!fresh) return `governance standing of agent ${JSON.stringify(agent)} is unknown: identity authority unreachable (fail closed)`;
    return mayAct(status) ? undefined : `agent ${JSON.stringify(agent)} is ${status} (governance)`;
  }
  if (!snap.settings.requireGoverned) return undefined;
  if (!fresh) return `governance standing of agent ${JSON.stringify(agent)} is unknown: identity authority unreachable (fail closed)`;
  return `agent ${JSON.stringify(agent)} has no governed record (governance required)`;
}

export const egressIdentity: PolicyLayer<EgressContext> = {
  name: 'identity',
  decide: agentIdentity,
  why: (c) => (c.agentDid ? `agent ${c.actorName} proved by VP (${c.agentDid})` : `agent ${c.actorName} (header identity)`),
};

/** Governance standing (rule `identity`): a governed agent that is not active acts for no one. */
export const governance: PolicyLayer<EgressContext> = {
  name: 'governance',
  decide(c) {
    const why = governanceDenial(c.snap, c.actorName, c.now);
    return why ? refuse(403, 'identity', why) : pass();
  },
  why: (c) => (c.snap.governance?.agents.has(c.actorName) ? 'governed agent is active' : 'not governed'),
};
