/**
 * Pure token-claims resolution (SPEC 2.12 and the 4.4 identity tables): issuer map, `tid`
 * matching, subject derivation, conflicts, the effective view and the session claims. No I/O: the
 * route loads the employee and writes the session.
 */
import { isTenantId } from '../tenant.js';
import type { EmployeeRecord } from '../directory/repo.js';

export type Idp = 'idp_a' | 'idp_b';
export const IDPS = ['idp_a', 'idp_b'] as const;

export interface IssuerTarget {
  idp: Idp;
  tenant: string;
}
export type IssuerMap = ReadonlyMap<string, IssuerTarget>;

/** Issuers compare without trailing slashes (Entra v1 issuers end in '/', v2 do not). */
export const normIssuer = (iss: string): string => iss.trim().replace(/\/+$/, '');

/**
 * IDP_ISSUER_MAP: a JSON object from issuer URL to `"<idp>:<tenant>"` or `{"idp", "tenant"}`, e.g.
 * `{"https://login.microsoftonline.com/<tid>/v2.0":"idp_a:contoso","https://initech.okta.com":"idp_b:initech"}`.
 * Unset = empty map (every issuer is unknown until configured: fail closed). Bad input throws at startup.
 */
export function parseIssuerMap(raw: string | undefined): IssuerMap {
  const map = new Map<string, IssuerTarget>();
  if (raw === undefined || raw.trim() === '') return map;
  let obj: unknown;
  try {
    obj = JSON.parse(raw);
  } catch {
    throw new Error('IDP_ISSUER_MAP must be a JSON object {"<issuer>": "<idp>:<tenant>"}');
  }
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) throw new Error('IDP_ISSUER_MAP must be a JSON object');
  for (const [iss, v] of Object.entries(obj as Record<string, unknown>)) {
    let idp: unknown;
    let tenant: unknown;
    if (typeof v === 'string') [idp, tenant] = [v.slice(0, v.indexOf(':')), v.slice(v.indexOf(':') + 1)];
    else if (v && typeof v === 'object') ({ idp, tenant } = v as Record<string, unknown>);
    if (!IDPS.includes(idp as Idp) || typeof tenant !== 'string' || !isTenantId(tenant) || !normIssuer(iss)) {
      throw new Error(`IDP_ISSUER_MAP entry ${JSON.stringify(iss)} must map to "<idp_a|idp_b>:<tenant>"`);
    }
    map.set(normIssuer(iss), { idp: idp as Idp, tenant });
  }
  return map;
}

const GUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;
const guidsIn = (s: string): string[] => (s.match(GUID) ?? []).map((g) => g.toLowerCase());
const str = (v: unknown): string | undefined => (typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined);

export type Route =
  | { ok: true; idp: Idp; tenant: string; via: 'issuer_map' | 'tid' | 'hints' }
  | { ok: false; reason: 'issuer_unknown' | 'issuer_hint_mismatch' | 'tid_mismatch' | 'tid_ambiguous'; detail: string };

/**
 * Which (idp, tenant) issued these claims. Order: exact issuer; else, for idp_a, the `tid` GUID
 * embedded in exactly one mapped idp_a issuer (and in `iss` when present); else both hints.
 * A hint that contradicts the map, or a `tid` that contradicts the mapped issuer, denies.
 */
export function routeClaims(map: IssuerMap, claims: Record<string, unknown>, hints: { idp?: Idp; tenant?: string }): Route {
  const iss = str(claims.iss);
  const tid = str(claims.tid)?.toLowerCase();
  let found: { idp: Idp; tenant: string; via: 'issuer_map' | 'tid' } | undefined;
  const exact = iss !== undefined ? map.get(normIssuer(iss)) : undefined;
  if (exact) {
    if (exact.idp === 'idp_a' && tid !== undefined) {
      const embedded = guidsIn(normIssuer(iss!));
      if (embedded.length && !embedded.includes(tid))
        return { ok: false, reason: 'tid_mismatch', detail: `token tid ${tid} is not the tenant of issuer ${iss}` };
    }
    found = { ...exact, via: 'issuer_map' };
  } else if (tid !== undefined && (hints.idp === undefined || hints.idp === 'idp_a')) {
    if (iss !== undefined && !guidsIn(iss).includes(tid)) {
      // An unmapped issuer that does not carry the token's tid proves nothing about the tenant.
    } else {
      const targets = new Map<string, IssuerTarget>();
      for (const [k, t] of map) if (t.idp === 'idp_a' && guidsIn(k).includes(tid)) targets.set(t.tenant, t);
      if (targets.size > 1) return { ok: false, reason: 'tid_ambiguous', detail: `tid ${tid} appears in issuers of ${targets.size} tenants` };
      const only = [...targets.values()][0];
      if (only) found = { ...only, via: 'tid' };
    }
  }
  if (found) {
    if ((hints.idp !== undefined && hints.idp !== found.idp) || (hints.tenant !== undefined && hints.tenant !== found.tenant)) {
      return {
        ok: false,
        reason: 'issuer_hint_mismatch',
        detail: `issuer maps to ${found.idp}:${found.tenant}, hints say ${hints.idp ?? '*'}:${hints.tenant ?? '*'}`,
      };
    }
    return { ok: true, ...found };
  }
  if (hints.idp !== undefined && hints.tenant !== undefined) return { ok: true, idp: hints.idp, tenant: hints.tenant, via: 'hints' };
  return {
    ok: false,
    reason: 'issuer_unknown',
    detail: iss === undefined ? 'token has no iss and no idp+tenant hints' : `issuer ${iss} is not in the issuer map`,
  };
}

