/**
 * Governance's read view of the tenant directory, built on C1's tenant-scoped `directoryRepo`
 * (never its own queries). Two flavours: `preloadedView` reads the tenant once (the cascade and
 * the summary touch every owner), `lazyView` reads per reference with a per-call cache (single
 * agent reads, grants, preview).
 */
import { directoryRepo, type EmployeeRecord, type GroupRecord } from '../directory/repo.js';
import { tenantOfGroupKey, type DbOrTx } from '../tenant.js';
import { MISSING, type OwnerType, type PartyHealth } from './model.js';

export interface DirectoryView {
  readonly tenantId: string;
  employee(subject: string): Promise<EmployeeRecord | undefined>;
  /** Subject, external id, email or display name; ambiguous = undefined (C1's findEmployee). */
  findEmployee(ref: string): Promise<EmployeeRecord | undefined>;
  group(key: string): Promise<GroupRecord | undefined>;
  /** Durable membership: the employee's synced groups hold the group's external id. */
  isMember(subject: string, groupKey: string): Promise<boolean>;
  managerChain(subject: string): Promise<EmployeeRecord[]>;
}

/** A group key of this tenant for a team reference: `<tenant>:<ext>`, or a bare external id. */
export function groupKeyIn(tenantId: string, ref: string): string | undefined {
  const r = ref.trim();
  if (!r) return undefined;
  if (r.includes(':')) return tenantOfGroupKey(r) === tenantId ? r : undefined;
  return `${tenantId}:${r}`;
}

function externalOf(key: string): string {
  return key.slice(key.indexOf(':') + 1);
}

export function lazyView(db: DbOrTx, tenantId: string): DirectoryView {
  const repo = directoryRepo(db, tenantId);
  const emp = new Map<string, Promise<EmployeeRecord | undefined>>();
  const grp = new Map<string, Promise<GroupRecord | undefined>>();
  const employee = (s: string) => {
    let p = emp.get(s);
    if (!p) emp.set(s, (p = repo.getEmployee(s)));
    return p;
  };
  return {
    tenantId,
    employee,
    findEmployee: (ref) => repo.findEmployee(ref),
    group: (k) => {
      let p = grp.get(k);
      if (!p) grp.set(k, (p = repo.getGroup(k)));
      return p;
    },
    isMember: async (s, k) => {
      const e = await employee(s);
      return !!e && tenantOfGroupKey(k) === tenantId && e.groups.includes(externalOf(k));
    },
    managerChain: (s) => repo.managerChain(s),
  };
}

export async function preloadedView(db: DbOrTx, tenantId: string): Promise<DirectoryView> {
  const repo = directoryRepo(db, tenantId);
  const [emps, grps] = [await repo.listEmployees(), await repo.listGroups()];
  const bySubject = new Map(emps.map((e) => [e.employee_subject, e]));
  const byKey = new Map(grps.map((g) => [g.group_key, g]));
  const employee = async (s: string) => bySubject.get(s);
  return {
    tenantId,
    employee,
    findEmployee: (ref) => repo.findEmployee(ref),
    group: async (k) => byKey.get(k),
    isMember: async (s, k) => {
      const e = bySubject.get(s);
      return !!e && tenantOfGroupKey(k) === tenantId && e.groups.includes(externalOf(k));
    },
    managerChain: async (s) => {
      // Same walk as directoryRepo.managerChain, over the preloaded map.
      const chain: EmployeeRecord[] = [];
      const seen = new Set([s]);
      let cur = bySubject.get(s);
      while (cur?.manager_subject && chain.length < 64 && !seen.has(cur.manager_subject)) {
        seen.add(cur.manager_subject);
        const m = bySubject.get(cur.manager_subject);
        if (!m) break;
        chain.push(m);
        cur = m;
      }
      return chain;
    },
  };
}

export function employeeHealth(e: EmployeeRecord | undefined): PartyHealth {
  if (!e) return MISSING;
  return { ok: true, active: e.status === 'active', display: e.display_name ?? e.email ?? e.employee_subject, department: e.department, kind: 'employee' };
}

/** A group owner is "active" while at least one of its durable members is an active employee. */
export async function groupHealth(v: DirectoryView, key: string): Promise<PartyHealth> {
  const g = await v.group(key);
  if (!g) return MISSING;
  const ext = externalOf(key);
  let active = false;
  for (const m of g.members) {
    const e = await v.employee(m);
    if (e && e.status === 'active' && e.groups.includes(ext)) {
      active = true;
      break;
    }
  }
  return { ok: true, active, display: g.display_name ?? g.group_key, department: null, kind: 'group' };
}

export async function ownerHealth(v: DirectoryView, ownerType: OwnerType, ownerRef: string): Promise<PartyHealth> {
  if (ownerType === 'employee') return employeeHealth(await v.employee(ownerRef));
  const key = groupKeyIn(v.tenantId, ownerRef);
  return key ? groupHealth(v, key) : MISSING;
}
