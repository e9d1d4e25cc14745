/**
 * The two grants of the token endpoint: RFC 8693 token exchange (a human's delegation and the
 * agent's proof become a token for one registry entry) and client_credentials with an RFC 7523
 * private_key_jwt (the agent alone, for an entry that needs no delegation). Each resolves with the
 * RFC 6749 5.1 / RFC 8693 2.2.1 answer or throws the OAuthError of RFC 6749 5.2.
 */
import { randomUUID } from 'node:crypto';
import type { Service } from '../../control-plane/types.js';
import { agentFromAssertion, actorFromToken, inStanding, sameClient, type ProvedAgent } from './agent.js';
import { humanInactivity } from './activity.js';
import { invalidClient, invalidGrant, invalidRequest, invalidScope, invalidTarget } from './errors.js';
import { required } from './form.js';
import { GRANT, JWT_BEARER_ASSERTION, nowSec, TOKEN_TYPE, type OAuthContext } from './context.js';
import { callRefusal, readEntry, readResource } from './registry.js';
import { oauthStore } from './store.js';
import { delegationFromSubject } from './subject.js';
import { mintAccessToken } from './token.js';
import { type AccessTokenClaims, type TokenDelegation } from '../../lib/access-token.js';
import { neededScopes } from '../../lib/protected-resource.js';

export interface TokenAnswer {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  scope: string;
  issued_token_type?: string;
}

/**
 * The registry entry a target parameter names: the entry's name, or (RFC 8707, as MCP clients send
 * it) the absolute URL of its MCP gateway route, `http(s)://<host>/mcp/<name>`: the resource its
 * RFC 9728 metadata names. The token is for the entry wherever the URL points; only Writ's
 * enforcement points take it. Anything else is taken as a name (and is then unknown).
 */
export function entryNamed(value: string): string {
  if (!/^https?:\/\//i.test(value)) return value;
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return value;
  }
  const m = /^\/mcp\/([^/]+)\/?$/.exec(u.pathname);
  if (!m || u.search || u.hash || u.username || u.password) return value;
  try {
    return decodeURIComponent(m[1]!);
  } catch {
    return value;
  }
}

/**
 * The entry a target parameter names: an MCP gateway route's URL or a name (`entryNamed`), or the
 * `oauthResource` URL of a service behind Envoy that opts in. Another absolute URL (a listener's
 * base, as its root RFC 9728 document names it) is refused: no registry name holds `//`, and a
 * token is for one entry.
 */
