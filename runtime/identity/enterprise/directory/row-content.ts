/**
 * A stored employee row against the snapshot: the digest of its snapshot-owned columns (equal
 * digests: the row is not rewritten), its stored groups, and a group's member subjects compared
 * without building them.
 */
import { sha256 } from '../../../lib/sha256.js';
import type { EmployeeWrite } from './plan.js';

/** `subjects` equals `exts.map((x) => prefix + x)`, without building those strings. */
export const sameSubjects = (subjects: readonly string[], prefix: string, exts: readonly string[]) => {
  if (subjects.length !== exts.length) return false;
  for (let i = 0; i < exts.length; i++) {
    const s = subjects[i]!;
    const x = exts[i]!;
    if (typeof s !== 'string' || s.length !== prefix.length + x.length || !s.startsWith(prefix) || !s.endsWith(x)) return false;
  }
  return true;
};

type Content = Omit<EmployeeWrite, 'createdAt' | 'updatedAt' | 'lastSyncedAt' | 'deactivatedAt' | 'syncHash'>;

/** Length-prefixed encoding: unambiguous whatever the values contain, and cheap to build. */
function enc(v: string | null): string {
  return v === null ? '~' : `${v.length}:${v}`;
}
function encList(l: readonly string[]): string {
  let out = `[${l.length}`;
  for (const x of l) out += enc(x);
  return out;
}

/** Digest of every snapshot-owned column; equal digests mean the row is not rewritten. */
export function contentHash(c: Content): string {
  return hashFields(
    c.idp,
    c.externalId,
    c.externalIdpId,
    c.email,
    c.displayName,
    c.givenName,
    c.familyName,
    c.title,
    c.department,
    c.managerSubject,
    c.groups,
    c.roles,
    c.appAssignments,
    c.status,
    c.source,
  );
}

/** contentHash from the columns themselves, so an unchanged row never builds its write object. */
export function hashFields(
  idp: string,
  externalId: string,
  externalIdpId: string | null,
  email: string | null,
  displayName: string | null,
  givenName: string | null,
  familyName: string | null,
  title: string | null,
  department: string | null,
  managerSubject: string | null,
  groups: readonly string[],
  roles: readonly string[],
  appAssignments: readonly string[],
  status: string,
  source: string,
): string {
  return sha256(
    enc(idp) +
      enc(externalId) +
      enc(externalIdpId) +
      enc(email) +
      enc(displayName) +
      enc(givenName) +
      enc(familyName) +
      enc(title) +
      enc(department) +
      enc(managerSubject) +
      encList(groups) +
      encList(roles) +
      encList(appAssignments) +
      enc(status) +
      enc(source),
    'base64url',
  );
}

export const parseGroupsJson = (s: string): string[] => {
  try {
    const v = JSON.parse(s) as unknown;
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
  } catch {
    return [];
  }
};
