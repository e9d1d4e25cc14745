/** Pure parsing of the credentials a decision sees. Nothing here verifies a signature. */

/** Header values a listener can send: no control characters (a client-sent value never reaches an upstream unvetted). */
export const HEADER_SAFE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** The token of `Authorization: Bearer <token>`, or undefined for any other shape. */
export function bearerToken(authorization: string | undefined): string | undefined {
  if (!authorization) return undefined;
  const m = /^Bearer[ \t]+([^\s]+)[ \t]*$/i.exec(authorization);
  return m ? m[1] : undefined;
}

/** VP-shaped bearer tokens (size bounded before any decoding): the identity authority's own check. */
export { isVpJwt } from '../../lib/jws.js';

/**
 * Scopes granted by an OAuth access token: `scope` (RFC 8693/9068, space-separated) and `scp`
 * (Entra: space-separated string; Okta: array).
 */
export function grantedScopes(claims: Record<string, unknown>): Set<string> {
  const out = new Set<string>();
  const add = (v: unknown) => {
    if (typeof v === 'string') {
      for (const s of v.split(/\s+/)) if (s) out.add(s);
    } else if (Array.isArray(v)) {
      for (const s of v) if (typeof s === 'string' && s) out.add(s);
    }
  };
  add(claims.scope);
  add(claims.scp);
  return out;
}

/** Every scope of a (space-separated) requirement must be granted. Empty requirement: any caller. */
export function hasScopes(claims: Record<string, unknown>, required: string | undefined): boolean {
  const need = (required ?? '').split(/\s+/).filter(Boolean);
  if (need.length === 0) return true;
  const got = grantedScopes(claims);
  return need.every((s) => got.has(s));
}
