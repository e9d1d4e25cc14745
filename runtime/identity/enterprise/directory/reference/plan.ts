/*
 * FROZEN REFERENCE, tests only: the planner as it was before the issue-4 performance work (commit
 * fb67006), kept unchanged so plan.equivalence.test.ts can check on random inputs that the
 * optimised code produces exactly the same result. Never import it from runtime code.
 */
/**
 * The pure core of a snapshot sync: current state of one tenant + a raw SCIM snapshot -> the rows
 * to write, the counts, the per-record errors and the manager conflicts. No I/O, no clock (the
 * caller passes `now`), so the whole lifecycle of SPEC 3.5 is testable with tables.
 *
 * Rules (SPEC 2.7, 3.5):
 * - subject `<idp>:<tenant>:<externalId>`; a user without externalId is an error record.
 * - a record that fails to parse is skipped and reported; when its externalId is still readable
 *   the existing employee (or group) is left exactly as it was, never deactivated for it.
 * - a duplicate externalId in one snapshot: the first record wins, later ones are errors.
 * - absent from the snapshot (same tenant and idp) or `active:false` -> inactive; reappearing
 *   active -> reactivated. An absent user also loses its group memberships (deleted at the IdP);
 *   an `active:false` user keeps what the IdP still reports. `session` and `created_at` are never
 *   written by a sync.
 * - employee `groups` = group external ids from Group resources' members plus the User's own
 *   `groups[]`, sorted and deduplicated; group `members` = employee subjects, sorted.
 * - groups of the tenant absent from the snapshot keep their record with `members: []`.
 * - only rows whose content changed are written, so an identical snapshot writes nothing. Change
 *   is detected by a digest of the snapshot-owned columns (`sync_hash`), so the current state
 *   needed is small (no names, roles or entitlements are loaded).
 */
import * as crypto from 'node:crypto';
import type { EmployeeRow, GroupRow, SyncError, Conflict } from '../repo.js';
import { parseGroup, parseUser, type ScimGroup, type ScimUser } from './scim.js';
import { groupKey } from '../../tenant.js';

export type Idp = 'idp_a' | 'idp_b';

export interface SyncCounts {
  users_created: number;
  users_updated: number;
  users_deactivated: number;
  users_reactivated: number;
  users_unchanged: number;
  groups_created: number;
  groups_updated: number;
  groups_unchanged: number;
  errors: number;
}

/** What the planner needs of an existing employee (sync.ts loads exactly these columns). */
export interface CurrentEmployee {
  employeeSubject: string;
  tenantId: string;
  idp: string;
  externalId: string;
  status: 'active' | 'inactive';
  managerSubject: string | null;
  /** The stored `groups` as JSON text, parsed only when memberships must be carried over. */
  groupsJson: string;
  createdAt: string;
  deactivatedAt: string | null;
  syncHash: string | null;
}

/** An employee row as written by the sync: every column except `session` (sync never sets it). */
export type EmployeeWrite = Omit<EmployeeRow, 'session'> & { syncHash: string };

export interface SyncPlan {
  /** Created, updated, reactivated or deactivated-by-snapshot employees: full rows to upsert. */
  employeeWrites: EmployeeWrite[];
  /** Subjects absent from the snapshot: set inactive with no groups (a targeted update). */
  deactivations: string[];
  groupWrites: GroupRow[];
  counts: SyncCounts;
  errors: SyncError[];
  conflicts: Conflict[];
  status: 'ok' | 'partial';
}

export interface PlanInput {
  tenantId: string;
  idp: Idp;
  users: readonly unknown[];
  /**
   * Group resources. When undefined, group records are not reconciled and each employee keeps
   * its previous memberships unless its own User resource carries a `groups` attribute.
   */
  groups: readonly unknown[] | undefined;
  /** The tenant's employees before the sync (any idp; only `idp` rows are reconciled). */
  currentEmployees: readonly CurrentEmployee[];
  currentGroups: readonly GroupRow[];
  /** RFC 3339 time stamped on written rows. */
  now: string;
}

