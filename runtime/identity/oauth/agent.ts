/**
 * Who the agent is at the token endpoint: its Membership VP (RFC 8693 `actor_token`), its own
 * client_credentials access token, or an RFC 7523 client assertion signed by its did:key. Each
 * answers the agent's registry name and DID, or throws the OAuth refusal.
 */
import { verify as cryptoVerify } from 'node:crypto';
import { DID_KEY_CHARS, didKeyVerificationMethod, publicKeyFromDidKey, publicKeyObject } from '../did.js';
import { parseJws } from '../../lib/jws.js';
import { identityRepo, type AgentRow } from '../repo.js';
import { verifyPresentation } from '../routes-agents.js';
import { invalidClient, invalidGrant, invalidRequest } from './errors.js';
import { nowSec, TOKEN_TYPE, type OAuthContext } from './context.js';
import { storedInactivity } from './activity.js';
import { verifyAccessToken } from './token.js';
import { type AccessTokenClaims } from '../../lib/access-token.js';

export interface ProvedAgent {
  name: string;
  did: string;
  /** When the proof stops holding (epoch s): no token outlives it. */
  exp: number;
}

/** The longest a client assertion may live (RFC 7523 3 leaves it to the server). */
export const MAX_ASSERTION_LIFETIME_S = 300;

const audiences = (aud: unknown): string[] =>
  typeof aud === 'string' ? [aud] : Array.isArray(aud) ? aud.filter((a): a is string => typeof a === 'string') : [];

/** The audience a VP or assertion names: the issuer or the token endpoint (either, as RFC 7523 3 allows). */
function ourAudience(o: OAuthContext, aud: unknown): string | undefined {
  const named = audiences(aud);
  return [o.issuer, o.tokenEndpoint].find((a) => named.includes(a));
}

/** The RFC 8693 actor token: a Membership VP for this server, or the agent's own client_credentials token. */
export async function actorFromToken(o: OAuthContext, token: string | undefined, type: string | undefined): Promise<ProvedAgent> {
  if (token === undefined) throw invalidRequest('missing parameter actor_token: the agent proves itself with its Membership VP');
  if (type === TOKEN_TYPE.accessToken) return actorFromAccessToken(o, token);
  if (type !== TOKEN_TYPE.jwt) throw invalidRequest(`actor_token_type must be ${TOKEN_TYPE.jwt} (a Membership VP) or ${TOKEN_TYPE.accessToken}`);
  const audience = ourAudience(o, parseJws(token)?.payload.aud);
  if (!audience) throw invalidGrant(`actor_token audience must be ${o.issuer} or ${o.tokenEndpoint}`);
  const v = await verifyPresentation(o.id, token, audience);
  if (!v.ok || !v.agentName || !v.agentDid || v.exp === null) throw invalidGrant(`actor_token: ${v.reason}`);
  return { name: v.agentName, did: v.agentDid, exp: v.exp };
}

async function actorFromAccessToken(o: OAuthContext, token: string): Promise<ProvedAgent> {
  const issuer = o.id.issuer();
  const r = verifyAccessToken(token, { issuer: o.issuer, keyFor: (kid) => (kid === issuer.kid ? issuer.publicKey : undefined), nowSec: nowSec(o) });
  if (!r.ok) throw invalidGrant(`actor_token: ${r.reason}`);
  const c: AccessTokenClaims = r.claims;
  // Only the agent's own token (client_credentials) proves the agent; a delegated one speaks for a human.
  if (c.sub !== c.act.sub || c.delegation || c.client_id !== c.act.name)
    throw invalidGrant('actor_token: an access token proves the agent only when it was issued to the agent itself');
  const inactive = await storedInactivity(o, c);
  if (inactive) throw invalidGrant(`actor_token: ${inactive}`);
  return { name: c.act.name, did: c.act.sub, exp: c.exp };
}

/** The agent row a client_id names (its registry name or its DID), provisioned. */
async function agentNamed(o: OAuthContext, clientId: string): Promise<AgentRow> {
  const repo = identityRepo(o.id.store);
  const a = clientId.startsWith('did:') ? await repo.agentByDid(clientId) : await repo.getAgent(clientId);
  if (!a?.did) throw invalidClient(`unknown client ${JSON.stringify(clientId)}: not a provisioned agent`);
  return a;
}