/** Long-form Entra object id claim (SAML-derived and v1 tokens). */
export const OID_URI = 'http://schemas.microsoft.com/identity/claims/objectidentifier';

/** SPEC subject derivation: idp_a `oid` (falling back to the long-form oid, then `sub`); idp_b `sub`. Never email. */
export function providerSubject(idp: Idp, claims: Record<string, unknown>): { claim: string; value: string } | undefined {
  const order = idp === 'idp_a' ? ['oid', OID_URI, 'sub'] : ['sub'];
  for (const claim of order) {
    const v = str(claims[claim]);
    if (v !== undefined && v.length <= 256) return { claim, value: v };
  }
  return undefined;
}

const MAX_ITEMS = 256;
const MAX_LEN = 256;
/** A string-list claim (a single string counts as one), capped: session claims are evidence, not truth. */
export function strList(v: unknown): string[] {
  const arr = Array.isArray(v) ? v : typeof v === 'string' ? [v] : [];
  const out = new Set<string>();
  for (const x of arr) if (typeof x === 'string' && x.trim() && x.length <= MAX_LEN && out.size < MAX_ITEMS) out.add(x.trim());
  return [...out].sort();
}

export type ConflictType = 'email_conflict' | 'group_conflict' | 'stale_token_inactive' | 'unresolved';
export interface ResolveConflict {
  type: ConflictType;
  detail: string;
}

/** SPEC 4.4 precedence (source of truth), returned with every answer. */
export const PRECEDENCE = {
  subject: 'issuer + tenant + provider subject',
  status: 'directory only',
  manager: 'directory',
  department: 'directory',
  groups: 'directory for durable membership; token groups are kept as session claims',
  email: 'directory; the token updates the session only',
  display_name: 'directory; the token updates the session only',
  roles: 'directory or explicit; raw token roles are not auto-privileged',
} as const;

export interface Session {
  last_seen_at: string;
  idp_issuer: string | null;
  token_email: string | null;
  token_groups: string[];
  token_roles: string[];
  preferred_username: string | null;
  conflicts: ResolveConflict[];
}

/**
 * Conflicts and session of a token over its directory employee. `groupNames` maps the external
 * ids of the employee's directory groups to display names: a token group matches a durable
 * membership by external id (Entra object ids) or by display name (Okta sends names).
 */
export function assess(e: EmployeeRecord, claims: Record<string, unknown>, groupNames: ReadonlyMap<string, string | null>, at: string) {
  const conflicts: ResolveConflict[] = [];
  const tokenEmail = str(claims.email) ?? null;
  if (tokenEmail !== null && tokenEmail.toLowerCase() !== (e.email ?? '').toLowerCase()) {
    conflicts.push({
      type: 'email_conflict',
      detail: `token email ${tokenEmail} differs from directory email ${e.email ?? '(none)'}; the directory value is kept`,
    });
  }
  const tokenGroups = strList(claims.groups);
  const known = new Set<string>();
  for (const ext of e.groups) {
    known.add(ext.toLowerCase());
    const n = groupNames.get(ext);
    if (n) known.add(n.toLowerCase());
  }
  const extra = tokenGroups.filter((g) => !known.has(g.toLowerCase()));
  if (extra.length) {
    conflicts.push({ type: 'group_conflict', detail: `token groups not in the directory (kept as session claims only): ${extra.join(', ')}` });
  }
  if (e.status !== 'active') {
    conflicts.push({ type: 'stale_token_inactive', detail: `employee ${e.employee_subject} is inactive in the directory; access denied` });
  }
  const session: Session = {
    last_seen_at: at,
    idp_issuer: str(claims.iss) ?? null,
    token_email: tokenEmail,
    token_groups: tokenGroups,
    token_roles: strList(claims.roles),
    preferred_username: str(claims.preferred_username) ?? str(claims.upn) ?? null,
    conflicts,
  };
  return { conflicts, session };
}

/** The effective identity: every field from the directory (status included), none from the token. */
export function effectiveOf(e: EmployeeRecord) {
  return {
    employee_subject: e.employee_subject,
    email: e.email,
    display_name: e.display_name,
    department: e.department,
    manager_subject: e.manager_subject,
    groups: e.groups,
    roles: e.roles,
    status: e.status,
    active: e.status === 'active',
  };
}
