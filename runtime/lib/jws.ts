/**
 * Compact-JWS parsing with every size bounded before any work, pure and dependency-free so the
 * control plane can use the same bounds (`isVpJwt`) without pulling in the issuer side. Nothing
 * here verifies a signature.
 */

/** Largest compact JWT accepted anywhere (a VP with its Membership VC is ~1.5 KB). */
export const MAX_JWT_CHARS = 64 * 1024;

type Json = Record<string, unknown>;

export interface Jws {
  header: Json;
  payload: Json;
  signingInput: Buffer;
  signature: Buffer;
}

const B64U = /^[A-Za-z0-9_-]*$/;

function decodeJson(part: string): Json | undefined {
  try {
    const v = JSON.parse(Buffer.from(part, 'base64url').toString('utf8')) as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Json) : undefined;
  } catch {
    return undefined;
  }
}

/** The three base64url parts of a compact JWS of at most MAX_JWT_CHARS; undefined otherwise. */
function partsOf(token: unknown): [string, string, string] | undefined {
  if (typeof token !== 'string' || token.length > MAX_JWT_CHARS) return undefined;
  const parts = token.split('.');
  if (parts.length !== 3 || !parts.every((p) => B64U.test(p))) return undefined;
  return parts as [string, string, string];
}

/**
 * The (unverified) protected header of a compact JWS of at most MAX_JWT_CHARS, decoding nothing
 * else: what a caller needs to route a token (its `typ`) costs no payload decode.
 */
export function jwsHeader(token: unknown): Json | undefined {
  const parts = partsOf(token);
  return parts ? decodeJson(parts[0]) : undefined;
}

/** Parses a compact JWS (at most MAX_JWT_CHARS); undefined when it is not one. */
export function parseJws(token: unknown): Jws | undefined {
  const parts = partsOf(token);
  if (!parts) return undefined;
  const [h, p, s] = parts;
  const header = decodeJson(h);
  const payload = decodeJson(p);
  if (!header || !payload) return undefined;
  const signature = Buffer.from(s, 'base64url');
  // One spelling per signature: unused low bits set in its last character would make the same
  // token appear as several strings (to a cache, a replay check or an audit record).
  if (signature.toString('base64url') !== s) return undefined;
  return { header, payload, signingInput: Buffer.from(`${h}.${p}`), signature };
}

/**
 * True when `token` is a compact JWS of at most MAX_JWT_CHARS whose (unverified) payload carries
 * a `vp` claim: a Verifiable Presentation in VC-JWT form. For routing a bearer token to VP
 * verification only; linear in the token's length, which is bounded first.
 */
export function isVpJwt(token: unknown): boolean {
  const parts = partsOf(token);
  if (!parts || !parts[1]) return false;
  const payload = decodeJson(parts[1]);
  return payload !== undefined && 'vp' in payload;
}
