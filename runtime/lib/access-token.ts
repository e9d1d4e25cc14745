/**
 * Writ access tokens (issue 43) as an enforcement point reads them, pure and on neutral ground:
 * the claims, the token's shape, and the per-call checks (audience and actor; whether its
 * delegation covers the call). Signing and signature verification are the identity authority's
 * (identity/oauth/token.ts); the decision point imports only this.
 */
import { jwsHeader } from './jws.js';
import { resourceMatches } from './resource-glob.js';

export const ACCESS_TOKEN_TYP = 'at+jwt';

/** The delegation a token derives from (SPEC 2.6), checked where the token is used (SPEC 4.1). */
export interface TokenDelegation {
  id: string;
  /** The delegation VC's jti: revoking it makes the token inactive. */
  vc_jti: string;
  task: string;
  action: string;
  /** Resource glob (a trailing `/*`). */
  resource: string;
}

export interface AccessTokenClaims {
  iss: string;
  /** The human (delegation approver or OIDC subject), or the agent's DID for client_credentials. */
  sub: string;
  /** The registry entry the token is for. */
  aud: string;
  /** RFC 8693 4.1: the agent acting, its DID and registry name. */
  act: { sub: string; name: string };
  client_id: string;
  /**
   * The jti of the agent's Membership VC when the token was issued: revoking that VC (revocation,
   * re-provisioning) makes the token inactive wherever the revocation list reaches.
   */
  membership_jti: string;
  /**
   * A token exchanged for an upstream (identity/oauth/onward.ts): the jti of the agent's token it
   * was exchanged from; revoking that one makes this one inactive too.
   */
  parent_jti?: string;
  scope: string;
  jti: string;
  iat: number;
  exp: number;
  delegation?: TokenDelegation;
}

export type TokenCheck = { ok: true; claims: AccessTokenClaims } | { ok: false; reason: string };

/** Whether `token` is shaped as an access token (a compact JWS with `typ: at+jwt`), unverified. */
export function accessTokenShaped(token: string): boolean {
  return jwsHeader(token)?.typ === ACCESS_TOKEN_TYP;
}

/** The call a token is presented for (SPEC 4.1 egress headers). */
export interface TokenUse {
  /** `X-Writ-Actor`, when sent. */
  actor?: string;
  /** The registry entry the call reaches. */
  target: string;
  task?: string;
  action?: string;
  resource?: string;
}

/** Why the token does not speak for this call, or undefined: issued to the agent, `aud` names the target, `act` the actor. */
export function tokenMismatch(c: AccessTokenClaims, use: TokenUse): string | undefined {
  // A token exchanged for an upstream names the enforcement point as its client: the upstream's, not a credential.
  if (c.client_id !== c.act.name) return `token was issued to ${JSON.stringify(c.client_id)} for an upstream, not to the agent`;
  if (c.aud !== use.target) return `token audience ${JSON.stringify(c.aud)} is not the target ${JSON.stringify(use.target)}`;
  if (use.actor !== undefined && use.actor !== c.act.name) return `token is for agent ${JSON.stringify(c.act.name)}, not ${JSON.stringify(use.actor)}`;
  return undefined;
}

/** True when the token's delegation covers the call's task, action and resource (SPEC 4.1, 3.3). */
export function delegationCovers(c: AccessTokenClaims, use: TokenUse): boolean {
  const d = c.delegation;
  return d !== undefined && use.task === d.task && use.action === d.action && use.resource !== undefined && resourceMatches(d.resource, use.resource);
}

/** A directory human's standing as the feed carries it (identity governance standing, `humans`). */
export interface HumanStanding {
  /** Every directory row naming this human is inactive. */
  deactivated: boolean;
  /** Tokens issued at or before this (epoch s) are inactive: the human's last deactivation. */
  tokensNotBefore: number | null;
}

/** The directory reference a token's `sub` names: `oidc:<subject>` (approvals with auth on) is the subject. */
export function humanRef(sub: string): string {
  return sub.startsWith('oidc:') ? sub.slice('oidc:'.length) : sub;
}

/**
 * Why a delegated token of human `sub` issued at `iat` is inactive, or undefined: the human is
 * deactivated, or the token was issued at or before their last deactivation (a reactivation does
 * not bring such a token back). Someone the directory does not know is not refused here.
 */
export function humanDenial(standing: HumanStanding | undefined, sub: string, iat: number): string | undefined {
  if (!standing) return undefined;
  if (standing.deactivated) return `human ${JSON.stringify(sub)} is deactivated (directory)`;
  if (standing.tokensNotBefore !== null && iat <= standing.tokensNotBefore)
    return `token issued before human ${JSON.stringify(sub)} was deactivated (directory)`;
  return undefined;
}