/** RFC 7523 2.2 / 3: a client assertion signed by the agent's did:key, for this server, once. */
export async function agentFromAssertion(o: OAuthContext, assertion: string, clientId: string | undefined): Promise<ProvedAgent & { jti: string }> {
  const j = parseJws(assertion);
  if (!j) throw invalidClient('client_assertion is not a compact JWT');
  const p = j.payload;
  if (typeof p.iss !== 'string' || p.iss !== p.sub) throw invalidClient('client_assertion iss and sub must both name the client');
  if (clientId !== undefined && clientId !== p.iss) throw invalidClient('client_id differs from the client_assertion issuer');
  const agent = await agentNamed(o, p.iss);
  const did = agent.did!;
  // `Ed25519` is RFC 9864's fully-specified name of the same algorithm (oauth4webapi sends it).
  if (j.header.alg !== 'EdDSA' && j.header.alg !== 'Ed25519') throw invalidClient('client_assertion must be signed with EdDSA by the agent did:key');
  if (j.header.kid !== undefined && j.header.kid !== did && j.header.kid !== didKeyVerificationMethod(did))
    throw invalidClient('client_assertion kid is not the agent key');
  if (did.length !== DID_KEY_CHARS || j.signature.length !== 64) throw invalidClient('client_assertion signature invalid');
  if (!cryptoVerify(null, j.signingInput, publicKeyObject(publicKeyFromDidKey(did)), j.signature)) throw invalidClient('client_assertion signature invalid');
  if (!ourAudience(o, p.aud)) throw invalidClient(`client_assertion audience must be ${o.issuer} or ${o.tokenEndpoint}`);
  const exp = assertionExpiry(o, p);
  if (typeof p.jti !== 'string' || p.jti === '' || p.jti.length > 256) throw invalidClient('client_assertion has no jti');
  return { name: agent.name, did, exp, jti: p.jti };
}

function assertionExpiry(o: OAuthContext, p: Record<string, unknown>): number {
  const now = nowSec(o);
  const skew = o.id.settings.clockSkewSeconds;
  const exp = p.exp;
  if (typeof exp !== 'number' || !Number.isFinite(exp)) throw invalidClient('client_assertion has no exp');
  if (exp + skew <= now) throw invalidClient('client_assertion expired');
  if (exp - now > MAX_ASSERTION_LIFETIME_S + skew) throw invalidClient(`client_assertion lives longer than ${MAX_ASSERTION_LIFETIME_S} s`);
  for (const k of ['nbf', 'iat'] as const) {
    const v = p[k];
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isFinite(v)) throw invalidClient(`client_assertion ${k} is not a NumericDate`);
    if (k === 'nbf' && v - skew > now) throw invalidClient('client_assertion not yet valid');
  }
  return exp;
}

/** RFC 8693 2.1: a client_id, when sent, names the agent the actor token proves. */
export function sameClient(clientId: string | undefined, agent: ProvedAgent): void {
  if (clientId !== undefined && clientId !== agent.name && clientId !== agent.did)
    throw invalidClient(`client_id ${JSON.stringify(clientId)} is not the agent the actor_token proves`);
}

/** The agent's Membership VC as a token is issued under it. */
export interface Membership {
  jti: string;
  /** Its expiry (epoch s): no token outlives the agent's identity. */
  exp: number;
}

/** Refuses an agent that is governed and not active, or whose Membership VC is revoked; resolves with that VC. */
export async function inStanding(o: OAuthContext, agent: ProvedAgent): Promise<Membership> {
  const repo = identityRepo(o.id.store);
  const status = await repo.governanceStatus(agent.name);
  if (status !== undefined && status !== 'active') throw invalidGrant(`agent ${agent.name} is ${status} (governance)`);
  const row = await repo.getAgent(agent.name);
  if (!row || row.did !== agent.did) throw invalidGrant(`agent ${agent.name} no longer holds this key`);
  if (!row.membershipJti || (await repo.revokedAmong([row.membershipJti])).size > 0) throw invalidGrant(`agent ${agent.name}'s Membership VC is revoked`);
  return { jti: row.membershipJti, exp: row.membershipExp ?? 0 };
}
