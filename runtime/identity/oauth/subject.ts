/**
 * The human side of a token exchange (RFC 8693 `subject_token`): an approved task delegation's VC
 * (SPEC 2.6), or a workforce OIDC token of the human with the `task` (and, when several of that
 * human's delegations for the agent and task are usable, `action` or `delegation_id`) naming an
 * approved delegation that human approved. Either way the delegation must be usable now (SPEC
 * 3.3: approved, unexpired, unrevoked) and be the acting agent's.
 */
import { verify as cryptoVerify } from 'node:crypto';
import { parseJws } from '../../lib/jws.js';
import { identityRepo, type DelegationRow } from '../repo.js';
import { DELEGATION_TYPE } from '../vc.js';
import { invalidGrant, invalidRequest, OAuthError } from './errors.js';
import { nowSec, TOKEN_TYPE, type OAuthContext } from './context.js';
import type { ProvedAgent } from './agent.js';
import type { TokenDelegation } from '../../lib/access-token.js';

export interface Delegated {
  /** The human: the delegation's approver, or the OIDC subject. */
  human: string;
  delegation: TokenDelegation;
  notAfter: number;
}

const typesOf = (vc: unknown): unknown[] => {
  const t = (vc as { type?: unknown } | undefined)?.type;
  return Array.isArray(t) ? t : [t];
};

/** SPEC 3.3's usable check on one row, with the reason it is not. */
async function unusable(o: OAuthContext, d: DelegationRow): Promise<string | undefined> {
  if (d.status !== 'approved') return `delegation ${d.id} is ${d.status}`;
  if (!d.vcJti || d.notAfter === null) return `delegation ${d.id} has no credential`;
  if ((await identityRepo(o.id.store).revokedAmong([d.vcJti])).size > 0) return `delegation ${d.id} is revoked`;
  if (d.notAfter <= nowSec(o)) return `delegation ${d.id} expired`;
  return undefined;
}

function forAgent(d: DelegationRow, agent: ProvedAgent): void {
  if (d.actorName !== agent.name || (d.actorDid !== null && d.actorDid !== agent.did)) {
    throw invalidGrant(`delegation ${d.id} is for agent ${d.actorName}, not the agent the actor_token proves`);
  }
}

const delegated = (human: string, d: DelegationRow): Delegated => ({
  human,
  delegation: { id: d.id, vc_jti: d.vcJti!, task: d.task, action: d.action, resource: d.resource },
  notAfter: d.notAfter!,
});

/** The delegation VC path: issued and signed here, a TaskDelegationCredential, its row usable. */
async function fromDelegationVc(o: OAuthContext, token: string, agent: ProvedAgent): Promise<Delegated> {
  const issuer = o.id.issuer();
  const j = parseJws(token)!;
  if (j.header.alg !== 'EdDSA' || j.signature.length !== 64 || !cryptoVerify(null, j.signingInput, issuer.publicKey, j.signature)) {
    throw invalidGrant('subject_token signature invalid');
  }
  const p = j.payload;
  if (!typesOf(p.vc).includes(DELEGATION_TYPE)) throw invalidGrant('subject_token is not a task delegation credential');
  const subject = (p.vc as { credentialSubject?: { delegationId?: unknown } }).credentialSubject;
  if (typeof subject?.delegationId !== 'string' || typeof p.jti !== 'string') throw invalidGrant('subject_token names no delegation');
  if (typeof p.exp !== 'number' || p.exp <= nowSec(o)) throw invalidGrant('subject_token expired');
  const d = await identityRepo(o.id.store).getDelegation(subject.delegationId);
  if (!d || d.vcJti !== p.jti) throw invalidGrant('subject_token is not the credential of a known delegation');
  forAgent(d, agent);
  const why = await unusable(o, d);
  if (why) throw invalidGrant(why);
  return delegated(d.approver ?? d.actorName, d);
}

/** Whether `approver` (as stored: the body's name, or `oidc:<sub>` with auth on) is this OIDC subject. */
const approvedBy = (approver: string | null, subject: string) => approver === subject || approver === `oidc:${subject}`;

/** The OIDC path: the human's token, the task, and exactly one usable delegation they approved. */
async function fromHumanToken(o: OAuthContext, token: string, form: Map<string, string>, agent: ProvedAgent): Promise<Delegated> {
  if (!o.oidc) throw invalidGrant('subject_token is not a delegation credential of this issuer, and workforce OIDC (OIDC_*) is not configured');
  const task = form.get('task');
  if (!task) throw invalidRequest('a workforce OIDC subject_token needs the task parameter');
  const v = await o.oidc.verify(token);
  if (!v.ok) throw invalidGrant(`subject_token: ${v.reason}`);
  const action = form.get('action');
  const id = form.get('delegation_id');
  const rows = (await identityRepo(o.id.store).listDelegations()).filter(
    (d) => d.actorName === agent.name && d.task === task && (action === undefined || d.action === action) && (id === undefined || d.id === id),
  );
  const reasons: string[] = [];
  const usable: DelegationRow[] = [];
  for (const d of rows) {
    const why = d.status === 'approved' && !approvedBy(d.approver, v.subject) ? `delegation ${d.id} was approved by another human` : await unusable(o, d);
    if (why) reasons.push(why);
    else usable.push(d);
  }
  if (usable.length === 0)
    throw invalidGrant(`no usable delegation of ${v.subject} for agent ${agent.name} and task ${task}${reasons.length ? `: ${reasons.join('; ')}` : ''}`);
  if (usable.length > 1) throw invalidGrant(`${usable.length} usable delegations match: name one with action or delegation_id`);
  forAgent(usable[0]!, agent);
  return delegated(v.subject, usable[0]!);
}

export async function delegationFromSubject(o: OAuthContext, form: Map<string, string>, agent: ProvedAgent): Promise<Delegated> {
  const token = form.get('subject_token');
  const type = form.get('subject_token_type');
  if (token === undefined || type === undefined) throw invalidRequest('missing parameter subject_token or subject_token_type');
  if (type !== TOKEN_TYPE.jwt && type !== TOKEN_TYPE.idToken && type !== TOKEN_TYPE.accessToken) {
    throw new OAuthError('unsupported_token_type', `subject_token_type ${type} is not supported`);
  }
  const j = parseJws(token);
  if (!j) throw invalidGrant('subject_token is not a compact JWT');
  return j.payload.iss === o.id.issuer().did ? fromDelegationVc(o, token, agent) : fromHumanToken(o, token, form, agent);
}
