/**
 * Pure parsing of raw SCIM 2.0 resources (RFC 7643) into the directory's normalised records.
 * Hand-written checks instead of zod: a snapshot may hold 100k users and every record must be
 * judged on its own (a bad record is an error entry, never a failed sync).
 */
export const SCHEMA_USER = 'urn:ietf:params:scim:schemas:core:2.0:User';
export const SCHEMA_GROUP = 'urn:ietf:params:scim:schemas:core:2.0:Group';
export const SCHEMA_ENTERPRISE_USER = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';

/** Longest accepted id or string attribute; provider ids are GUIDs or short opaque strings. */
const MAX_ID = 256;
const MAX_TEXT = 1024;

export interface ScimUser {
  externalId: string;
  /** SCIM `id` when given (the provider's resource id, may differ from externalId). */
  id: string | null;
  email: string | null;
  displayName: string | null;
  givenName: string | null;
  familyName: string | null;
  title: string | null;
  department: string | null;
  /** Raw `manager.value`: a manager externalId or SCIM id, resolved by the planner. */
  managerRef: string | null;
  active: boolean;
  roles: string[];
  appAssignments: string[];
  /** Raw `groups[].value` of the User resource (group SCIM ids or external ids); null when absent. */
  groupRefs: string[] | null;
}

export interface ScimGroup {
  externalId: string;
  id: string | null;
  displayName: string | null;
  /** `members[].value` of User members (user externalIds or SCIM ids); nested groups are skipped. */
  memberRefs: string[];
}

export type Parsed<T> = { ok: true; value: T } | { ok: false; error: string; externalId: string | null; id: string | null };

class Bad extends Error {}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function text(v: unknown, field: string, max = MAX_TEXT): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw new Bad(`${field} must be a string`);
  const s = v.trim();
  if (s.length > max) throw new Bad(`${field} is longer than ${max} characters`);
  return s === '' ? null : s;
}

/** A provider id: a non-empty string (numbers are accepted and stringified, as some IdPs send them). */
function ident(v: unknown, field: string): string | null {
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  const s = text(v, field, MAX_ID);
  if (s !== null && hasControl(s)) throw new Bad(`${field} contains control characters`);
  return s;
}

function hasControl(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

function bool(v: unknown, field: string, fallback: boolean): boolean {
  if (v === undefined || v === null) return fallback;
  if (typeof v === 'boolean') return v;
  // Entra sends "True"/"False" strings in some payloads.
  if (typeof v === 'string' && /^(true|false)$/i.test(v)) return v.toLowerCase() === 'true';
  throw new Bad(`${field} must be a boolean`);
}

/**
 * Hot-path variants for list items: the field name (`members[12].value`) is only built when the
 * value fails, so a 100k-member group does not allocate 200k throw-away label strings.
 */
function identAt(v: unknown, prefix: string, i: number, suffix: string): string | null {
  if (typeof v === 'string') {
    const s = v.trim();
    if (s.length <= MAX_ID && !hasControl(s)) return s === '' ? null : s;
  } else if (v === undefined || v === null) return null;
  return ident(v, `${prefix}[${i}]${suffix}`);
}
function textAt(v: unknown, prefix: string, i: number, suffix: string): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v === 'string') {
    const s = v.trim();
    if (s.length <= MAX_TEXT) return s === '' ? null : s;
  }
  return text(v, `${prefix}[${i}]${suffix}`);
}

/** Sorted (UTF-16 code units, as the default sort) and deduplicated, in place. */
export function sortedUnique(list: string[]): string[] {
  if (list.length < 2) return list;
  // Already strictly ascending (members listed in order): sorted and unique as it is.
  let i = 1;
  while (i < list.length && list[i - 1]! < list[i]!) i++;
  if (i === list.length) return list;
  if (list.length <= 16) {
    // Insertion sort: same order as the default sort (UTF-16 code units), without its set-up cost.
    for (let i = 1; i < list.length; i++) {
      const x = list[i]!;
      let j = i - 1;
      while (j >= 0 && list[j]! > x) {
        list[j + 1] = list[j]!;
        j--;
      }
      list[j + 1] = x;
    }
  } else list.sort();
  let w = 1;
  for (let i = 1; i < list.length; i++) if (list[i] !== list[w - 1]) list[w++] = list[i]!;
  list.length = w;
  return list;
}

/** Multi-valued attribute of `{value}` objects (or bare strings): sorted, deduplicated values. */
function values(v: unknown, field: string): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new Bad(`${field} must be an array`);
  const out: string[] = [];
  for (let i = 0; i < v.length; i++) {
    const item: unknown = v[i];
    const raw = isObj(item) ? item.value : item;
    const s = identAt(raw, field, i, '.value');
    if (s === null) throw new Bad(`${field}[${i}].value is required`);
    out.push(s);
  }
  return sortedUnique(out);
}

function schemasOk(raw: Record<string, unknown>, core: string, kind: string): void {
  const s = raw.schemas;
  if (s === undefined) return;
  if (!Array.isArray(s) || !s.every((x) => typeof x === 'string')) throw new Bad('schemas must be an array of strings');
  if (!s.includes(core)) throw new Bad(`schemas does not include ${core}: not a SCIM ${kind}`);
}

