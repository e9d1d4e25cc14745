/**
 * Manager conflicts (SPEC 3.5): an active employee whose manager is not an employee of the
 * tenant (`manager_missing`) or is deactivated (`manager_inactive`). Computed by the planner for
 * a sync and on demand from stored rows.
 */
import type { Conflict, EmployeeRow } from './repo.js';
import type { CurrentEmployee } from './plan.js';

/**
 * Conflicts when the tenant's employees after the sync are exactly the snapshot users (every current
 * row matched one). A manager resolved to a snapshot user has that user's status; any other
 * manager subject is then not an employee of the tenant (missing). Same result as managerConflicts
 * over the full maps, without building two 100k-entry maps keyed by subject.
 */
export function snapshotConflicts(
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
export function fullConflicts(
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
