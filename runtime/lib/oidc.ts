/**
 * Workforce OIDC verification of bearer tokens (SPEC 5): ingress at the decision point and the
 * management listeners of both the control plane and the identity authority (lib/api-auth.ts). jose's remote JWKS caches the
 * key set and refetches it when a token names an unknown `kid` (key rotation), at most once per
 * cooldown. Only asymmetric algorithms are accepted; issuer, audience and lifetime are checked.
 * verify() never rejects: every failure is `{ok:false, reason}` (the caller answers 401).
 */
import { createRemoteJWKSet, errors, jwtVerify } from 'jose';
import { errMsg } from './log.js';
import type { OidcSetting } from './config.js';

/** What a workforce token verification says: its subject and claims, or why not. */
export type OidcAnswer = { ok: true; subject: string; claims: Record<string, unknown> } | { ok: false; reason: string };

/** A workforce OIDC verifier: resolves, never rejects. */
export interface OidcVerifier {
  verify(token: string): Promise<OidcAnswer>;
}

export interface OidcOptions {
  issuer: string;
  jwksUrl: string;
  /** Expected `aud`; one of several is fine. */
  audience: string | string[];
  /** JWKS HTTP timeout (default 2000 ms). */
  timeoutMs?: number;
  /** Minimum time between two JWKS refetches on an unknown kid (default 30 s). */
  cooldownMs?: number;
  /** Maximum age of the cached key set (default 10 min). */
  cacheMaxAgeMs?: number;
  /** Accepted clock skew in seconds (default 30). */
  clockToleranceSec?: number;
}

const ALGS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];

export function createOidcVerifier(o: OidcOptions): OidcVerifier {
  const jwks = createRemoteJWKSet(new URL(o.jwksUrl), {
    timeoutDuration: o.timeoutMs ?? 2000,
    cooldownDuration: o.cooldownMs ?? 30_000,
    cacheMaxAge: o.cacheMaxAgeMs ?? 600_000,
  });
  return {
    async verify(token) {
      try {
        const { payload } = await jwtVerify(token, jwks, {
          issuer: o.issuer,
          audience: o.audience,
          algorithms: ALGS,
          clockTolerance: o.clockToleranceSec ?? 30,
          requiredClaims: ['exp', 'sub'],
        });
        return { ok: true, subject: String(payload.sub), claims: payload as Record<string, unknown> };
      } catch (e) {
        return { ok: false, reason: reasonOf(e) };
      }
    },
  };
}

function reasonOf(e: unknown): string {
  if (e instanceof errors.JWTExpired) return 'token expired';
  if (e instanceof errors.JWTClaimValidationFailed) return `claim ${e.claim} invalid: ${e.reason}`;
  if (e instanceof errors.JWKSNoMatchingKey) return 'no matching signing key';
  if (e instanceof errors.JWSSignatureVerificationFailed) return 'bad signature';
  if (e instanceof errors.JWKSTimeout) return 'key set fetch timed out';
  if (e instanceof errors.JOSEAlgNotAllowed) return 'algorithm not allowed';
  if (e instanceof errors.JWTInvalid || e instanceof errors.JWSInvalid) return 'malformed token';
  return errMsg(e);
}

/** Workforce OIDC is on when all three of OIDC_ISSUER, OIDC_JWKS_URL, OIDC_AUDIENCE are set. */
export function oidcOf({ issuer, jwksUrl, audience }: OidcSetting): OidcVerifier | undefined {
  if (!issuer && !jwksUrl && !audience) return undefined;
  if (!issuer || !jwksUrl || !audience) {
    // Half-configured OIDC must not silently fall back to the open development posture.
    throw new Error('workforce OIDC needs all of OIDC_ISSUER, OIDC_JWKS_URL and OIDC_AUDIENCE');
  }
  return createOidcVerifier({
    issuer,
    jwksUrl,
    audience: audience
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  });
}