/** Primary email first, then the first listed, then a userName that looks like an address. */
function primaryEmail(raw: Record<string, unknown>): string | null {
  const emails = raw.emails;
  if (emails !== undefined && emails !== null) {
    if (!Array.isArray(emails)) throw new Bad('emails must be an array');
    // Every entry is validated (in order) before one is picked.
    let primary: string | null = null;
    let first: string | null = null;
    for (let i = 0; i < emails.length; i++) {
      const e: unknown = emails[i];
      if (!isObj(e)) throw new Bad(`emails[${i}] must be an object`);
      const value = textAt(e.value, 'emails', i, '.value');
      const isPrimary = bool(e.primary, `emails[${i}].primary`, false);
      if (value && isPrimary && primary === null) primary = value;
      if (value && first === null) first = value;
    }
    const pick = primary ?? first;
    if (pick) return pick;
  }
  const userName = text(raw.userName, 'userName');
  return userName && userName.includes('@') ? userName : null;
}

function ids(raw: unknown): { externalId: string | null; id: string | null } {
  if (!isObj(raw)) return { externalId: null, id: null };
  const safe = (v: unknown) => {
    try {
      return ident(v, 'id');
    } catch {
      return null;
    }
  };
  return { externalId: safe(raw.externalId), id: safe(raw.id) };
}

export function parseUser(raw: unknown): Parsed<ScimUser> {
  try {
    if (!isObj(raw)) throw new Bad('a User resource must be a JSON object');
    schemasOk(raw, SCHEMA_USER, 'User');
    const externalId = ident(raw.externalId, 'externalId');
    // The stable subject comes from the provider's durable id only, never from email or userName.
    if (externalId === null) throw new Bad('externalId is required (the stable subject is derived from it)');
    const name = raw.name;
    if (name !== undefined && name !== null && !isObj(name)) throw new Bad('name must be an object');
    const ext = raw[SCHEMA_ENTERPRISE_USER];
    if (ext !== undefined && ext !== null && !isObj(ext)) throw new Bad(`${SCHEMA_ENTERPRISE_USER} must be an object`);
    let managerRef: string | null = null;
    if (isObj(ext) && ext.manager !== undefined && ext.manager !== null) {
      const m = ext.manager;
      managerRef = isObj(m) ? ident(m.value, 'manager.value') : ident(m, 'manager');
    }
    return {
      ok: true,
      value: {
        externalId,
        id: ident(raw.id, 'id'),
        email: primaryEmail(raw),
        displayName: text(raw.displayName, 'displayName'),
        givenName: isObj(name) ? text(name.givenName, 'name.givenName') : null,
        familyName: isObj(name) ? text(name.familyName, 'name.familyName') : null,
        title: text(raw.title, 'title'),
        department: isObj(ext) ? text(ext.department, 'department') : null,
        managerRef,
        // Present in a snapshot without `active` means active (the snapshot lists live users).
        active: bool(raw.active, 'active', true),
        roles: values(raw.roles, 'roles'),
        appAssignments: values(raw.entitlements, 'entitlements'),
        groupRefs: raw.groups === undefined || raw.groups === null ? null : values(raw.groups, 'groups'),
      },
    };
  } catch (e) {
    if (e instanceof Bad) return { ok: false, error: e.message, ...ids(raw) };
    throw e;
  }
}

export function parseGroup(raw: unknown): Parsed<ScimGroup> {
  return parseGroupRefs(raw, true);
}

/**
 * parseGroup for the planner: with `dedupe` false, `memberRefs` keeps repeated values (in order)
 * instead of building a Set of every member. The planner sorts and deduplicates memberships
 * anyway, so its result is the same; a 100k-member group then costs no Set insertions.
 */
export function parseGroupRefs(raw: unknown, dedupe: boolean): Parsed<ScimGroup> {
  try {
    if (!isObj(raw)) throw new Bad('a Group resource must be a JSON object');
    schemasOk(raw, SCHEMA_GROUP, 'Group');
    const externalId = ident(raw.externalId, 'externalId');
    if (externalId === null) throw new Bad('externalId is required (the group key is derived from it)');
    const members = raw.members;
    if (members !== undefined && members !== null && !Array.isArray(members)) throw new Bad('members must be an array');
    const refs: string[] = [];
    const seen = dedupe ? new Set<string>() : null;
    if (Array.isArray(members)) {
      for (let i = 0; i < members.length; i++) {
        const m: unknown = members[i];
        if (!isObj(m)) throw new Bad(`members[${i}] must be an object`);
        const type = textAt(m.type, 'members', i, '.type');
        // Nested groups are not expanded: durable membership is direct membership.
        if (type !== null && type.toLowerCase() === 'group') continue;
        const v = identAt(m.value, 'members', i, '.value');
        if (v === null) throw new Bad(`members[${i}].value is required`);
        if (seen) {
          if (seen.has(v)) continue;
          seen.add(v);
        }
        refs.push(v);
      }
    }
    return {
      ok: true,
      value: { externalId, id: ident(raw.id, 'id'), displayName: text(raw.displayName, 'displayName'), memberRefs: refs },
    };
  } catch (e) {
    if (e instanceof Bad) return { ok: false, error: e.message, ...ids(raw) };
    throw e;
  }
}