const sameList = (a: readonly string[], b: readonly string[]) => {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
};
/** Sorted and deduplicated (input order irrelevant). */
function sortedUnique(list: string[]): string[] {
  if (list.length < 2) return list;
  list.sort();
  let w = 1;
  for (let i = 1; i < list.length; i++) if (list[i] !== list[w - 1]) list[w++] = list[i]!;
  list.length = w;
  return list;
}

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

// One-shot crypto.hash (Node >= 20.12) avoids a Hash object per row; createHash otherwise.
const oneShot = (crypto as { hash?: (alg: string, data: string, enc: 'base64url') => string }).hash;
const sha256 = (s: string): string => (oneShot ? oneShot('sha256', s, 'base64url') : crypto.createHash('sha256').update(s).digest('base64url'));

/** Digest of every snapshot-owned column; equal digests mean the row is not rewritten. */
export function contentHash(c: Content): string {
  return sha256(
    enc(c.idp) +
      enc(c.externalId) +
      enc(c.externalIdpId) +
      enc(c.email) +
      enc(c.displayName) +
      enc(c.givenName) +
      enc(c.familyName) +
      enc(c.title) +
      enc(c.department) +
      enc(c.managerSubject) +
      encList(c.groups) +
      encList(c.roles) +
      encList(c.appAssignments) +
      enc(c.status) +
      enc(c.source),
  );
}

export function emptyCounts(): SyncCounts {
  return {
    users_created: 0,
    users_updated: 0,
    users_deactivated: 0,
    users_reactivated: 0,
    users_unchanged: 0,
    groups_created: 0,
    groups_updated: 0,
    groups_unchanged: 0,
    errors: 0,
  };
}

const parseGroupsJson = (s: string): string[] => {
  try {
    const v = JSON.parse(s) as unknown;
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
  } catch {
    return [];
  }
};