async function targetNamed(o: OAuthContext, value: string): Promise<string> {
  const name = entryNamed(value);
  if (name !== value || !/^https?:\/\//i.test(value)) return name;
  const e = await readResource(o.registry(), value);
  if (e) return e.name;
  throw invalidTarget(
    `${value} is no MCP gateway route nor a service's oauthResource: a token is for one registry entry, named by its route (http(s)://<host>/mcp/<name>), its resource or its name`,
  );
}

/** The registry entry `audience` or `resource` (RFC 8707) names, which the agent may call. */
export async function targetFor(o: OAuthContext, form: Map<string, string>, agent: ProvedAgent): Promise<Service> {
  const audience = form.has('audience') ? await targetNamed(o, form.get('audience')!) : undefined;
  const resource = form.has('resource') ? await targetNamed(o, form.get('resource')!) : undefined;
  if (audience !== undefined && resource !== undefined && audience !== resource) throw invalidTarget('audience and resource name different entries');
  const name = audience ?? resource;
  if (name === undefined) throw invalidTarget('audience (or resource) must name the registry entry the token is for');
  const target = await readEntry(o.registry(), name);
  if (!target) throw invalidTarget(`unknown registry entry ${JSON.stringify(name)}`);
  const refusal = callRefusal(await readEntry(o.registry(), agent.name), agent.name, target);
  if (refusal) throw invalidTarget(refusal);
  return target;
}

/** The scope granted: what was asked, each one offered; all of `offered` when nothing was asked. */
export function grantedScope(form: Map<string, string>, offered: string[]): string {
  const asked = form.get('scope')?.split(' ').filter(Boolean);
  if (!asked) return offered.join(' ');
  const extra = asked.filter((s) => !offered.includes(s));
  if (extra.length) throw invalidScope(`scope ${extra.join(' ')} is not granted for this entry${offered.length ? ` (offered: ${offered.join(' ')})` : ''}`);
  return [...new Set(asked)].join(' ');
}

export interface Issue {
  grant: string;
  /** The client the token is issued to (`client_id`): the agent's name unless an enforcement point asked (onward.ts). */
  clientId?: string;
  agent: ProvedAgent;
  /** The agent's Membership VC jti the token is issued under (`membership_jti`). */
  membershipJti: string;
  /** An onward exchange: the agent token's jti it is exchanged from (`parent_jti`). */
  parentJti?: string;
  sub: string;
  target: Service;
  scope: string;
  delegation?: TokenDelegation;
  /** Latest exp allowed besides the TTL (delegation notAfter, the agent's proof). */
  notAfter: number;
}

/** Signs, records (never the value) and answers the token. */
export async function issue(o: OAuthContext, i: Issue): Promise<TokenAnswer> {
  const iat = nowSec(o);
  const exp = Math.min(iat + o.tokenTtlSeconds, i.notAfter);
  if (exp <= iat) throw invalidRequest('the grant expires now: nothing left to issue');
  const claims: AccessTokenClaims = {
    iss: o.issuer,
    sub: i.sub,
    aud: i.target.name,
    act: { sub: i.agent.did, name: i.agent.name },
    client_id: i.clientId ?? i.agent.name,
    membership_jti: i.membershipJti,
    scope: i.scope,
    jti: `urn:uuid:${randomUUID()}`,
    iat,
    exp,
    ...(i.delegation ? { delegation: i.delegation } : {}),
    ...(i.parentJti ? { parent_jti: i.parentJti } : {}),
  };
  const token = await mintAccessToken(o.id.issuer(), claims);
  await oauthStore(o.id.store).recordToken({
    jti: claims.jti,
    grantType: i.grant,
    agentName: i.agent.name,
    agentDid: i.agent.did,
    subject: i.sub,
    audience: i.target.name,
    scope: i.scope,
    delegationId: i.delegation?.id ?? null,
    delegationJti: i.delegation?.vc_jti ?? null,
    issuedAt: new Date(iat * 1000).toISOString(),
    exp,
  });
  return { access_token: token, token_type: 'Bearer', expires_in: exp - iat, scope: i.scope };
}

/** RFC 8693: subject_token (the human's delegation), actor_token (the agent), audience/resource. */
export async function tokenExchange(o: OAuthContext, form: Map<string, string>): Promise<TokenAnswer> {
  const rt = form.get('requested_token_type');
  if (rt !== undefined && rt !== TOKEN_TYPE.accessToken && rt !== TOKEN_TYPE.jwt) throw invalidRequest(`requested_token_type ${rt} is not issued here`);
  const agent = await actorFromToken(o, form.get('actor_token'), form.get('actor_token_type'));
  sameClient(form.get('client_id'), agent);
  const membership = await inStanding(o, agent);
  const target = await targetFor(o, form, agent);
  const d = await delegationFromSubject(o, form, agent);
  const human = await humanInactivity(o, d.human);
  if (human) throw invalidGrant(human);
  const offered = [...new Set([d.delegation.action, ...neededScopes(target.requireScope)])];
  const scope = grantedScope(form, offered);
  const answer = await issue(o, {
    grant: GRANT.exchange,
    agent,
    sub: d.human,
    target,
    scope,
    delegation: d.delegation,
    membershipJti: membership.jti,
    notAfter: Math.min(d.notAfter, membership.exp),
  });
  return { ...answer, issued_token_type: TOKEN_TYPE.accessToken };
}

/** RFC 6749 4.4 with RFC 7523 private_key_jwt: the agent alone, for an entry without a delegation requirement. */
export async function clientCredentials(o: OAuthContext, form: Map<string, string>): Promise<TokenAnswer> {
  const type = form.get('client_assertion_type');
  if (type !== JWT_BEARER_ASSERTION) throw invalidClient(`client authentication must be private_key_jwt (client_assertion_type ${JWT_BEARER_ASSERTION})`);
  const proved = await agentFromAssertion(o, required(form, 'client_assertion'), form.get('client_id'));
  const membership = await inStanding(o, proved);
  // Recorded only once the signature verified: nobody else can spend the agent's jtis.
  if (!(await oauthStore(o.id.store).firstUse(proved.name, proved.jti, proved.exp, nowSec(o)))) {
    throw invalidClient('client_assertion replayed: its jti was already used');
  }
  const target = await targetFor(o, form, proved);
  if (target.dataClass === 'regulated') throw invalidTarget(`${target.name} is regulated: it needs a human's delegation (token exchange)`);
  const scope = grantedScope(form, neededScopes(target.requireScope));
  return issue(o, { grant: GRANT.clientCredentials, agent: proved, membershipJti: membership.jti, sub: proved.did, target, scope, notAfter: membership.exp });
}
