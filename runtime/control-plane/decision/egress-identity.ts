/**
 * The egress path's identity layers: who the agent is (its name, and the VPs that prove it), and
 * its governance standing (a governed agent that is not active acts for no one). Pure.
 */
import { accessTokenShaped } from '../../lib/access-token.js';
import { H } from '../../lib/brand.js';
import { mayAct } from '../../lib/governance-standing.js';
import { bearerToken, HEADER_SAFE, isVpJwt } from './credentials.js';
import { ask, pass, refuse, type PolicyLayer, type Verdict } from './driver.js';
import type { EgressContext } from './egress.js';
import { isFailure, type Answers, type Failure, type PolicySnapshot, type TokenAnswer } from './types.js';

type V = Verdict<EgressContext>;

/** An identity deny; the audit row names the agent a VP proved before it. */
const no = (reason: string, proved?: Partial<Pick<EgressContext, 'actorName' | 'agentDid' | 'token'>>, challenge = false): V =>
  refuse(403, 'identity', reason, { adds: proved, extra: challenge ? { challenge } : undefined });

/**
 * The agent token and the VP. The agent token is a Writ access token (issue 43: checked offline,
 * `token` below) or the agent's Membership VP in VC-JWT form (what the sidecar mints); a bearer
 * token of any other issuer is not taken as a credential and is ignored. Through the proxy the one
 * credential is Proxy-Authorization: a VP, or an access token.
 */
function agentIdentity(c: Readonly<EgressContext>, a: Answers): V {
  const f = c.facts;
  const s = c.snap.settings;
  if (f.via === 'proxy' && !f.vp) return no(f.credentialIssue ?? 'missing Proxy-Authorization', undefined, true);
  const given = f.vp?.trim() || undefined;
  const bearer = f.via === 'proxy' ? given : bearerToken(f.authorization);
  const candidate = bearer && accessTokenShaped(bearer) ? bearer : undefined;
  // An /authz call naming its hop (the egress gateway) may leave the actor to the VP it carries;
  // an access token names its agent (`act`) itself, as an OAuth client's only credential.
  // No VP and no Writ-shaped token: no credential at all (the challenge of a service that opts in, egress-challenge.ts).
  if (!c.actorName && !candidate && actorRequired(c)) return no('empty actor', undefined, !given && !(bearer && isVpJwt(bearer)));
  if (f.repeatedCredential) return no(`${f.repeatedCredential} sent more than once: one credential speaks for the agent`);
  if (s.identityMode === 'vc' && !s.identityAuthority) return no('vc identity mode needs the identity authority (AGENT_IDP_URL)');
  let proved: Proved = { actorName: c.actorName, agentDid: undefined, token: undefined };
  if (candidate) {
    const t = a.token;
    if (!t) return ask({ kind: 'token', token: candidate });
    const v = tokenProves(c, t, proved);
    if (v.kind !== 'pass') return v;
    proved = v.adds as Proved;
  }
  // Through the proxy a claimed token is the credential; anything else there is taken as a VP.
  const headerVp = f.via === 'proxy' && proved.token ? undefined : given;
  // A bearer that proved itself a Writ access token is not also a VP (no second decode of it).
  const tokenVp = f.via === 'authz' && bearer && bearer !== headerVp && !proved.token && isVpJwt(bearer) ? bearer : undefined;
  if (!headerVp && !tokenVp && !proved.token && s.identityMode === 'vc')
    return no('agent VP or access token required (vc identity mode)', undefined, f.via === 'authz');
  for (const vp of [headerVp, tokenVp]) {
    if (!vp) continue;
    const v = provedBy(c, a, vp, proved);
    if (v.kind !== 'pass') return v;
    proved = { ...proved, ...(v.adds as Proved) };
  }
  return whoFor(c, proved);
}

type Proved = Pick<EgressContext, 'actorName' | 'agentDid' | 'token'>;

/** Whether the call must name its actor: at /authz, unless a hop (the egress gateway) leaves it to the VP it carries. */
const actorRequired = (c: Readonly<EgressContext>) => c.facts.via === 'authz' && !(c.proxy && c.facts.vp?.trim());

/** A Writ access token: ignored when not Writ's; else it must hold and name the actor declared. */
function tokenProves(c: Readonly<EgressContext>, t: TokenAnswer | Failure, so: Proved): V {
  if (isFailure(t)) return refuse(401, 'identity', t.failed);
  // Another issuer's token is no credential: with no VP either, none was presented.
  if (!t.claimed) return so.actorName || !actorRequired(c) ? pass(so) : no('empty actor', undefined, !c.facts.vp?.trim());
  if (!t.ok) return refuse(401, 'identity', `invalid access token: ${t.reason}`);
  const agent = t.claims.act;
  if (so.actorName && agent.name !== so.actorName)
    return refuse(401, 'identity', `access token is for agent ${JSON.stringify(agent.name)}, not ${JSON.stringify(so.actorName)}`);
  // A delegated token speaks for its human; a call for someone else is not what it was issued for.
  const human = c.facts.onBehalfOf?.trim();
  if (t.claims.delegation && human && human !== t.claims.sub)
    return refuse(401, 'identity', `access token is for ${JSON.stringify(t.claims.sub)}, not on behalf of ${JSON.stringify(human)}`);
  return pass({ actorName: agent.name, agentDid: agent.sub, token: t.claims });
}

/** For whom the call is made: `X-Writ-On-Behalf-Of`, else a delegated token's human, else the actor. */
function whoFor(c: Readonly<EgressContext>, proved: Proved): V {
  const f = c.facts;
  const { actorName } = proved;
  const subject = f.onBehalfOf?.trim() || (proved.token?.delegation ? proved.token.sub : actorName);
  if (!HEADER_SAFE.test(subject) || !HEADER_SAFE.test(actorName)) return no('actor or on-behalf-of is not a valid header value', proved);
  // A call is made for one human. Repeated headers reach here joined with commas (node, Envoy):
  // which of them the call is for is ambiguous, and a principal has no comma in it.
  if (f.onBehalfOf?.includes(',')) return no(`more than one ${H.onBehalfOf}: a call is made on behalf of one human`, proved);
  return pass({ ...proved, subject });
}

/** One VP's verification: passes with the agent it proves, which must be the one named and proved so far. */
function provedBy(c: Readonly<EgressContext>, a: Answers, vp: string, so: Proved): V {
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
  why: (c) =>
    c.token
      ? `agent ${c.actorName} proved by access token (${c.agentDid})`
      : c.agentDid
        ? `agent ${c.actorName} proved by VP (${c.agentDid})`
        : `agent ${c.actorName} (header identity)`,
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