export function planSync(input: PlanInput): SyncPlan {
  const { tenantId, idp, now } = input;
  const subjectPrefix = `${idp}:${tenantId}:`;
  const subjectOf = (ext: string) => subjectPrefix + ext;
  const errors: SyncError[] = [];
  const counts = emptyCounts();

  const current = new Map<string, CurrentEmployee>();
  for (const r of input.currentEmployees) if (r.tenantId === tenantId) current.set(r.employeeSubject, r);

  // 1. Parse users. Skipped subjects (bad record, externalId readable) are left untouched.
  const users = new Map<string, ScimUser>(); // by externalId, first wins
  const skipped = new Set<string>(); // subjects
  const userByScimId = new Map<string, string>(); // SCIM id -> externalId
  input.users.forEach((raw, i) => {
    const p = parseUser(raw);
    if (!p.ok) {
      errors.push({ resource_type: 'User', external_id: p.externalId ?? p.id ?? `users[${i}]`, error: p.error });
      if (p.externalId !== null && !users.has(p.externalId)) skipped.add(subjectOf(p.externalId));
      return;
    }
    const u = p.value;
    if (users.has(u.externalId)) {
      errors.push({ resource_type: 'User', external_id: u.externalId, error: 'duplicate externalId in snapshot: first record applied' });
      return;
    }
    users.set(u.externalId, u);
    if (u.id !== null && !userByScimId.has(u.id)) userByScimId.set(u.id, u.externalId);
  });
  for (const s of skipped) if (users.has(s.slice(subjectPrefix.length))) skipped.delete(s);

  // A reference (member value, manager.value) is an externalId or a SCIM id of a snapshot user.
  const resolveUserRef = (ref: string): string | undefined => {
    if (users.has(ref)) return subjectOf(ref);
    const ext = userByScimId.get(ref);
    if (ext !== undefined) return subjectOf(ext);
    const s = subjectOf(ref);
    return skipped.has(s) && current.has(s) ? s : undefined;
  };

  // 2. Parse groups and build the membership relation.
  const groups = new Map<string, ScimGroup>();
  const groupExtByRef = new Map<string, string>(); // SCIM id or externalId -> externalId
  const skippedGroups = new Set<string>(); // external ids whose prior memberships are kept
  const reconcileGroups = input.groups !== undefined;
  (input.groups ?? []).forEach((raw, i) => {
    const p = parseGroup(raw);
    if (!p.ok) {
      errors.push({ resource_type: 'Group', external_id: p.externalId ?? p.id ?? `groups[${i}]`, error: p.error });
      if (p.externalId !== null) skippedGroups.add(p.externalId);
      return;
    }
    const g = p.value;
    if (groups.has(g.externalId)) {
      errors.push({ resource_type: 'Group', external_id: g.externalId, error: 'duplicate externalId in snapshot: first record applied' });
      return;
    }
    groups.set(g.externalId, g);
    groupExtByRef.set(g.externalId, g.externalId);
    if (g.id !== null && !groupExtByRef.has(g.id)) groupExtByRef.set(g.id, g.externalId);
  });
  for (const ext of groups.keys()) skippedGroups.delete(ext);

  // Plain arrays, deduplicated when sorted: far fewer allocations than a Set per employee.
  const groupsOf = new Map<string, string[]>(); // subject -> group external ids
  const membersOf = new Map<string, string[]>(); // group ext -> subjects
  const relate = (subject: string, gExt: string) => {
    const a = groupsOf.get(subject);
    if (a) a.push(gExt);
    else groupsOf.set(subject, [gExt]);
    if (groups.has(gExt)) {
      const b = membersOf.get(gExt);
      if (b) b.push(subject);
      else membersOf.set(gExt, [subject]);
    }
  };
  for (const g of groups.values()) {
    for (const ref of g.memberRefs) {
      const s = resolveUserRef(ref);
      if (s !== undefined) relate(s, g.externalId);
    }
  }
  for (const u of users.values()) {
    // User.groups[].value is the group's SCIM id per RFC 7643; accept an externalId too, and keep
    // an unknown value as-is (the IdP asserts the membership even if it did not send the group).
    if (u.groupRefs) for (const ref of u.groupRefs) relate(subjectOf(u.externalId), groupExtByRef.get(ref) ?? ref);
  }

  // 3. Employees: desired state of every snapshot user, then deactivation of the absent ones.
  const employeeWrites: EmployeeWrite[] = [];
  const deactivations: string[] = [];
  const finalStatus = new Map<string, 'active' | 'inactive'>(); // for conflicts, every tenant subject
  const finalManager = new Map<string, string | null>();
  for (const r of current.values()) {
    finalStatus.set(r.employeeSubject, r.status);
    finalManager.set(r.employeeSubject, r.managerSubject);
  }

  for (const u of users.values()) {
    const subject = subjectOf(u.externalId);
    const prev = current.get(subject);
    const status: 'active' | 'inactive' = u.active ? 'active' : 'inactive';
    let groupList: string[];
    if (!reconcileGroups && u.groupRefs === null) groupList = prev ? parseGroupsJson(prev.groupsJson) : [];
    else {
      groupList = groupsOf.get(subject) ?? [];
      if (prev && skippedGroups.size) for (const g of parseGroupsJson(prev.groupsJson)) if (skippedGroups.has(g)) groupList.push(g);
    }
    // One object literal per row with every column: spreading a 17-field record into a new
    // one per row was the planner's hottest line at 100k users.
    const w: EmployeeWrite = {
      employeeSubject: subject,
      tenantId,
      idp,
      externalId: u.externalId,
      externalIdpId: u.id !== null && u.id !== u.externalId ? u.id : null,
      email: u.email,
      displayName: u.displayName,
      givenName: u.givenName,
      familyName: u.familyName,
      title: u.title,
      department: u.department,
      managerSubject: u.managerRef === null ? null : (resolveUserRef(u.managerRef) ?? subjectOf(u.managerRef)),
      groups: sortedUnique(groupList),
      roles: u.roles,
      appAssignments: u.appAssignments,
      status,
      source: 'scim',
      syncHash: '',
      createdAt: now,
      updatedAt: now,
      lastSyncedAt: now,
      deactivatedAt: null,
    };
    w.syncHash = contentHash(w);
    finalStatus.set(subject, status);
    finalManager.set(subject, w.managerSubject);
    if (!prev) {
      counts.users_created++;
      if (status === 'inactive') w.deactivatedAt = now;
      employeeWrites.push(w);
      continue;
    }
    if (prev.syncHash === w.syncHash && prev.status === status) {
      counts.users_unchanged++;
      continue;
    }
    w.createdAt = prev.createdAt;
    w.deactivatedAt = prev.deactivatedAt;
    if (prev.status === 'active' && status === 'inactive') {
      counts.users_deactivated++;
      w.deactivatedAt = now;
    } else if (prev.status === 'inactive' && status === 'active') {
      counts.users_reactivated++;
      w.deactivatedAt = null;
    } else counts.users_updated++;
    employeeWrites.push(w);
  }
  for (const prev of current.values()) {
    if (prev.idp !== idp || users.has(prev.externalId) || skipped.has(prev.employeeSubject)) continue;
    if (prev.status === 'inactive') {
      counts.users_unchanged++;
      continue;
    }
    counts.users_deactivated++;
    finalStatus.set(prev.employeeSubject, 'inactive');
    deactivations.push(prev.employeeSubject);
  }

  // 4. Groups.
  const groupWrites: GroupRow[] = [];
  const currentGroups = new Map<string, GroupRow>();
  for (const g of input.currentGroups) if (g.tenantId === tenantId) currentGroups.set(g.groupKey, g);
  for (const g of groups.values()) {
    const key = groupKey(tenantId, g.externalId);
    const prev = currentGroups.get(key);
    const members = sortedUnique(membersOf.get(g.externalId) ?? []);
    if (!prev) {
      counts.groups_created++;
      groupWrites.push({ groupKey: key, tenantId, externalId: g.externalId, displayName: g.displayName, members, createdAt: now, updatedAt: now, lastSyncedAt: now });
    } else if (prev.displayName === g.displayName && sameList(prev.members, members)) {
      counts.groups_unchanged++;
    } else {
      counts.groups_updated++;
      groupWrites.push({ ...prev, displayName: g.displayName, members, updatedAt: now, lastSyncedAt: now });
    }
  }
  for (const prev of reconcileGroups ? currentGroups.values() : []) {
    if (groups.has(prev.externalId) || skippedGroups.has(prev.externalId) || prev.members.length === 0) continue;
    counts.groups_updated++;
    groupWrites.push({ ...prev, members: [], updatedAt: now, lastSyncedAt: now });
  }

  counts.errors = errors.length;
  return {
    employeeWrites,
    deactivations,
    groupWrites,
    counts,
    errors,
    conflicts: managerConflicts(tenantId, finalStatus, finalManager),
    status: errors.length ? 'partial' : 'ok',
  };
}

