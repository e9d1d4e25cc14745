/**
 * Authenticated management (issue 15 item 8). With `WRIT_API_AUTH=keys` every route of the
 * control plane's management listener (:8181) and of the identity authority (:8090) needs
 * `Authorization: Bearer <credential>`, except the public routes of ROUTE_SCOPES; the credential
 * must hold the scope ROUTE_SCOPES names for the route. Missing or bad credential: 401 (with
 * `WWW-Authenticate: Bearer`); a credential without the scope: 403. A route the table does not name
 * needs the `admin` scope (deny by default).
 *
 * Credentials, tried in this order:
 *   - `WRIT_BOOTSTRAP_ADMIN_KEY`: every scope (a first start, before any key exists); compared in
 *     constant time, never logged;
 *   - a Writ API key (SPEC 4.5, `<brand>_live_` / `<brand>_test_`): its `scopes` list;
 *   - a workforce OIDC bearer token (when the listener has an OIDC verifier): the scopes in its
 *     `scope` (space-separated) or `scp` (list) claim.
 * An API key is checked by the identity authority's key service on every request (its rows follow
 * the change feed), so a revoked or rotated key stops working at once; a verified OIDC token, which
 * nothing revokes before it expires, is remembered for CREDENTIAL_CACHE_MS. A key bound to a tenant
 * (`tenantId`) is that tenant's credential for `/v1/keys/verify`, never a management credential:
 * the management routes span tenants, so it is refused (403) rather than trusted across them.
 *
 * The scope table (one place; runtime/README.md documents it):
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { sha256 } from './sha256.js';
import type { Context, MiddlewareHandler } from 'hono';
import { BRAND } from './brand.js';
import type { AuthConfig } from './config.js';
import type { OidcVerifier } from './oidc.js';

export type AuthMode = 'off' | 'keys';

/** Who called: what the audit and approvals name as the actor. */
export interface Principal {
  kind: 'bootstrap' | 'key' | 'oidc';
  /** `bootstrap`, `key:<key id>` or `oidc:<subject>`. */
  id: string;
  /** Granted scopes; `admin` grants every scope. */
  scopes: ReadonlySet<string>;
  /** An API key bound to a tenant: not a management credential (refused by `apiAuth`). */
  tenant?: string;
}

export const PUBLIC = 'public';
export const ADMIN = 'admin';

interface RouteScope {
  methods: readonly string[] | '*';
  path: RegExp;
  scope: string;
}
const r = (methods: RouteScope['methods'], path: RegExp, scope: string): RouteScope => ({ methods, path, scope });
const GET = ['GET', 'HEAD'];
const WRITE = ['POST', 'PUT', 'PATCH', 'DELETE'];

