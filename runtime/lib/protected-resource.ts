/**
 * Writ's enforcement points as OAuth protected resources (issue 43 item 6), pure: the RFC 9728
 * metadata document naming Writ's authorization server, its well-known URL (RFC 9728 3.1 path
 * insertion), and the RFC 6750 3 `WWW-Authenticate: Bearer` challenge a refusal carries (MCP
 * 2025-11-25 / 2026-07-28 authorization: `resource_metadata` on 401, `insufficient_scope` with every
 * scope needed in one challenge on 403).
 *
 * A Writ token's scope (identity/oauth/grants.ts) is the entry's `requireScope` (space-separated
 * words) plus, for a delegated token, the delegation's action; a resource needs the words of its
 * entry's `requireScope`, every one of them.
 */

export const PRM_WELL_KNOWN = '/.well-known/oauth-protected-resource';

/** RFC 9728 3.1: the well-known suffix inserted between the host and the path (a terminating `/` dropped). */
export function metadataUrlOf(resource: string): string {
  const u = new URL(resource);
  const path = u.pathname === '/' ? '' : u.pathname.replace(/\/$/, '');
  return `${u.origin}${PRM_WELL_KNOWN}${path}${u.search}`;
}

/** The scopes an entry's `requireScope` needs (its space-separated words, each once). */
export function neededScopes(requireScope: string | undefined): string[] {
  return [...new Set((requireScope ?? '').split(' ').filter(Boolean))];
}

/** The needed scopes a token's `scope` claim does not hold. */
export function missingScopes(granted: string, needed: readonly string[]): string[] {
  const has = new Set(granted.split(' ').filter(Boolean));
  return needed.filter((s) => !has.has(s));
}

export interface ResourceMetadata {
  resource: string;
  authorization_servers: string[];
  bearer_methods_supported: string[];
  resource_name: string;
  scopes_supported?: string[];
}

/** RFC 9728 2: the document for one resource; `scopes_supported` only when the entry needs some. */
export function resourceMetadata(o: { resource: string; issuer: string; name: string; requireScope?: string }): ResourceMetadata {
  const scopes = neededScopes(o.requireScope);
  return {
    resource: o.resource,
    authorization_servers: [o.issuer],
    bearer_methods_supported: ['header'],
    resource_name: o.name,
    ...(scopes.length ? { scopes_supported: scopes } : {}),
  };
}

export interface Challenge {
  status: 401 | 403;
  /** The `WWW-Authenticate` value. */
  header: string;
}

/** What a refusal says to an OAuth client: the decision's status, rule and missing scopes, and whether a credential came. */
export interface Refused {
  status: number;
  rule: string;
  reason: string;
  insufficientScope?: string[];
}

/** RFC 6750 3: a quoted-string holds no `"` or `\`, and error_description only %x20-7E. */
const quoted = (v: string) => `"${v.replace(/[^\x20-\x7e]|["\\]/g, "'")}"`;

/**
 * The challenge for a refusal, or undefined when it is no credential's fault: missing scopes 403
 * `insufficient_scope`; an invalid token 401 `invalid_token`; no credential at all and an identity
 * refusal 401 with `resource_metadata` alone (RFC 6750 3.1: no error code when none was sent).
 */
export function challengeFor(d: Refused, credentialSent: boolean, metadataUrl: string): Challenge | undefined {
  const meta = `resource_metadata=${quoted(metadataUrl)}`;
  if (d.insufficientScope?.length) {
    const scope = quoted(d.insufficientScope.join(' '));
    return { status: 403, header: `Bearer error="insufficient_scope", scope=${scope}, ${meta}, error_description=${quoted(d.reason)}` };
  }
  if (d.rule !== 'identity') return undefined;
  if (!credentialSent) return { status: 401, header: `Bearer ${meta}` };
  if (d.status === 401) return { status: 401, header: `Bearer error="invalid_token", ${meta}, error_description=${quoted(d.reason)}` };
  return undefined;
}