/**
 * Manager conflicts of the tenant's ACTIVE employees (an inactive employee's manager no longer
 * matters): `manager_missing` when the manager subject is not an employee of the tenant,
 * `manager_inactive` when it is deactivated. Sorted by subject for stable output.
 */
export function managerConflicts(
  tenantId: string,
  status: ReadonlyMap<string, 'active' | 'inactive'>,
  manager: ReadonlyMap<string, string | null>,
): Conflict[] {
  const out: Conflict[] = [];
  for (const [subject, st] of status) {
    const m = manager.get(subject);
    if (st !== 'active' || !m) continue;
    const ms = status.get(m);
    if (ms === undefined) out.push({ type: 'manager_missing', subject, detail: `manager ${m} is not an employee of tenant ${tenantId}` });
    else if (ms === 'inactive') out.push({ type: 'manager_inactive', subject, detail: `manager ${m} is deactivated` });
  }
  return out.sort((a, b) => (a.subject < b.subject ? -1 : a.subject > b.subject ? 1 : a.type < b.type ? -1 : 1));
}

/** Conflicts computed on demand from stored rows (GET /v1/directory/conflicts). */
export function conflictsOfRows(
  tenantId: string,
  rows: readonly Pick<EmployeeRow, 'tenantId' | 'employeeSubject' | 'status' | 'managerSubject'>[],
): Conflict[] {
  const status = new Map<string, 'active' | 'inactive'>();
  const manager = new Map<string, string | null>();
  for (const r of rows) {
    if (r.tenantId !== tenantId) continue;
    status.set(r.employeeSubject, r.status);
    manager.set(r.employeeSubject, r.managerSubject);
  }
  return managerConflicts(tenantId, status, manager);
}
