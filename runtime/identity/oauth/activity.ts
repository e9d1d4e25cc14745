/**
 * Whether an issued token is still active, from the store (introspection, an access token used as
 * actor token): not revoked, nor the agent's Membership VC it was issued under, its delegation still approved, unexpired and unrevoked, its agent in
 * standing and still holding the key the token names, its human not deactivated in the directory.
 * Enforcement points decide the rest offline
 * (token.ts `tokenActive`) from the revocation and standing feeds.
 */
import { eq, or, sql } from 'drizzle-orm';
import { employees } from '../../store/schema/directory.js';
import { identityRepo } from '../repo.js';
import { nowSec, type OAuthContext } from './context.js';
import { humanDenial, humanRef, type AccessTokenClaims } from '../../lib/access-token.js';

/** Why the token is inactive, or undefined when it is active. */
export async function storedInactivity(o: OAuthContext, c: AccessTokenClaims): Promise<string | undefined> {
  const repo = identityRepo(o.id.store);
  const jtis = [c.jti, c.membership_jti, ...(c.delegation ? [c.delegation.vc_jti] : []), ...(c.parent_jti ? [c.parent_jti] : [])];
  const revoked = await repo.revokedAmong(jtis);
  if (revoked.has(c.jti)) return 'token revoked';
  if (c.delegation && revoked.has(c.delegation.vc_jti)) return 'delegation revoked';
  if (revoked.has(c.membership_jti)) return "agent's Membership VC revoked";
  if (c.parent_jti && revoked.has(c.parent_jti)) return 'the agent token it was exchanged from is revoked';
  const status = await repo.governanceStatus(c.act.name);
  if (status !== undefined && status !== 'active') return `agent ${c.act.name} is ${status} (governance)`;
  const agent = await repo.getAgent(c.act.name);
  if (!agent || agent.did !== c.act.sub) return `agent ${c.act.name} no longer holds the key the token names`;
  if (!c.delegation) return undefined;
  const human = await humanInactivity(o, c.sub, c.iat);
  if (human) return human;
  const d = await repo.getDelegation(c.delegation.id);
  if (!d || d.status !== 'approved' || d.vcJti !== c.delegation.vc_jti) return 'delegation no longer approved';
  if (d.notAfter === null || d.notAfter <= nowSec(o)) return 'delegation expired';
  return undefined;
}

/**
 * Why the human a delegated token speaks for may no longer be spoken for by a token issued at
 * `iat`: a directory employee (matched by subject or email; `oidc:<subject>` as approvals record it
 * with auth on) who is deactivated and not also an active employee, or whose last deactivation was
 * at or after `iat` (lib/access-token.ts `humanDenial`, the rule enforcement points apply from the
 * feed). Someone the directory does not know is not refused here (the development posture has no
 * directory). `iat` undefined (an exchange about to issue): only a deactivation refuses.
 */
export async function humanInactivity(o: OAuthContext, human: string, iat = Number.POSITIVE_INFINITY): Promise<string | undefined> {
  const ref = humanRef(human);
  const rows = await o.id.store.db
    .select({ status: employees.status, notBefore: sql<string | null>`floor(extract(epoch from ${employees.tokensNotBefore}))::bigint` })
    .from(employees)
    .where(or(eq(employees.employeeSubject, ref), eq(employees.email, ref)));
  if (rows.length === 0) return undefined;
  const notBefore = rows.reduce<number | null>((m, r) => (r.notBefore === null ? m : Math.max(m ?? 0, Number(r.notBefore))), null);
  return humanDenial({ deactivated: rows.every((r) => r.status !== 'active'), tokensNotBefore: notBefore }, human, iat);
}
