/**
 * Tenant-scoped read repository of the workforce directory (SPEC 2.7, DESIGN principle 5).
 * `directoryRepo(db, tenantId)` binds ONE tenant: every statement it issues filters on
 * `tenant_id = tenantId`, and keys that embed a tenant (subjects, group keys) naming another
 * tenant are answered "not found" without a query. `db` may be a transaction, so callers (the
 * sync, the governance cascade) read their own uncommitted writes.
 *
 * Records come back in the snake_case API shape; `active` is derived from `status`.
 */
import { and, asc, desc, eq, gt, sql } from 'drizzle-orm';
import { employees, groups, syncRuns } from '../../../store/schema/directory.js';
import { rowsOf, type Db } from '../../../store/factory.js';
import type { CurrentEmployee } from './plan.js';
import { tenantOfGroupKey, tenantOfSubject, type DbOrTx } from '../tenant.js';

/**
 * Lets the event loop run (timers, sockets) between the steps of a long read or sync: the rows
 * each statement returns are mapped and planned on this thread, and a step that resolves in
 * microtasks alone would hold every listener of the process until the sync ends.
 */
export const breathe = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
/** Rows per page of the bulk reads of a sync (employees, groups). */
const PAGE = 5000;
const GROUP_PAGE = 250;

export type EmployeeRow = typeof employees.$inferSelect;
export type GroupRow = typeof groups.$inferSelect;
export type SyncRunRow = typeof syncRuns.$inferSelect;

export interface EmployeeRecord {
  employee_subject: string;
  idp: string;
  tenant_id: string;
  external_id: string;
  external_idp_id: string | null;
  email: string | null;
  display_name: string | null;
  given_name: string | null;
  family_name: string | null;
  title: string | null;
  department: string | null;
  manager_subject: string | null;
  groups: string[];
  roles: string[];
  app_assignments: string[];
  status: 'active' | 'inactive';
  active: boolean;
  source: string;
  created_at: string;
  updated_at: string;
  deactivated_at: string | null;
  last_synced_at: string | null;
  session: Record<string, unknown> | null;
}

export interface GroupRecord {
  group_key: string;
  tenant_id: string;
  external_id: string;
  display_name: string | null;
  members: string[];
  created_at: string;
  updated_at: string;
  last_synced_at: string | null;
}

export interface SyncError {
  resource_type: 'User' | 'Group';
  external_id: string;
  error: string;
}

export interface Conflict {
  type: 'manager_missing' | 'manager_inactive';
  subject: string;
  detail: string;
}

export interface SyncRunRecord {
  id: string;
  tenant_id: string;
  idp: string;
  started_at: string;
  finished_at: string | null;
  status: 'ok' | 'partial';
  counts: Record<string, number>;
  errors: SyncError[];
  conflicts: Conflict[];
  cascade: Record<string, unknown> | null;
}

/**
 * Postgres renders timestamptz as `2026-01-01 10:00:00.123+00` (mode 'string'); the API speaks
 * RFC 3339, so normalise to `2026-01-01T10:00:00.123Z` whatever the session time zone.
 */
export function iso(ts: string): string;
export function iso(ts: string | null | undefined): string | null;
export function iso(ts: string | null | undefined): string | null {
  if (ts === null || ts === undefined) return null;
  const t = ts.includes('T') ? ts : ts.replace(' ', 'T').replace(/([+-]\d\d)$/, '$1:00');
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? ts : d.toISOString();
}

export function employeeOut(r: EmployeeRow): EmployeeRecord {
  return {
    employee_subject: r.employeeSubject,
    idp: r.idp,
    tenant_id: r.tenantId,
    external_id: r.externalId,
    external_idp_id: r.externalIdpId,
    email: r.email,
    display_name: r.displayName,
    given_name: r.givenName,
    family_name: r.familyName,
    title: r.title,
    department: r.department,
    manager_subject: r.managerSubject,
    groups: r.groups,
    roles: r.roles,
    app_assignments: r.appAssignments,
    status: r.status,
    active: r.status === 'active',
    source: r.source,
    created_at: iso(r.createdAt),
    updated_at: iso(r.updatedAt),
    deactivated_at: iso(r.deactivatedAt),
    last_synced_at: iso(r.lastSyncedAt),
    session: r.session ?? null,
  };
}

export function groupOut(r: GroupRow): GroupRecord {
  return {
    group_key: r.groupKey,
    tenant_id: r.tenantId,
    external_id: r.externalId,
    display_name: r.displayName,
    members: r.members,
    created_at: iso(r.createdAt),
    updated_at: iso(r.updatedAt),
    last_synced_at: iso(r.lastSyncedAt),
  };
}

export function syncRunOut(r: SyncRunRow): SyncRunRecord {
  return {
    id: r.id,
    tenant_id: r.tenantId,
    idp: r.idp,
    started_at: iso(r.startedAt),
    finished_at: iso(r.finishedAt),
    status: r.status,
    counts: r.counts,
    errors: r.errors as SyncError[],
    conflicts: r.conflicts as Conflict[],
    cascade: r.cascade ?? null,
  };
}

