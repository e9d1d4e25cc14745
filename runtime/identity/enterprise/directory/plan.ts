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
import { sha256 } from '../../../lib/sha256.js';
import type { EmployeeRow, GroupRow, SyncError, Conflict } from './repo.js';
import { parseGroupRefs, parseUser, sortedUnique, type Parsed, type ScimGroup, type ScimUser } from './scim.js';
import { groupKey } from '../tenant.js';

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
  /** `users` already through parseUser, same order (the sync parses them in slices, letting the loop run). */
  parsedUsers?: readonly Parsed<ScimUser>[];
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

/** `subjects` equals `exts.map((x) => prefix + x)`, without building those strings. */
const sameSubjects = (subjects: readonly string[], prefix: string, exts: readonly string[]) => {
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
function hashFields(
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

/*
 * Performance notes (100k users, unchanged re-sync): every subject string is built ONCE per user
 * and reused as the key of every map (a fresh `prefix + ext` per lookup costs a concatenation, a
 * flatten and a re-hash each time); per-user state lives in arrays indexed by snapshot position
 * instead of maps keyed by subject; an unchanged row is detected from the digest of its columns
 * and never builds its write object.
 */
export function planSync(input: PlanInput): SyncPlan {
  return drain(stagePlan(input, false))!.finish();
}

/**
 * A plan computed from the light current state (sync.ts `loadSyncLight`: subject, idp, externalId,
 * status and digest of each row; `groupsJson`, `createdAt`, `deactivatedAt` and `managerSubject`
 * not loaded). `need` lists the rows whose other columns the plan still reads: the existing rows it
 * rewrites (created_at, deactivated_at) and, when some row is not in the snapshot, those rows
 * (manager_subject, for the conflicts). The caller fills those fields in on these same objects,
 * then calls `finish()`, which returns exactly what planSync returns on the full state. An
 * unchanged re-sync needs no row.
 */
export interface StagedPlan {
  need: CurrentEmployee[];
  finish(): SyncPlan;
}

/**
 * planSync on the light state; null when the full state is needed from the start: the snapshot
 * omits groups, or a group record failed to parse (stored memberships are then carried over, so
 * every row's `groupsJson` is read).
 */
export function planSyncLight(input: PlanInput): StagedPlan | null {
  return drain(stagePlan(input, true));
}

/**
 * The planner as steps: it yields every PACE users (or rows, or groups), so an async caller can
 * give the event loop a turn between steps (`planSyncLightPaced`); the pure callers drain it at
 * once. The result is the same either way.
 */
export type PlanSteps<T> = Generator<void, T, void>;
const PACE = 2048;
const step = (i: number): boolean => (i & (PACE - 1)) === PACE - 1;

/** Runs planner steps to the end. */
export function drain<T>(steps: PlanSteps<T>): T {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/** planSyncLight as steps (see drain). */
export function planSyncLightSteps(input: PlanInput): PlanSteps<StagedPlan | null> {
  return stagePlan(input, true);
}

/** planSync as steps; the plan is finished in the last one. */
export function* planSyncSteps(input: PlanInput): PlanSteps<SyncPlan> {
  return (yield* stagePlan(input, false))!.finish();
}

function* stagePlan(input: PlanInput, light: boolean): PlanSteps<StagedPlan | null> {
  const { tenantId, idp, now } = input;
  if (light && input.groups === undefined) return null;
  const subjectPrefix = `${idp}:${tenantId}:`;
  const errors: SyncError[] = [];
  const counts = emptyCounts();

  // 1. Parse users. Skipped subjects (bad record, externalId readable) are left untouched.
  const uList: ScimUser[] = []; // snapshot users, first record per externalId
  const uSubject: string[] = []; // their subjects (same index)
  const users = new Map<string, number>(); // externalId -> index, first wins
  const skipped = new Set<string>(); // subjects
  const userByScimId = new Map<string, number>(); // SCIM id -> index
  const rawUsers = input.users;
  // Until a first duplicate, one map operation per user: set, and a size that did not grow means
  // the externalId was already there (then its first index is restored, once, by a scan).
  let dupSeen = false;
  for (let i = 0; i < rawUsers.length; i++) {
    if (step(i)) yield;
    const p = input.parsedUsers?.[i] ?? parseUser(rawUsers[i]);
    if (!p.ok) {
      errors.push({ resource_type: 'User', external_id: p.externalId ?? p.id ?? `users[${i}]`, error: p.error });
      if (p.externalId !== null && !users.has(p.externalId)) skipped.add(subjectPrefix + p.externalId);
      continue;
    }
    const u = p.value;
    const idx = uList.length;
    let dup: boolean;
    if (dupSeen) {
      dup = users.has(u.externalId);
      if (!dup) users.set(u.externalId, idx);
    } else {
      const before = users.size;
      users.set(u.externalId, idx);
      dup = users.size === before;
      if (dup) {
        let first = 0;
        while (uList[first]!.externalId !== u.externalId) first++;
        users.set(u.externalId, first);
        dupSeen = true;
      }
    }
    if (dup) {
      errors.push({ resource_type: 'User', external_id: u.externalId, error: 'duplicate externalId in snapshot: first record applied' });
      continue;
    }
    uList.push(u);
    uSubject.push(subjectPrefix + u.externalId);
    if (u.id !== null && !userByScimId.has(u.id)) userByScimId.set(u.id, idx);
  }
  if (skipped.size) for (const s of skipped) if (users.has(s.slice(subjectPrefix.length))) skipped.delete(s);

  // The current row of each snapshot user (same subject), found through the externalId map: no
  // subject-keyed map of the tenant is built unless a skipped record or an absent user needs one.
  // A row's subject is `subjectPrefix + externalId` when it starts with the prefix and ends with
  // its externalId at the right length (no string is built to check it).
  const prevOf: (CurrentEmployee | undefined)[] = new Array<CurrentEmployee | undefined>(uList.length);
  const tenantRows: CurrentEmployee[] = [];
  const unmatchedRows: CurrentEmployee[] = []; // rows that are no snapshot user's
  const prefixLen = subjectPrefix.length;
  let next = 0; // stored rows usually come back in the order they were written: try the next user first
  let rowNo = 0;
  for (const r of input.currentEmployees) {
    if (step(rowNo++)) yield;
    if (r.tenantId !== tenantId) continue;
    tenantRows.push(r);
    const s = r.employeeSubject;
    if (!s.startsWith(subjectPrefix)) {
      unmatchedRows.push(r);
      continue;
    }
    const x = r.externalId;
    const ext = s.length === prefixLen + x.length && s.endsWith(x) ? x : s.slice(prefixLen);
    const i = next < uList.length && uList[next]!.externalId === ext ? next : users.get(ext);
    if (i !== undefined) {
      prevOf[i] = r;
      next = i + 1;
    } else unmatchedRows.push(r);
  }
  let currentMap: Map<string, CurrentEmployee> | undefined;
  const currentBySubject = (): Map<string, CurrentEmployee> => {
    if (!currentMap) {
      currentMap = new Map<string, CurrentEmployee>();
      for (const r of tenantRows) currentMap.set(r.employeeSubject, r);
    }
    return currentMap;
  };

  // A reference (member value, manager.value) is an externalId or a SCIM id of a snapshot user.
  // Returns the snapshot index (>= 0), or -1 when not a snapshot user.
  const userIndex = (ref: string): number => users.get(ref) ?? userByScimId.get(ref) ?? -1;
  // Same answer, trying index `hint` first: externalIds are unique in uList, so a user whose
  // externalId is `ref` is exactly users.get(ref). Group members are mostly listed in snapshot
  // order, so the next index usually hits without a map lookup.
  const userIndexFrom = (ref: string, hint: number): number => (hint < uList.length && uList[hint]!.externalId === ref ? hint : userIndex(ref));
  const skippedRef = (ref: string): string | undefined => {
    if (!skipped.size) return undefined;
    const s = subjectPrefix + ref;
    return skipped.has(s) && currentBySubject().has(s) ? s : undefined;
  };

  // 2. Parse groups and build the membership relation.
  const gList: ScimGroup[] = [];
  const groups = new Map<string, number>(); // externalId -> index
  const groupExtByRef = new Map<string, string>(); // SCIM id or externalId -> externalId
  const skippedGroups = new Set<string>(); // external ids whose prior memberships are kept
  const reconcileGroups = input.groups !== undefined;
  const rawGroups = input.groups ?? [];
  for (let i = 0; i < rawGroups.length; i++) {
    if (step(i)) yield;
    const p = parseGroupRefs(rawGroups[i], false);
    if (!p.ok) {
      errors.push({ resource_type: 'Group', external_id: p.externalId ?? p.id ?? `groups[${i}]`, error: p.error });
      if (p.externalId !== null) skippedGroups.add(p.externalId);
      continue;
    }
    const g = p.value;
    if (groups.has(g.externalId)) {
      errors.push({ resource_type: 'Group', external_id: g.externalId, error: 'duplicate externalId in snapshot: first record applied' });
      continue;
    }
    groups.set(g.externalId, gList.length);
    gList.push(g);
    groupExtByRef.set(g.externalId, g.externalId);
    if (g.id !== null && !groupExtByRef.has(g.id)) groupExtByRef.set(g.id, g.externalId);
  }
  for (const ext of groups.keys()) skippedGroups.delete(ext);
  if (light && skippedGroups.size) return null;

  // Plain arrays, deduplicated when sorted: far fewer allocations than a Set per employee.
  const groupsOf: (string[] | undefined)[] = new Array<string[] | undefined>(uList.length); // user index -> group ext ids
  // Group index -> members' externalIds. Every member subject is `subjectPrefix + externalId`, so
  // sorting and deduplicating the externalIds orders the subjects the same way; subjects are built
  // only for a group that is written (an unchanged 100k-member group builds none).
  const membersOf: string[][] = gList.map(() => []);
  const addGroupOf = (idx: number, gExt: string) => {
    const a = groupsOf[idx];
    if (!a) groupsOf[idx] = [gExt];
    // A push on a one-element literal reserves 17 slots; most users are in a few groups.
    else if (a.length === 1) groupsOf[idx] = [a[0]!, gExt];
    else a.push(gExt);
  };
  let hint = 0;
  let refNo = 0;
  for (let gi = 0; gi < gList.length; gi++) {
    // A turn every 64 groups, and every PACE members within a group (an all-hands group has them all).
    if ((gi & 63) === 63) yield;
    const g = gList[gi]!;
    const members = membersOf[gi]!;
    for (const ref of g.memberRefs) {
      if (step(refNo++)) yield;
      const idx = userIndexFrom(ref, hint);
      hint = idx + 1;
      if (idx >= 0) {
        addGroupOf(idx, g.externalId);
        members.push(uList[idx]!.externalId);
      } else if (skippedRef(ref) !== undefined) {
        // A skipped (unparseable) current employee keeps being listed as a member.
        members.push(ref);
      }
    }
  }
  for (let idx = 0; idx < uList.length; idx++) {
    if (step(idx)) yield;
    // User.groups[].value is the group's SCIM id per RFC 7643; accept an externalId too, and keep
    // an unknown value as-is (the IdP asserts the membership even if it did not send the group).
    const refs = uList[idx]!.groupRefs;
    if (refs === null) continue;
    for (const ref of refs) {
      const gExt = groupExtByRef.get(ref) ?? ref;
      addGroupOf(idx, gExt);
      const gi = groups.get(gExt);
      if (gi !== undefined) membersOf[gi]!.push(uList[idx]!.externalId);
    }
  }

  // 3. Employees: desired state of every snapshot user, then deactivation of the absent ones.
  const employeeWrites: EmployeeWrite[] = [];
  const deactivations: string[] = [];
  // Final status and manager of each snapshot user, for the conflicts (see planConflicts).
  const uActive: boolean[] = new Array<boolean>(uList.length);
  const uManager: (string | null)[] = new Array<string | null>(uList.length);
  const uManagerIdx: number[] = new Array<number>(uList.length); // snapshot index of the manager, or -1
  // Current rows that are exactly a snapshot user (same subject, idp and externalId). When every
  // current row is one, nothing is deactivated and conflicts need no subject-keyed maps.
  let matched = 0;
  // Writes of existing rows: created_at (and deactivated_at when the status stays) are copied from
  // the stored row in finish(), once a light state has them.
  const rewrites: EmployeeWrite[] = [];
  const rewritten: CurrentEmployee[] = [];
  const keepsDeactivatedAt: boolean[] = [];

  for (let idx = 0; idx < uList.length; idx++) {
    if (step(idx)) yield;
    const u = uList[idx]!;
    const subject = uSubject[idx]!;
    const prev = prevOf[idx];
    const status: 'active' | 'inactive' = u.active ? 'active' : 'inactive';
    let groupList: string[];
    if (!reconcileGroups && u.groupRefs === null) groupList = prev ? parseGroupsJson(prev.groupsJson) : [];
    else {
      groupList = groupsOf[idx] ?? [];
      if (prev && skippedGroups.size) for (const g of parseGroupsJson(prev.groupsJson)) if (skippedGroups.has(g)) groupList.push(g);
    }
    sortedUnique(groupList);
    let managerSubject: string | null = null;
    let mi = -1;
    if (u.managerRef !== null) {
      mi = userIndex(u.managerRef);
      managerSubject = mi >= 0 ? uSubject[mi]! : (skippedRef(u.managerRef) ?? subjectPrefix + u.managerRef);
    }
    const externalIdpId = u.id !== null && u.id !== u.externalId ? u.id : null;
    const syncHash = hashFields(
      idp,
      u.externalId,
      externalIdpId,
      u.email,
      u.displayName,
      u.givenName,
      u.familyName,
      u.title,
      u.department,
      managerSubject,
      groupList,
      u.roles,
      u.appAssignments,
      status,
      'scim',
    );
    uActive[idx] = u.active;
    uManager[idx] = managerSubject;
    uManagerIdx[idx] = mi;
    if (prev && (prev.idp !== idp || prev.externalId === u.externalId)) matched++;
    if (prev && prev.syncHash === syncHash && prev.status === status) {
      counts.users_unchanged++;
      continue;
    }
    // One object literal per written row with every column (no spread of a 17-field record).
    const w: EmployeeWrite = {
      employeeSubject: subject,
      tenantId,
      idp,
      externalId: u.externalId,
      externalIdpId,
      email: u.email,
      displayName: u.displayName,
      givenName: u.givenName,
      familyName: u.familyName,
      title: u.title,
      department: u.department,
      managerSubject,
      groups: groupList,
      roles: u.roles,
      appAssignments: u.appAssignments,
      status,
      source: 'scim',
      syncHash,
      createdAt: now,
      updatedAt: now,
      lastSyncedAt: now,
      deactivatedAt: null,
    };
    if (!prev) {
      counts.users_created++;
      if (status === 'inactive') w.deactivatedAt = now;
      employeeWrites.push(w);
      continue;
    }
    let keeps = false;
    if (prev.status === 'active' && status === 'inactive') {
      counts.users_deactivated++;
      w.deactivatedAt = now;
    } else if (prev.status === 'inactive' && status === 'active') {
      counts.users_reactivated++;
      w.deactivatedAt = null;
    } else {
      counts.users_updated++;
      keeps = true;
    }
    rewrites.push(w);
    rewritten.push(prev);
    keepsDeactivatedAt.push(keeps);
    employeeWrites.push(w);
  }
  // Every current row matched a snapshot user: each is skipped by the loop below (its idp differs
  // or its externalId is in the snapshot), so the loop would change nothing.
  // (Stored subjects are unique. A repeated subject in a hand-built input makes the count differ,
  // which only takes the general path below, whose result is the same.)
  const allMatched = matched === tenantRows.length;
  const current = allMatched ? undefined : currentBySubject();
  if (current) {
    for (const prev of current.values()) {
      if (prev.idp !== idp || users.has(prev.externalId) || skipped.has(prev.employeeSubject)) continue;
      if (prev.status === 'inactive') {
        counts.users_unchanged++;
        continue;
      }
      counts.users_deactivated++;
      deactivations.push(prev.employeeSubject);
    }
  }

  // 4. Groups.
  const groupWrites: GroupRow[] = [];
  const currentGroups = new Map<string, GroupRow>();
  for (const g of input.currentGroups) if (g.tenantId === tenantId) currentGroups.set(g.groupKey, g);
  for (let gi = 0; gi < gList.length; gi++) {
    if (step(gi)) yield;
    const g = gList[gi]!;
    const key = groupKey(tenantId, g.externalId);
    const prev = currentGroups.get(key);
    const exts = sortedUnique(membersOf[gi]!);
    if (!prev) {
      counts.groups_created++;
      const members = exts.map((x) => subjectPrefix + x);
      groupWrites.push({
        groupKey: key,
        tenantId,
        externalId: g.externalId,
        displayName: g.displayName,
        members,
        createdAt: now,
        updatedAt: now,
        lastSyncedAt: now,
      });
    } else if (prev.displayName === g.displayName && sameSubjects(prev.members, subjectPrefix, exts)) {
      counts.groups_unchanged++;
    } else {
      counts.groups_updated++;
      const members = exts.map((x) => subjectPrefix + x);
      groupWrites.push({ ...prev, displayName: g.displayName, members, updatedAt: now, lastSyncedAt: now });
    }
  }
  for (const prev of reconcileGroups ? currentGroups.values() : []) {
    if (groups.has(prev.externalId) || skippedGroups.has(prev.externalId) || prev.members.length === 0) continue;
    counts.groups_updated++;
    groupWrites.push({ ...prev, members: [], updatedAt: now, lastSyncedAt: now });
  }

  counts.errors = errors.length;
  const finish = (): SyncPlan => {
    for (let k = 0; k < rewrites.length; k++) {
      const w = rewrites[k]!;
      const prev = rewritten[k]!;
      w.createdAt = prev.createdAt;
      if (keepsDeactivatedAt[k]) w.deactivatedAt = prev.deactivatedAt;
    }
    return {
      employeeWrites,
      deactivations,
      groupWrites,
      counts,
      errors,
      // fullConflicts reads the manager of every row, but a snapshot user's is replaced by uManager.
      conflicts: current
        ? fullConflicts(tenantId, current, uSubject, uActive, uManager, deactivations)
        : snapshotConflicts(tenantId, uSubject, uActive, uManager, uManagerIdx),
      status: errors.length ? 'partial' : 'ok',
    };
  };
  return { need: current ? rewritten.concat(unmatchedRows) : rewritten, finish };
}

/**
 * Conflicts when the tenant's employees after the sync are exactly the snapshot users (every current
 * row matched one). A manager resolved to a snapshot user has that user's status; any other
 * manager subject is then not an employee of the tenant (missing). Same result as managerConflicts
 * over the full maps, without building two 100k-entry maps keyed by subject.
 */
function snapshotConflicts(
  tenantId: string,
  subjects: readonly string[],
  active: readonly boolean[],
  manager: readonly (string | null)[],
  managerIdx: readonly number[],
): Conflict[] {
  const out: Conflict[] = [];
  for (let i = 0; i < subjects.length; i++) {
    const m = manager[i];
    if (!active[i] || !m) continue;
    const mi = managerIdx[i]!;
    if (mi < 0) out.push({ type: 'manager_missing', subject: subjects[i]!, detail: `manager ${m} is not an employee of tenant ${tenantId}` });
    else if (!active[mi]) out.push({ type: 'manager_inactive', subject: subjects[i]!, detail: `manager ${m} is deactivated` });
  }
  return out.sort(byConflict);
}

/** General case: final status and manager of every tenant subject, then managerConflicts. */
function fullConflicts(
  tenantId: string,
  current: ReadonlyMap<string, CurrentEmployee>,
  subjects: readonly string[],
  active: readonly boolean[],
  manager: readonly (string | null)[],
  deactivations: readonly string[],
): Conflict[] {
  const status = new Map<string, 'active' | 'inactive'>();
  const managers = new Map<string, string | null>();
  for (const r of current.values()) {
    status.set(r.employeeSubject, r.status);
    managers.set(r.employeeSubject, r.managerSubject);
  }
  for (let i = 0; i < subjects.length; i++) {
    status.set(subjects[i]!, active[i] ? 'active' : 'inactive');
    managers.set(subjects[i]!, manager[i]!);
  }
  for (const s of deactivations) status.set(s, 'inactive');
  return managerConflicts(tenantId, status, managers);
}

const byConflict = (a: Conflict, b: Conflict) => (a.subject < b.subject ? -1 : a.subject > b.subject ? 1 : a.type < b.type ? -1 : 1);

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
  return out.sort(byConflict);
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
