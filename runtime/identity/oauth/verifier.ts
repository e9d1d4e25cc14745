/**
 * The enforcement point's Writ access-token check, offline: the issuer key it holds (from the
 * authority's JWKS), and revocations and governance standing as it already follows them
 * (`TokenState`). A verified token is kept by its exact string (bounded, oldest evicted), so a
 * repeat costs a map lookup and no signature verification; its lifetime, revocation and standing
 * are checked on every use, and an expired entry is dropped when met.
 */
import type { KeyObject } from 'node:crypto';
import { claimsIssuer, tokenActive, verifyAccessToken, type TokenState } from './token.js';
import { type AccessTokenClaims, type TokenCheck } from '../../lib/access-token.js';

export interface TokenVerifierOptions {
  /** The authorization server's `issuer` (the tokens' `iss`). */
  issuer: string;
  /** The issuer's verification key by `kid` (the JWKS), or undefined when not (yet) known. */
  keyFor(kid: unknown): KeyObject | undefined;
  state: TokenState;
  now?: () => number;
  /** Allowed clock skew, seconds (default 30). */
  skewSec?: number;
  /** Most verified tokens kept (default 10 000). */
  maxEntries?: number;
}

export interface TokenVerifier {
  /** Whether `token` claims to be issued by this issuer (then it must verify, or the call is refused). */
  claimed(token: string): boolean;
  /** Verified (or cached), unexpired, unrevoked, its agent in standing. */
  check(token: string): TokenCheck;
  /** Signature verifications made so far (tests, bench). */
  signatureChecks(): number;
  /** The issuer whose tokens it checks (what a protected resource names as its authorization server), once known. */
  issuer(): string | undefined;
}

export function createTokenVerifier(o: TokenVerifierOptions): TokenVerifier {
  const now = o.now ?? Date.now;
  const skew = o.skewSec ?? 30;
  const max = o.maxEntries ?? 10_000;
  const cache = new Map<string, AccessTokenClaims>();
  let signatures = 0;

  function verified(token: string, nowSec: number): TokenCheck {
    const hit = cache.get(token);
    if (hit) {
      if (hit.exp + skew > nowSec) return { ok: true, claims: hit };
      cache.delete(token);
      return { ok: false, reason: 'token expired' };
    }
    signatures++;
    const r = verifyAccessToken(token, { issuer: o.issuer, keyFor: o.keyFor, nowSec, skewSec: skew });
    if (r.ok) {
      if (cache.size >= max) cache.delete(cache.keys().next().value!);
      cache.set(token, r.claims);
    }
    return r;
  }

  return {
    // A token verified before is this issuer's: no decode of it again.
    claimed: (token) => cache.has(token) || claimsIssuer(token, o.issuer),
    check(token) {
      const r = verified(token, Math.floor(now() / 1000));
      if (!r.ok) return r;
      const inactive = tokenActive(r.claims, o.state);
      return inactive ? { ok: false, reason: inactive } : r;
    },
    signatureChecks: () => signatures,
    issuer: () => o.issuer,
  };
}
