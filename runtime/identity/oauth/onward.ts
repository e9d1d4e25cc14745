/**
 * The onward exchange (issue 43 item 7, RFC 8693 with an enforcement point as the client, as
 * agentgateway's token exchange does): an enforcement point (the MCP gateway) that allowed a call
 * carrying the agent's Writ access token exchanges that token (`subject_token`, type
 * `...:access_token`, no `actor_token`) for a new one that the upstream of a registry entry with
 * `upstreamAuth: {exchange: true}` gets instead of anything of the agent's. The new token says the
 * same thing (`sub` the human, `act` the agent, the delegation claim unchanged, a scope no wider)
 * for the same entry, lives no longer than the agent's token, and names the enforcement point as
 * its client (`client_id` GATEWAY_CLIENT_ID), so no enforcement point of Writ takes it back as an
 * agent's credential (lib/access-token.ts `tokenMismatch`, agent.ts).
 *
 * The caller authenticates as an enforcement point: `Authorization: Bearer` with a credential
 * holding `identity:verify` (what the control plane already presents to the authority,
 * `WRIT_API_KEY`); open in the development posture (`WRIT_API_AUTH` off), as introspection is.
 * Without that, anyone holding the agent's token could mint the token an upstream takes as
 * "this call passed Writ".
 */
import { inStanding, type ProvedAgent } from './agent.js';
import { storedInactivity } from './activity.js';
import { invalidClient, invalidGrant, invalidTarget } from './errors.js';
import { GATEWAY_CLIENT_ID, GRANT, TOKEN_TYPE, type OAuthContext } from './context.js';
import { grantedScope, issue, targetFor, type TokenAnswer } from './grants.js';
import { verifyIssuedHere } from './token.js';
import type { AccessTokenClaims } from '../../lib/access-token.js';

/** Whether a token request is an onward exchange: an access token as subject and no actor. */
export const isOnward = (form: Map<string, string>) => !form.has('actor_token') && form.get('subject_token_type') === TOKEN_TYPE.accessToken;

/** The agent's own token, verified and active: the subject of the exchange. */
async function subjectToken(o: OAuthContext, token: string | undefined): Promise<AccessTokenClaims> {
  if (token === undefined) throw invalidGrant('missing parameter subject_token: the agent access token to exchange');
  const r = verifyIssuedHere(o, token);
  if (!r.ok) throw invalidGrant(`subject_token: ${r.reason}`);
  if (r.claims.client_id !== r.claims.act.name) throw invalidGrant('subject_token was itself issued for an upstream: only an agent token is exchanged');
  const inactive = await storedInactivity(o, r.claims);
  if (inactive) throw invalidGrant(`subject_token: ${inactive}`);
  return r.claims;
}

export async function onwardExchange(o: OAuthContext, form: Map<string, string>, authorization: string | undefined): Promise<TokenAnswer> {
  if (!(await o.enforcementPoint(authorization)))
    throw invalidClient('an access token is exchanged for an upstream only by an enforcement point (Authorization: Bearer with identity:verify)');
  const c = await subjectToken(o, form.get('subject_token'));
  const agent: ProvedAgent = { name: c.act.name, did: c.act.sub, exp: c.exp };
  const membership = await inStanding(o, agent);
  const target = await targetFor(o, form, agent);
  if (target.name !== c.aud) throw invalidTarget(`the agent token is for ${JSON.stringify(c.aud)}: it is exchanged only for the entry it was issued for`);
  const scope = grantedScope(form, c.scope.split(' ').filter(Boolean));
  const answer = await issue(o, {
    grant: GRANT.exchange,
    clientId: GATEWAY_CLIENT_ID,
    agent,
    sub: c.sub,
    target,
    scope,
    ...(c.delegation ? { delegation: c.delegation } : {}),
    membershipJti: membership.jti,
    parentJti: c.jti,
    notAfter: Math.min(c.exp, membership.exp),
  });
  return { ...answer, issued_token_type: TOKEN_TYPE.accessToken };
}
