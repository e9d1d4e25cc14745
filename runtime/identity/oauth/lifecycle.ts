/**
 * RFC 7662 introspection and RFC 7009 revocation of the access tokens issued here. Introspection
 * is a management route (`identity:verify`, open in the development posture) and answers
 * `{active: false}` for anything that is not an active token of this server, without saying why.
 * Revocation needs only the token (revoking takes access away): its jti is written to the
 * revocation list `oauth`, which every enforcement point follows through `/v1/revocations`.
 */
import { identityRepo } from '../repo.js';
import { storedInactivity } from './activity.js';
import { OAUTH_LIST, type OAuthContext } from './context.js';
import { required } from './form.js';
import { verifyIssuedHere } from './token.js';
import { type AccessTokenClaims } from '../../lib/access-token.js';

const activeAnswer = (c: AccessTokenClaims) => ({
  active: true,
  iss: c.iss,
  sub: c.sub,
  aud: c.aud,
  act: c.act,
  client_id: c.client_id,
  scope: c.scope,
  jti: c.jti,
  iat: c.iat,
  exp: c.exp,
  token_type: 'Bearer',
  ...(c.delegation ? { delegation: c.delegation } : {}),
});

export async function introspect(o: OAuthContext, form: Map<string, string>): Promise<Record<string, unknown>> {
  const r = verifyIssuedHere(o, required(form, 'token'));
  if (!r.ok) return { active: false };
  return (await storedInactivity(o, r.claims)) ? { active: false } : activeAnswer(r.claims);
}

/** Revokes the token's jti when it is an access token of this server; anything else is ignored (RFC 7009 2.2). */
export async function revoke(o: OAuthContext, form: Map<string, string>): Promise<void> {
  const token = required(form, 'token');
  const r = verifyIssuedHere(o, token, true);
  if (!r.ok) return;
  await identityRepo(o.id.store).revoke(r.claims.jti, o.id.now(), OAUTH_LIST);
  o.id.verifyIndex?.noteRevoked(r.claims.jti);
  await o.id.changes?.settled(); // answered once every replica refuses it
}