/** Longest manager chain walked; real org charts are far shallower, cycles stop earlier. */
export const MAX_MANAGER_CHAIN = 64;

export interface SyncDetails {
  s: string;
  m: string | null;
  c: string;
  d: string | null;
}

export interface DirectoryRepo {
  readonly tenantId: string;
  /** The employee with this stable subject in this tenant, active or not. */
  getEmployee(subject: string): Promise<EmployeeRecord | undefined>;
  /**
   * Resolves a human reference: stable subject, then external id, then email (case-insensitive),
   * then display name. The first kind that matches decides; two or more matches of that kind is
   * ambiguous and yields undefined (fail closed).
   */
  findEmployee(ref: string): Promise<EmployeeRecord | undefined>;
  /** By subject; `after` a subject (exclusive), at most `limit` of them. */
  listEmployees(filter?: { status?: 'active' | 'inactive'; after?: string; limit?: number }): Promise<EmployeeRecord[]>;
  /** By group key `<tenant>:<external_id>`. */
  getGroup(groupKey: string): Promise<GroupRecord | undefined>;
  listGroups(): Promise<GroupRecord[]>;
  /**
   * Durable (directory) membership: the employee's synced `groups` hold the group's external id.
   * Accepts a group key `<tenant>:<ext>` or a bare external id. Token groups never count.
   */
  isMember(subject: string, groupKeyOrExternalId: string): Promise<boolean>;
  /** The managers above `subject`, nearest first (self excluded); stops at a cycle, a missing manager or 64 levels. */
  managerChain(subject: string): Promise<EmployeeRecord[]>;
  /** Sync-run history, newest first. */
  listSyncRuns(limit?: number): Promise<SyncRunRecord[]>;
  /** Raw rows of the tenant (conflicts on demand). */
  loadEmployeeRows(): Promise<EmployeeRow[]>;
  /** The few columns the sync planner diffs against, without per-column mapping or JSON parsing. */
  loadSyncState(): Promise<CurrentEmployee[]>;
  /**
   * The columns an unchanged re-sync compares (subject, idp, externalId, status, digest); the other
   * CurrentEmployee fields are placeholders ('[]', '', null) until `loadSyncDetails` fills them in.
   */
  loadSyncLight(): Promise<CurrentEmployee[]>;
  /** created_at, deactivated_at and manager_subject of these rows (all rows when `subjects` is null). */
  loadSyncDetails(subjects: readonly string[] | null): Promise<SyncDetails[]>;
  loadGroupRows(): Promise<GroupRow[]>;
  /** Employees with a session (identity resolution), newest sign-in first. */
  listSessions(limit: number): Promise<EmployeeRecord[]>;
}

