/**
 * The pure core of a snapshot sync: current rows of one tenant + a raw SCIM snapshot -> the rows
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
 *   an `active:false` user keeps what the IdP still reports. `session` and `created_at` are never written by a sync.
 * - employee `groups` = group external ids from Group resources' members plus the User's own
 *   `groups[]`, sorted and deduplicated; group `members` = employee subjects, sorted.
 * - groups of the tenant absent from the snapshot keep their record with `members: []`.
 * - only rows whose content changed are written, so an identical snapshot writes nothing.
 */
import type { EmployeeRow, GroupRow, SyncError, Conflict } from './repo.js';
import { parseGroup, parseUser, type ScimGroup, type ScimUser } from './scim.js';
import { employeeSubject, groupKey } from '../tenant.js';

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

/** An employee row as written by the sync: every column except `session` (sync never sets it). */
export type EmployeeWrite = Omit<EmployeeRow, 'session'>;

export interface SyncPlan {
  employeeWrites: EmployeeWrite[];
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
  /** The tenant's employee rows before the sync (any idp; only `idp` rows are reconciled). */
  currentEmployees: readonly EmployeeRow[];
  currentGroups: readonly GroupRow[];
  /** RFC 3339 time stamped on written rows. */
  now: string;
}

const sameList = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x, i) => x === b[i]);
const sorted = (s: Iterable<string>) => [...new Set(s)].sort();

/** Fields a snapshot owns; equal fields mean the row is unchanged and is not rewritten. */
function sameContent(a: Omit<EmployeeWrite, 'createdAt' | 'updatedAt' | 'lastSyncedAt' | 'deactivatedAt'>, b: EmployeeRow): boolean {
  return (
    a.idp === b.idp &&
    a.externalId === b.externalId &&
    a.externalIdpId === b.externalIdpId &&
    a.email === b.email &&
    a.displayName === b.displayName &&
    a.givenName === b.givenName &&
    a.familyName === b.familyName &&
    a.title === b.title &&
    a.department === b.department &&
    a.managerSubject === b.managerSubject &&
    a.status === b.status &&
    a.source === b.source &&
    sameList(a.groups, b.groups) &&
    sameList(a.roles, b.roles) &&
    sameList(a.appAssignments, b.appAssignments)
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

export function planSync(input: PlanInput): SyncPlan {
  const { tenantId, idp, now } = input;
  const subjectOf = (ext: string) => employeeSubject(idp, tenantId, ext);
  const errors: SyncError[] = [];
  const counts = emptyCounts();

  const current = new Map<string, EmployeeRow>();
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
  for (const s of skipped) if (users.has(s.slice(idp.length + tenantId.length + 2))) skipped.delete(s);

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

  const groupsOf = new Map<string, Set<string>>(); // subject -> group external ids
  const membersOf = new Map<string, Set<string>>(); // group ext -> subjects
  const relate = (subject: string, gExt: string) => {
    let a = groupsOf.get(subject);
    if (!a) groupsOf.set(subject, (a = new Set()));
    a.add(gExt);
    if (groups.has(gExt)) {
      let b = membersOf.get(gExt);
      if (!b) membersOf.set(gExt, (b = new Set()));
      b.add(subject);
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
    for (const ref of u.groupRefs ?? []) relate(subjectOf(u.externalId), groupExtByRef.get(ref) ?? ref);
  }

  // 3. Employees: desired state of every snapshot user, then deactivation of the absent ones.
  const employeeWrites: EmployeeWrite[] = [];
  const finalStatus = new Map<string, 'active' | 'inactive'>(); // for conflicts, every tenant subject
  for (const r of current.values()) finalStatus.set(r.employeeSubject, r.status);
  const finalManager = new Map<string, string | null>();
  for (const r of current.values()) finalManager.set(r.employeeSubject, r.managerSubject);

  for (const u of users.values()) {
    const subject = subjectOf(u.externalId);
    const prev = current.get(subject);
    const status: 'active' | 'inactive' = u.active ? 'active' : 'inactive';
    let groupList = groupsOf.get(subject) ?? new Set<string>();
    if (!reconcileGroups && u.groupRefs === null) groupList = new Set(prev?.groups ?? []);
    else if (prev && skippedGroups.size) {
      const kept = prev.groups.filter((g) => skippedGroups.has(g));
      if (kept.length) groupList = new Set([...groupList, ...kept]);
    }
    const content = {
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
      groups: sorted(groupList),
      roles: u.roles,
      appAssignments: u.appAssignments,
      status,
      source: 'scim',
    };
    finalStatus.set(subject, status);
    finalManager.set(subject, content.managerSubject);
    if (!prev) {
      counts.users_created++;
      employeeWrites.push({ ...content, createdAt: now, updatedAt: now, lastSyncedAt: now, deactivatedAt: status === 'inactive' ? now : null });
      continue;
    }
    if (sameContent(content, prev)) {
      counts.users_unchanged++;
      continue;
    }
    let deactivatedAt = prev.deactivatedAt;
    if (prev.status === 'active' && status === 'inactive') {
      counts.users_deactivated++;
      deactivatedAt = now;
    } else if (prev.status === 'inactive' && status === 'active') {
      counts.users_reactivated++;
      deactivatedAt = null;
    } else counts.users_updated++;
    employeeWrites.push({ ...content, createdAt: prev.createdAt, updatedAt: now, lastSyncedAt: now, deactivatedAt });
  }
  for (const prev of current.values()) {
    if (prev.idp !== idp || users.has(prev.externalId) || skipped.has(prev.employeeSubject)) continue;
    if (prev.status === 'inactive') {
      counts.users_unchanged++;
      continue;
    }
    counts.users_deactivated++;
    finalStatus.set(prev.employeeSubject, 'inactive');
    const { session: _session, ...rest } = prev;
    // Absent means deleted at the IdP: no durable memberships remain (mirrors the groups' members).
    employeeWrites.push({ ...rest, groups: [], status: 'inactive', updatedAt: now, lastSyncedAt: now, deactivatedAt: now });
  }

  // 4. Groups.
  const groupWrites: GroupRow[] = [];
  const currentGroups = new Map<string, GroupRow>();
  for (const g of input.currentGroups) if (g.tenantId === tenantId) currentGroups.set(g.groupKey, g);
  for (const g of groups.values()) {
    const key = groupKey(tenantId, g.externalId);
    const prev = currentGroups.get(key);
    const members = sorted(membersOf.get(g.externalId) ?? []);
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
export function conflictsOfRows(tenantId: string, rows: readonly EmployeeRow[]): Conflict[] {
  const status = new Map<string, 'active' | 'inactive'>();
  const manager = new Map<string, string | null>();
  for (const r of rows) {
    if (r.tenantId !== tenantId) continue;
    status.set(r.employeeSubject, r.status);
    manager.set(r.employeeSubject, r.managerSubject);
  }
  return managerConflicts(tenantId, status, manager);
}