/** First match wins. */
export const ROUTE_SCOPES: readonly RouteScope[] = [
  // Public on both listeners.
  r(GET, /^\/(healthz|readyz|livez)$/, PUBLIC),
  r(GET, /^\/\.well-known\/[^/]+$/, PUBLIC),
  // RFC 9728 metadata of a service behind Envoy that opts in (control-plane/resource-metadata.ts).
  r(GET, /^\/\.well-known\/oauth-protected-resource\/services\/[^/]+$/, PUBLIC),
  r(GET, /^\/v1\/issuer$/, PUBLIC),
  r(GET, /^\/status(\/[^/]+)?$/, PUBLIC),
  r(GET, /^\/(openapi\.json|docs|metrics)$/, PUBLIC),
  // Proves possession of the very key it checks, and says nothing to anyone else.
  r(['POST'], /^\/v1\/keys\/verify$/, PUBLIC),
  // The portal's page and assets (its data calls carry the operator's own credential), and its
  // config (title, metric name, ring size: what the shell needs before it has a credential).
  r(GET, /^\/portal(\/(?!api\/).*)?$/, PUBLIC),
  r(GET, /^\/portal\/api\/config$/, PUBLIC),
  // The OAuth token endpoint authenticates the agent by its VP or client assertion (RFC 8693,
  // 7523), and an enforcement point's onward exchange by its identity:verify credential itself
  // (identity/oauth/onward.ts); revoking a token needs only the token (it takes access away, RFC 7009).
  r(['POST'], /^\/oauth\/(token|revoke)$/, PUBLIC),
  // The authorization endpoint refuses everyone alike (identity/oauth/routes.ts authorizeRefusal).
  r([...GET, 'POST'], /^\/oauth\/authorize$/, PUBLIC),
  r(['POST'], /^\/oauth\/introspect$/, 'identity:verify'),
  // Identity authority: what the data plane asks on every request or poll.
  r(['POST'], /^\/v1\/agents\/verify-presentation$/, 'identity:verify'),
  r(GET, /^\/v1\/(delegations\/check|revocations|governance\/standing|authority\/delegations\/[^/]+\/usable)$/, 'identity:verify'),
  // Identity authority: people and credentials.
  r(['POST'], /^\/v1\/delegations\/[^/]+\/(approve|deny)$/, 'approvals:decide'),
  // Granting authority is an approval: its approver must be the caller (OIDC) or asserted by a
  // system trusted to record approvals.
  r(['POST'], /^\/v1\/authority\/delegations$/, 'approvals:decide'),
  r(['POST'], /^\/v1\/(revoke|revocation\/cascade|authority\/delegations\/[^/]+\/revoke)$/, 'identity:admin'),
  r(GET, /^\/v1\/(agents|delegations|revocation|identity|authority|tokens)(\/|$)/, 'identity:read'),
  r(['POST'], /^\/v1\/(agents|delegations|identity|authority)(\/|$)/, 'identity:write'),
  r(['POST'], /^\/v1\/directory\/sync$/, 'directory:sync'),
  r(GET, /^\/v1\/directory(\/|$)/, 'directory:read'),
  r(GET, /^\/v1\/governance(\/|$)/, 'governance:read'),
  r(['POST', 'PATCH'], /^\/v1\/governance(\/|$)/, 'governance:write'),
  r('*', /^\/v1\/keys(\/|$)/, 'keys:admin'),
  // Control plane.
  r(GET, /^\/v1\/registry(\/|$)/, 'registry:read'),
  r(WRITE, /^\/v1\/registry(\/|$)/, 'registry:write'),
  r(GET, /^\/v1\/audit(\/|$)/, 'audit:read'),
  // A check of a kept checkpoint against the log: it writes nothing.
  r(['POST'], /^\/v1\/audit\/consistency$/, 'audit:read'),
  r(['POST'], /^\/v1\/usage$/, 'usage:write'),
  r(GET, /^\/v1\/budgets(\/|$)/, 'budgets:read'),
  r(WRITE, /^\/v1\/budgets\/[^/]+\/reservations(\/|$)/, 'budgets:reserve'),
  r(['POST'], /^\/v1\/decisions\/dry-run$/, 'decisions:dry-run'),
  r(GET, /^\/v1\/egress(\/|$)/, 'approvals:read'),
  r(['POST'], /^\/v1\/egress\/requests\/[^/]+\/(approve|deny)$/, 'approvals:decide'),
  // The portal's forwarder: the identity authority checks the forwarded credential's scope.
  r('*', /^\/portal\/api\//, 'authenticated'),
];

/** The scope a request needs (`public`, `authenticated`, a scope name, or `admin` when no rule names the route). */
export function requiredScope(method: string, path: string): string {
  const m = method.toUpperCase();
  for (const rule of ROUTE_SCOPES) if ((rule.methods === '*' || rule.methods.includes(m)) && rule.path.test(path)) return rule.scope;
  return ADMIN;
}

export function grants(p: Principal, scope: string): boolean {
  return scope === 'authenticated' || p.scopes.has(ADMIN) || p.scopes.has(scope);
}

/**
 * Whether the caller holds every one of `scopes` (auth off: no caller, nothing to hold): what a
 * credential it mints or rotates may carry, so no key can make a key stronger than itself.
 */
export function holdsAll(p: Principal | undefined, scopes: readonly string[]): boolean {
  return p === undefined || p.scopes.has(ADMIN) || scopes.every((s) => p.scopes.has(s));
}

/** Checks a bearer credential that is not the bootstrap key: a principal, or undefined when invalid. */
export type CredentialCheck = (token: string) => Promise<Principal | undefined>;

/** How long a verified OIDC token is trusted without verifying it again (ms). */
export const CREDENTIAL_CACHE_MS = 1000;

/** Remembers `check`'s answers for CREDENTIAL_CACHE_MS (bounded; keyed by a digest, not the secret). */
export function cachedCheck(check: CredentialCheck, now: () => number = Date.now, max = 10_000): CredentialCheck {
  const seen = new Map<string, { at: number; p: Principal | undefined }>();
  return async (token) => {
    const k = sha256(token, 'base64url');
    const hit = seen.get(k);
    const t = now();
    if (hit && t - hit.at < CREDENTIAL_CACHE_MS) return hit.p;
    const p = await check(token);
    // Oldest first out (a spray of bad tokens ages out the cache, never empties it at once).
    seen.delete(k);
    if (seen.size >= max) seen.delete(seen.keys().next().value!);
    seen.set(k, { at: t, p });
    return p;
  };
}

/**
 * The credential check of a listener: a JWT goes to the workforce OIDC verifier when there is one
 * (its scopes from `scope`/`scp`; answers cached), anything else to the API-key verifier, asked
 * every time (a revoke or rotate is effective at once).
 */
export function credentialCheck(
  o: { oidc?: OidcVerifier; verifyKey?: (token: string) => Promise<{ id: string; scopes: readonly string[]; tenantId?: string | null } | undefined> },
  now: () => number = Date.now,
): CredentialCheck {
  const oidc = o.oidc;
  const checkOidc = oidc
    ? cachedCheck(async (token) => {
        const a = await oidc.verify(token);
        return a.ok ? { kind: 'oidc', id: `oidc:${a.subject}`, scopes: oidcScopes(a.claims) } : undefined;
      }, now)
    : undefined;
  return async (token) => {
    if (checkOidc && token.split('.').length === 3 && !token.startsWith(`${BRAND}_`)) return checkOidc(token);
    const k = o.verifyKey ? await o.verifyKey(token).catch(() => undefined) : undefined;
    if (!k) return undefined;
    return { kind: 'key', id: `key:${k.id}`, scopes: new Set(k.scopes), ...(k.tenantId ? { tenant: k.tenantId } : {}) };
  };
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** `Bearer <token>` of an Authorization header, or undefined. */
export function bearer(header: string | undefined): string | undefined {
  const m = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header ?? '');
  return m?.[1];
}

/** Scopes from an OIDC access token's claims: `scope` (space-separated) or `scp` (list or string). */
export function oidcScopes(claims: Record<string, unknown>): Set<string> {
  const out = new Set<string>();
  const add = (v: unknown) => {
    const list = typeof v === 'string' ? v.split(/\s+/) : Array.isArray(v) ? (v as unknown[]) : [];
    for (const s of list) if (typeof s === 'string' && s) out.add(s);
  };
  add(claims.scope);
  add(claims.scp);
  return out;
}

/** WRIT_API_AUTH and WRIT_BOOTSTRAP_ADMIN_KEY, from the auth slice. */
export function authOf(auth: Pick<AuthConfig, 'mode' | 'bootstrapKey'>): { mode: AuthMode; bootstrapKey?: string } {
  return { mode: auth.mode, ...(auth.bootstrapKey ? { bootstrapKey: auth.bootstrapKey } : {}) };
}

/** The bootstrap key (constant time: digests of equal length), else `check`. */
async function authenticate(boot: Buffer | undefined, check: CredentialCheck, token: string): Promise<Principal | undefined> {
  if (boot && timingSafeEqual(digest(token), boot)) return { kind: 'bootstrap', id: 'bootstrap', scopes: new Set([ADMIN]) };
  return check(token);
}

/** For paths answered outside the middleware (the identity authority's fast verify-presentation). */
export async function authorizedFor(
  o: { mode: AuthMode; bootstrapKey?: string },
  check: CredentialCheck,
  authorization: string | undefined,
  scope: string,
): Promise<boolean> {
  if (o.mode === 'off') return true;
  const token = bearer(authorization);
  const p = token ? await authenticate(o.bootstrapKey ? digest(o.bootstrapKey) : undefined, check, token) : undefined;
  return p !== undefined && p.tenant === undefined && grants(p, scope);
}

export interface ApiAuthOptions {
  mode: AuthMode;
  /** WRIT_BOOTSTRAP_ADMIN_KEY: accepted with every scope. */
  bootstrapKey?: string;
  /** API keys and OIDC tokens (see credentialCheck). */
  check: CredentialCheck;
  /** The listener's error shape. */
  deny: (c: Context, status: 401 | 403, message: string) => Response;
}

/**
 * The middleware both listeners mount first. With auth off it does nothing (the development
 * posture); with `keys` it authenticates, checks the route's scope and leaves the principal in
 * `c.get('principal')`.
 */
export function apiAuth(o: ApiAuthOptions): MiddlewareHandler {
  const boot = o.bootstrapKey ? digest(o.bootstrapKey) : undefined;
  return async (c, next) => {
    if (o.mode === 'off') return next();
    const scope = requiredScope(c.req.method, c.req.path);
    if (scope === PUBLIC) return next();
    const token = bearer(c.req.header('authorization'));
    if (!token) {
      c.header('WWW-Authenticate', 'Bearer');
      return o.deny(c, 401, 'authentication required: Authorization: Bearer <API key>');
    }
    const p = await authenticate(boot, o.check, token);
    if (!p) {
      c.header('WWW-Authenticate', 'Bearer error="invalid_token"');
      return o.deny(c, 401, 'invalid, revoked or expired credential');
    }
    if (p.tenant !== undefined) {
      return o.deny(
        c,
        403,
        `the key is bound to tenant ${JSON.stringify(p.tenant)}: a tenant's key is not a management credential (the management API spans tenants)`,
      );
    }
    if (!grants(p, scope)) return o.deny(c, 403, `credential lacks the scope ${scope} for ${c.req.method} ${c.req.path}`);
    c.set('principal' as never, p as never);
    return next();
  };
}

/** The authenticated caller of this request, when auth is on. */
export function principalOf(c: Context): Principal | undefined {
  return c.get('principal' as never) as Principal | undefined;
}

/**
 * Who did it, as a record names them: with auth on, the authenticated caller, never what the
 * request says (`given`, a body or query field, is only the auth-off posture's account).
 */
/**
 * The scope that lets a credential apply as producer `owner` in an area (`registry`, `identity`,
 * `governance`): an owner is a claim, applying as it prunes what it holds.
 */
export const producerScope = (area: string, owner: string): string => `${area}:owner:${owner}`;

/**
 * Whether the caller may apply as `owner` in `area` (auth off: no caller, no check). With auth
 * on, `history by` of such a write names both: `<caller>:<owner>`.
 */
export function mayApplyAs(c: Context, area: string, owner: string): boolean {
  const p = principalOf(c);
  return !p || grants(p, producerScope(area, owner));
}

/** Who a producer's apply is recorded as: the authenticated caller and the owner it applied as (auth off: the owner). */
export function applierOf(c: Context, owner: string): string {
  const p = principalOf(c);
  return p ? `${p.id}:${owner}` : owner;
}

export function actorOf<T extends string | undefined>(c: Context, given: T): string | T {
  return principalOf(c)?.id ?? given;
}
