/**
 * The planner's one pass (plan.ts has the entry points): parse the snapshot's users and groups,
 * match them to the tenant's current rows, then the employee and group writes, the counts and
 * the conflicts. A generator, so an async caller can give the event loop a turn every PACE
 * records. Its phases share arrays indexed by snapshot position, hence one function.
 *
 * Performance (100k users, unchanged re-sync): every subject string is built ONCE per user and
 * reused as the key of every map (a fresh `prefix + ext` per lookup costs a concatenation, a
 * flatten and a re-hash each time); per-user state lives in arrays, not maps keyed by subject;
 * an unchanged row is detected from the digest of its columns and never builds its write object.
 */
import type { GroupRow, SyncError } from './repo.js';
import { parseGroupRefs, parseUser, sortedUnique, type ScimGroup, type ScimUser } from './scim.js';
import { groupKey } from '../tenant.js';
import { fullConflicts, snapshotConflicts } from './conflicts.js';
import { hashFields, parseGroupsJson, sameSubjects } from './row-content.js';
import type { CurrentEmployee, EmployeeWrite, PlanInput, PlanSteps, StagedPlan, SyncCounts, SyncPlan } from './plan.js';

const PACE = 2048;
const step = (i: number): boolean => (i & (PACE - 1)) === PACE - 1;

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

export function* stagePlan(input: PlanInput, light: boolean): PlanSteps<StagedPlan | null> {
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