export function directoryRepo(db: DbOrTx, tenantId: string): DirectoryRepo {
  const inTenant = eq(employees.tenantId, tenantId);
  const mine = (subject: string) => tenantOfSubject(subject) === tenantId;

  const oneEmployee = async (where: ReturnType<typeof eq>) => {
    const rows = await db.select().from(employees).where(and(inTenant, where)).limit(1);
    return rows[0] ? employeeOut(rows[0]) : undefined;
  };
  /** Exactly one match, or undefined when none or ambiguous. */
  const unique = async (where: ReturnType<typeof eq>): Promise<{ n: number; e?: EmployeeRecord }> => {
    const rows = await db.select().from(employees).where(and(inTenant, where)).limit(2);
    return { n: rows.length, e: rows.length === 1 && rows[0] ? employeeOut(rows[0]) : undefined };
  };

  const repo: DirectoryRepo = {
    tenantId,
    async getEmployee(subject) {
      if (!mine(subject)) return undefined;
      return oneEmployee(eq(employees.employeeSubject, subject));
    },
    async findEmployee(ref) {
      const r = ref.trim();
      if (!r) return undefined;
      if (mine(r)) {
        const e = await repo.getEmployee(r);
        if (e) return e;
      }
      for (const where of [eq(employees.externalId, r), eq(sql`lower(${employees.email})`, r.toLowerCase()), eq(employees.displayName, r)]) {
        const { n, e } = await unique(where);
        if (n > 0) return e;
      }
      return undefined;
    },
    async listEmployees(filter = {}) {
      const where = [inTenant];
      if (filter.status) where.push(eq(employees.status, filter.status));
      if (filter.after !== undefined) where.push(gt(employees.employeeSubject, filter.after));
      const q = db
        .select()
        .from(employees)
        .where(and(...where))
        .orderBy(asc(employees.employeeSubject));
      const rows = filter.limit !== undefined ? await q.limit(filter.limit) : await q;
      return rows.map(employeeOut);
    },
    async getGroup(key) {
      if (tenantOfGroupKey(key) !== tenantId) return undefined;
      const rows = await db
        .select()
        .from(groups)
        .where(and(eq(groups.tenantId, tenantId), eq(groups.groupKey, key)))
        .limit(1);
      return rows[0] ? groupOut(rows[0]) : undefined;
    },
    async listGroups() {
      const rows = await db.select().from(groups).where(eq(groups.tenantId, tenantId)).orderBy(asc(groups.groupKey));
      return rows.map(groupOut);
    },
    async isMember(subject, g) {
      const prefix = `${tenantId}:`;
      const ext = g.startsWith(prefix) ? g.slice(prefix.length) : g;
      if (!ext || !mine(subject)) return false;
      const e = await repo.getEmployee(subject);
      return !!e && e.groups.includes(ext);
    },
    async managerChain(subject) {
      const chain: EmployeeRecord[] = [];
      const seen = new Set([subject]);
      let cur = await repo.getEmployee(subject);
      while (cur?.manager_subject && chain.length < MAX_MANAGER_CHAIN && !seen.has(cur.manager_subject)) {
        seen.add(cur.manager_subject);
        const m = await repo.getEmployee(cur.manager_subject);
        if (!m) break;
        chain.push(m);
        cur = m;
      }
      return chain;
    },
    async listSyncRuns(limit = 100) {
      const rows = await db.select().from(syncRuns).where(eq(syncRuns.tenantId, tenantId)).orderBy(desc(syncRuns.seq)).limit(limit);
      return rows.map(syncRunOut);
    },
    loadEmployeeRows: () => db.select().from(employees).where(inTenant),
    async loadSyncState() {
      const rows = await rowsOf<{
        s: string;
        i: string;
        x: string;
        st: 'active' | 'inactive';
        m: string | null;
        g: string;
        c: string;
        d: string | null;
        h: string | null;
      }>(
        db as Db,
        sql`select employee_subject as s, idp as i, external_id as x, status as st, manager_subject as m,
              groups::text as g, created_at::text as c, deactivated_at::text as d, sync_hash as h
            from ${employees} where tenant_id = ${tenantId}`,
      );
      return rows.map((r) => ({
        employeeSubject: r.s,
        tenantId,
        idp: r.i,
        externalId: r.x,
        status: r.st,
        managerSubject: r.m,
        groupsJson: r.g,
        createdAt: r.c,
        deactivatedAt: r.d,
        syncHash: r.h,
      }));
    },
    async loadSyncLight() {
      const out: CurrentEmployee[] = [];
      // Paged by subject, with the event loop let in between pages: on the embedded PGlite one
      // 100k-row statement would hold the whole process for seconds.
      for (let after = ''; ;) {
        const rows = await rowsOf<{ s: string; i: string; x: string; st: 'active' | 'inactive'; h: string | null }>(
          db as Db,
          sql`select employee_subject as s, idp as i, external_id as x, status as st, sync_hash as h
              from ${employees} where tenant_id = ${tenantId} and employee_subject > ${after}
              order by employee_subject limit ${PAGE}`,
        );
        for (const r of rows) {
          out.push({
            employeeSubject: r.s,
            tenantId,
            idp: r.i,
            externalId: r.x,
            status: r.st,
            managerSubject: null,
            groupsJson: '[]',
            createdAt: '',
            deactivatedAt: null,
            syncHash: r.h,
          });
        }
        if (rows.length < PAGE) return out;
        after = rows[rows.length - 1]!.s;
        await breathe();
      }
    },
    loadSyncDetails: (subjects) =>
      rowsOf<SyncDetails>(
        db as Db,
        subjects === null
          ? sql`select employee_subject as s, manager_subject as m, created_at::text as c, deactivated_at::text as d
                from ${employees} where tenant_id = ${tenantId}`
          : sql`select employee_subject as s, manager_subject as m, created_at::text as c, deactivated_at::text as d
                from ${employees} where tenant_id = ${tenantId}
                  and employee_subject in (select jsonb_array_elements_text(${JSON.stringify(subjects)}::jsonb))`,
      ),
    async loadGroupRows() {
      const out: GroupRow[] = [];
      for (let after = ''; ;) {
        const rows = await db
          .select()
          .from(groups)
          .where(and(eq(groups.tenantId, tenantId), gt(groups.groupKey, after)))
          .orderBy(asc(groups.groupKey))
          .limit(GROUP_PAGE);
        out.push(...rows);
        if (rows.length < GROUP_PAGE) return out;
        after = rows[rows.length - 1]!.groupKey;
        await breathe();
      }
    },
    async listSessions(limit) {
      const rows = await db
        .select()
        .from(employees)
        .where(and(inTenant, sql`${employees.session} is not null`))
        .orderBy(desc(sql`${employees.session}->>'last_seen_at'`), asc(employees.employeeSubject))
        .limit(limit);
      return rows.map(employeeOut);
    },
  };
  return repo;
}

/**
 * The only unscoped directory query: which tenants exist. Used to answer list reads that name no
 * tenant, which are then assembled tenant by tenant through `directoryRepo`.
 */
export async function directoryTenants(db: DbOrTx): Promise<string[]> {
  const rows = await rowsOf<{ tenant_id: string }>(
    db as Db,
    sql`select tenant_id from ${employees} union select tenant_id from ${groups} union select tenant_id from ${syncRuns} order by 1`,
  );
  return rows.map((r) => r.tenant_id);
}
