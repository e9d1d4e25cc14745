/**
 * Writ access tokens (RFC 9068 profile, `typ: at+jwt`, EdDSA with the issuer key): the claims,
 * minting, the published JWK, and the pure offline check an enforcement point runs. Nothing here
 * does I/O; revocation and governance standing are the caller's (`TokenState`).
 */
import { createPublicKey, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import { SignJWT } from 'jose';
import { parseJws } from '../../lib/jws.js';
import { ACCESS_TOKEN_TYP, type AccessTokenClaims, type TokenCheck, type TokenDelegation } from '../../lib/access-token.js';
import type { IssuerKey } from '../vc.js';
import { nowSec, type OAuthContext } from './context.js';

export async function mintAccessToken(issuer: IssuerKey, claims: AccessTokenClaims): Promise<string> {
  const { iss, sub, aud, jti, iat, exp, ...rest } = claims;
  return new SignJWT(rest as Record<string, unknown>)
    .setProtectedHeader({ alg: 'EdDSA', typ: ACCESS_TOKEN_TYP, kid: issuer.kid })
    .setIssuer(iss)
    .setSubject(sub)
    .setAudience(aud)
    .setJti(jti)
    .setIssuedAt(iat)
    .setExpirationTime(exp)
    .sign(issuer.privateKey);
}

/** The issuer key as a JWK (RFC 8037 OKP), for the JWKS. */
export function issuerJwk(issuer: IssuerKey): Record<string, string> {
  const jwk = issuer.publicKey.export({ format: 'jwk' }) as { kty: string; crv: string; x: string };
  return { kty: jwk.kty, crv: jwk.crv, x: jwk.x, kid: issuer.kid, alg: 'EdDSA', use: 'sig' };
}

/** The verification key a JWK names, or undefined (Ed25519 OKP keys only). */
export function keyFromJwk(jwk: unknown): KeyObject | undefined {
  const j = jwk as { kty?: unknown; crv?: unknown; x?: unknown };
  if (j?.kty !== 'OKP' || j.crv !== 'Ed25519' || typeof j.x !== 'string') return undefined;
  try {
    return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: j.x }, format: 'jwk' });
  } catch {
    return undefined;
  }
}

const str = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const num = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** Whether the (unverified) token says it is issued by `issuer`: only then is it Writ's to judge. */
export function claimsIssuer(token: string, issuer: string): boolean {
  const j = parseJws(token);
  return j !== undefined && j.payload.iss === issuer && j.header.typ === ACCESS_TOKEN_TYP;
}

function delegationOf(v: unknown): TokenDelegation | undefined | false {
  if (v === undefined) return undefined;
  const d = v as Record<string, unknown>;
  if (!d || typeof d !== 'object' || !str(d.id) || !str(d.vc_jti) || !str(d.task) || !str(d.action) || !str(d.resource)) return false;
  return { id: d.id, vc_jti: d.vc_jti, task: d.task, action: d.action, resource: d.resource };
}

/** The claims of a well-formed token payload, or why not. */
function claimsOf(p: Record<string, unknown>): AccessTokenClaims | string {
  const act = p.act as { sub?: unknown; name?: unknown } | undefined;
  if (!str(p.sub) || !str(p.aud) || !str(p.jti) || !str(p.client_id)) return 'token lacks sub, aud, jti or client_id';
  if (!str(p.membership_jti)) return 'token lacks membership_jti';
  if (p.parent_jti !== undefined && !str(p.parent_jti)) return 'token parent_jti claim is malformed';
  if (!act || typeof act !== 'object' || !str(act.sub) || !str(act.name)) return 'token lacks act';
  if (!num(p.exp) || !num(p.iat)) return 'token lacks exp or iat';
  const delegation = delegationOf(p.delegation);
  if (delegation === false) return 'token delegation claim is malformed';
  const claims: AccessTokenClaims = {
    iss: p.iss as string,
    sub: p.sub,
    aud: p.aud,
    act: { sub: act.sub, name: act.name },
    client_id: p.client_id,
    membership_jti: p.membership_jti,
    scope: typeof p.scope === 'string' ? p.scope : '',
    jti: p.jti,
    iat: p.iat,
    exp: p.exp,
  };
  if (delegation) claims.delegation = delegation;
  if (str(p.parent_jti)) claims.parent_jti = p.parent_jti;
  return claims;
}

export interface VerifyTokenOptions {
  issuer: string;
  /** The issuer's verification key for a `kid`, or undefined when unknown. */
  keyFor(kid: unknown): KeyObject | undefined;
  nowSec: number;
  skewSec?: number;
  /** Skip the lifetime check (revocation of an expired token is harmless). */
  ignoreLifetime?: boolean;
}

/**
 * Signature (EdDSA only: `alg: none` and every other algorithm refused), `typ`, issuer, shape and
 * lifetime. Revocation, standing and the target are checked by the caller on every use.
 */
export function verifyAccessToken(token: string, o: VerifyTokenOptions): TokenCheck {
  const j = parseJws(token);
  if (!j) return { ok: false, reason: 'token is not a compact JWS' };
  if (j.header.alg !== 'EdDSA' || 'crit' in j.header || j.header.b64 === false) return { ok: false, reason: 'token algorithm not accepted' };
  if (j.header.typ !== ACCESS_TOKEN_TYP) return { ok: false, reason: 'token is not an access token (typ)' };
  if (j.payload.iss !== o.issuer) return { ok: false, reason: 'token issuer mismatch' };
  const key = o.keyFor(j.header.kid);
  if (!key) return { ok: false, reason: 'token signing key unknown' };
  if (j.signature.length !== 64 || !cryptoVerify(null, j.signingInput, key, j.signature)) return { ok: false, reason: 'token signature invalid' };
  const claims = claimsOf(j.payload);
  if (typeof claims === 'string') return { ok: false, reason: claims };
  if (o.ignoreLifetime) return { ok: true, claims };
  return lifetimeOk(claims, o.nowSec, o.skewSec ?? 0);
}

/**
 * A token this authorization server issued: verified with its own issuer key, its lifetime within
 * the authority's clock skew (`ignoreLifetime` for revocation: an expired token may be revoked).
 */
export function verifyIssuedHere(o: OAuthContext, token: string, ignoreLifetime = false): TokenCheck {
  const issuer = o.id.issuer();
  return verifyAccessToken(token, {
    issuer: o.issuer,
    keyFor: (kid) => (kid === issuer.kid ? issuer.publicKey : undefined),
    nowSec: nowSec(o),
    skewSec: o.id.settings.clockSkewSeconds,
    ignoreLifetime,
  });
}

function lifetimeOk(claims: AccessTokenClaims, nowSec: number, skewSec: number): TokenCheck {
  if (claims.exp + skewSec <= nowSec) return { ok: false, reason: 'token expired' };
  if (claims.iat - skewSec > nowSec) return { ok: false, reason: 'token issued in the future' };
  return { ok: true, claims };
}

/** What the enforcement point knows now: revocations and governance standing (change feed / polls). */
export interface TokenState {
  isRevoked(jti: string): boolean;
  /** Why the agent may not act (suspended, quarantined, standing unknown), or undefined. */
  agentDenial(agentName: string): string | undefined;
  /** Why the human a delegated token speaks for (`sub`) may not be spoken for by a token issued at `iat`, or undefined. */
  humanDenial?(sub: string, iat: number): string | undefined;
}

/**
 * A verified token still usable now: neither it, its delegation nor the agent's Membership VC
 * revoked, the agent in standing, its human not deactivated.
 */
export function tokenActive(c: AccessTokenClaims, state: TokenState): string | undefined {
  if (state.isRevoked(c.jti)) return 'token revoked';
  if (c.delegation && state.isRevoked(c.delegation.vc_jti)) return 'delegation revoked';
  if (state.isRevoked(c.membership_jti)) return "agent's Membership VC revoked";
  if (c.parent_jti !== undefined && state.isRevoked(c.parent_jti)) return 'the agent token it was exchanged from is revoked';
  return state.agentDenial(c.act.name) ?? (c.delegation ? state.humanDenial?.(c.sub, c.iat) : undefined);
}
