/**
 * SCIM snapshot sync (SPEC 3.5): one transaction per tenant that loads the tenant's rows once,
 * plans in memory (plan.ts), writes only the changed rows in batched multi-row upserts, records
 * the sync run and runs the revocation cascade. A failure anywhere rolls everything back, so the
 * previous directory state stays intact; concurrent syncs of one tenant serialise on an advisory
 * lock, other tenants are not blocked.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { Db } from '../../../store/factory.js';
import { employees, groups, syncRuns } from '../../../store/schema/directory.js';
import { errMsg, logger } from '../../../lib/log.js';
import type { DbOrTx } from '../tenant.js';
import type { CascadeCounts } from '../governance/model.js';
import { breathe, directoryRepo, iso, type DirectoryRepo, type SyncRunRecord } from './repo.js';
import { planSyncLightSteps, planSyncSteps, type EmployeeWrite, type Idp, type PlanSteps, type SyncPlan } from './plan.js';
import type { GroupRow } from './repo.js';
import { parseUser, type Parsed, type ScimUser } from './scim.js';

/** Users parsed between two turns of the event loop. */
const PARSE_SLICE = 2000;
/** Planner work between two turns of the event loop (ms): a 100k-user plan is ~400 ms of CPU. */
const PLAN_SLICE_MS = 8;

/** Runs the planner's steps, giving the event loop a turn every PLAN_SLICE_MS. */
async function paced<T>(steps: PlanSteps<T>): Promise<T> {
  let t = performance.now();
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    if (performance.now() - t >= PLAN_SLICE_MS) {
      await breathe();
      t = performance.now();
    }
  }
}

const log = logger('directory-sync');

/** Counts returned by the governance revocation cascade (SPEC 2.7 `cascade`, 4.4), declared once in its pure core. */
export type { CascadeCounts };

/** Shape of governance's `runCascade`: it runs inside the sync's transaction. `now` is epoch ms. */
export type CascadeFn = (tx: DbOrTx, tenantId: string, opts: { now: number; source: 'auto' | 'admin'; by: string }) => Promise<CascadeCounts>;

export type SyncStage = 'planned' | 'employees' | 'groups' | 'run' | 'cascade';

export interface SyncDeps {
  db: Db;
  /** Epoch milliseconds. */
  now: () => number;
  /** The governance cascade; when absent the response's `cascade` is null (nothing ran). */
  cascade?: CascadeFn;
  /** Test hook called inside the transaction after each stage; throwing aborts the sync. */
  failpoint?: (stage: SyncStage) => void | Promise<void>;
  /** Rows per multi-row upsert statement (default 500). */
  batchSize?: number;
  /** Rows written to a table at or above which the sync refreshes its planner statistics (default 1000; see analyzeWritten). */
  analyzeAfterRows?: number;
}

export interface SyncRequest {
  tenantId: string;
  idp: Idp;
  mode: 'snapshot';
  users: readonly unknown[];
  /** Omitted: group records and memberships are not reconciled (see plan.ts). */
  groups?: readonly unknown[];
}

export type SyncResponse = Omit<SyncRunRecord, 'cascade'> & { cascade: CascadeCounts | null };

/** The principal recorded on cascade log rows caused by a sync. */
export const SYNC_ACTOR = 'directory-sync';

export async function syncDirectory(deps: SyncDeps, req: SyncRequest): Promise<SyncResponse> {
  const batch = deps.batchSize ?? 500;
  const startedMs = deps.now();
  const startedAt = new Date(startedMs).toISOString();
  const id = randomUUID();
  const result = await deps.db.transaction(async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${`writ.directory.sync:${req.tenantId}`}))`);
    const plan = await planWithState(directoryRepo(tx, req.tenantId), req, startedAt);
    await deps.failpoint?.('planned');
    for (let i = 0; i < plan.employeeWrites.length; i += batch) {
      await breathe();
      await upsertEmployees(tx, plan.employeeWrites.slice(i, i + batch));
    }
    for (let i = 0; i < plan.deactivations.length; i += batch) {
      await breathe();
      await deactivate(tx, req.tenantId, plan.deactivations.slice(i, i + batch), startedAt);
    }
    await deps.failpoint?.('employees');
    for (let i = 0; i < plan.groupWrites.length; i += batch) {
      await breathe();
      await upsertGroups(tx, plan.groupWrites.slice(i, i + batch));
    }
    await breathe();
    await deps.failpoint?.('groups');
    // The cascade sees the new directory state (same transaction) and commits or rolls back with it.
    const cascade = deps.cascade ? await deps.cascade(tx, req.tenantId, { now: deps.now(), source: 'auto', by: SYNC_ACTOR }) : null;
    await deps.failpoint?.('cascade');
    const finishedAt = new Date(deps.now()).toISOString();
    await tx.insert(syncRuns).values({
      id,
      tenantId: req.tenantId,
      idp: req.idp,
      startedAt,
      finishedAt,
      status: plan.status,
      counts: { ...plan.counts },
      errors: plan.errors,
      conflicts: plan.conflicts,
      cascade: cascade as Record<string, unknown> | null,
    });
    await deps.failpoint?.('run');
    return { plan, cascade, finishedAt };
  });
  const { plan, cascade, finishedAt } = result;
  await analyzeWritten(deps.db, plan, deps.analyzeAfterRows ?? ANALYZE_AFTER_ROWS);
  log.info('sync', { tenant: req.tenantId, idp: req.idp, status: plan.status, ...plan.counts, ms: deps.now() - startedMs });
  return {
    id,
    tenant_id: req.tenantId,
    idp: req.idp,
    started_at: startedAt,
    finished_at: iso(finishedAt),
    status: plan.status,
    counts: { ...plan.counts },
    errors: plan.errors,
    conflicts: plan.conflicts,
    cascade,
  };
}

const ANALYZE_AFTER_ROWS = 1000;

/**
 * After a sync that wrote many rows, the planner statistics of what it wrote are refreshed, as
 * PostgreSQL advises after a bulk load. Until autovacuum (or PGlite's maintenance,
 * pglite-maintenance.ts) gets there, up to a minute later, the planner takes the table for empty
 * and answers each page of `loadSyncLight` with a bitmap scan and a sort of every row after the
 * page: the next sync of 100k users read the tenant about 20 times (unchanged re-sync 1.9-2.1 s
 * right after the first sync, 0.9-1.1 s with this). Only the columns the sync's own reads select
 * on are analyzed (80 ms for 100k rows where the whole table takes 600 ms); such an ANALYZE does
 * not reset the table's change count, so autovacuum still does the whole table later. Best effort,
 * after the commit: a short lock timeout (autovacuum may hold the table), a failure only logged.
 */
async function analyzeWritten(db: Db, plan: SyncPlan, threshold: number): Promise<void> {
  const statements = [
    ...(plan.employeeWrites.length + plan.deactivations.length >= threshold
      ? [sql`analyze ${employees} (${sql.identifier(employees.tenantId.name)}, ${sql.identifier(employees.employeeSubject.name)})`]
      : []),
    ...(plan.groupWrites.length >= threshold
      ? [sql`analyze ${groups} (${sql.identifier(groups.tenantId.name)}, ${sql.identifier(groups.groupKey.name)})`]
      : []),
  ];
  if (!statements.length) return;
  try {
    await db.transaction(async (tx) => {
      await tx.execute(sql`set local lock_timeout = '1s'`);
      for (const q of statements) await tx.execute(q);
    });
  } catch (e) {
    log.warn('refreshing planner statistics after the sync failed', { err: errMsg(e) });
  }
}

/**
 * Plans from the light state (what an unchanged re-sync compares) and loads the other columns only
 * for the rows the plan rewrites or finds absent; the full state when the plan cannot do without it.
 */
async function planWithState(repo: DirectoryRepo, req: SyncRequest, now: string): Promise<SyncPlan> {
  // Parsing 100k SCIM users is most of the plan's work: done in slices so the loop can run between.
  const parsedUsers: Parsed<ScimUser>[] = new Array<Parsed<ScimUser>>(req.users.length);
  for (let i = 0; i < req.users.length; i++) {
    parsedUsers[i] = parseUser(req.users[i]);
    if (i % PARSE_SLICE === PARSE_SLICE - 1) await breathe();
  }
  const input = { tenantId: req.tenantId, idp: req.idp, users: req.users, parsedUsers, groups: req.groups, now };
  const currentGroups = await repo.loadGroupRows();
  if (req.groups !== undefined) {
    const light = await repo.loadSyncLight();
    const staged = await paced(planSyncLightSteps({ ...input, currentEmployees: light, currentGroups }));
    if (staged) {
      if (staged.need.length) {
        const rows = new Map(staged.need.map((r) => [r.employeeSubject, r]));
        // Many rows: one scan of the tenant is cheaper than shipping their subjects.
        const details = await repo.loadSyncDetails(rows.size > light.length / 4 ? null : [...rows.keys()]);
        let filled = 0;
        for (const d of details) {
          const r = rows.get(d.s);
          if (!r) continue;
          r.managerSubject = d.m;
          r.createdAt = d.c;
          r.deactivatedAt = d.d;
          filled++;
        }
        // A row gone between the two reads (deleted outside the sync): plan again from one full read.
        if (filled === rows.size) return staged.finish();
      } else return staged.finish();
    }
  }
  return paced(planSyncSteps({ ...input, currentEmployees: await repo.loadSyncState(), currentGroups }));
}

/*
 * Batched writes: one statement per batch, rows shipped as ONE jsonb parameter and expanded
 * server-side by jsonb_to_recordset. That keeps a 2000-row upsert to a single bind parameter
 * (no 65535-parameter ceiling, no per-value binding cost) on both Postgres and PGlite.
 */

async function upsertEmployees(tx: DbOrTx, rows: readonly EmployeeWrite[]): Promise<void> {
  if (!rows.length) return;
  const payload = JSON.stringify(
    rows.map((r) => ({
      employee_subject: r.employeeSubject,
      tenant_id: r.tenantId,
      idp: r.idp,
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
      source: r.source,
      created_at: r.createdAt,
      updated_at: r.updatedAt,
      deactivated_at: r.deactivatedAt,
      last_synced_at: r.lastSyncedAt,
      sync_hash: r.syncHash,
    })),
  );
  // `session` is deliberately absent from both column lists: only identity resolution sets it.
  await tx.execute(sql`
    insert into ${employees} (employee_subject, tenant_id, idp, external_id, external_idp_id, email, display_name,
      given_name, family_name, title, department, manager_subject, groups, roles, app_assignments, status, source,
      created_at, updated_at, deactivated_at, last_synced_at, sync_hash)
    select employee_subject, tenant_id, idp, external_id, external_idp_id, email, display_name,
      given_name, family_name, title, department, manager_subject, groups, roles, app_assignments, status, source,
      created_at, updated_at, deactivated_at, last_synced_at, sync_hash
    from jsonb_to_recordset(${payload}::jsonb) as r(employee_subject text, tenant_id text, idp text, external_id text,
      external_idp_id text, email text, display_name text, given_name text, family_name text, title text,
      department text, manager_subject text, groups jsonb, roles jsonb, app_assignments jsonb, status text,
      source text, created_at timestamptz, updated_at timestamptz, deactivated_at timestamptz, last_synced_at timestamptz,
      sync_hash text)
    on conflict (employee_subject) do update set
      external_idp_id = excluded.external_idp_id, email = excluded.email, display_name = excluded.display_name,
      given_name = excluded.given_name, family_name = excluded.family_name, title = excluded.title,
      department = excluded.department, manager_subject = excluded.manager_subject, groups = excluded.groups,
      roles = excluded.roles, app_assignments = excluded.app_assignments, status = excluded.status,
      source = excluded.source, updated_at = excluded.updated_at, deactivated_at = excluded.deactivated_at,
      last_synced_at = excluded.last_synced_at, sync_hash = excluded.sync_hash
    where directory_employees.tenant_id = excluded.tenant_id`);
}

/**
 * Absent from the snapshot: inactive, no memberships. Only these columns change, so the digest is
 * cleared (the next time the user appears it is rewritten in full).
 */
async function deactivate(tx: DbOrTx, tenantId: string, subjects: readonly string[], now: string): Promise<void> {
  await tx.execute(sql`
    update ${employees} set status = 'inactive', groups = '[]'::jsonb, updated_at = ${now}, last_synced_at = ${now},
      deactivated_at = ${now}, sync_hash = null
    where tenant_id = ${tenantId} and status = 'active'
      and employee_subject in (select jsonb_array_elements_text(${JSON.stringify(subjects)}::jsonb))`);
}

async function upsertGroups(tx: DbOrTx, rows: readonly GroupRow[]): Promise<void> {
  if (!rows.length) return;
  const payload = JSON.stringify(
    rows.map((r) => ({
      group_key: r.groupKey,
      tenant_id: r.tenantId,
      external_id: r.externalId,
      display_name: r.displayName,
      members: r.members,
      created_at: r.createdAt,
      updated_at: r.updatedAt,
      last_synced_at: r.lastSyncedAt,
    })),
  );
  await tx.execute(sql`
    insert into ${groups} (group_key, tenant_id, external_id, display_name, members, created_at, updated_at, last_synced_at)
    select group_key, tenant_id, external_id, display_name, members, created_at, updated_at, last_synced_at
    from jsonb_to_recordset(${payload}::jsonb) as r(group_key text, tenant_id text, external_id text,
      display_name text, members jsonb, created_at timestamptz, updated_at timestamptz, last_synced_at timestamptz)
    on conflict (group_key) do update set
      display_name = excluded.display_name, members = excluded.members, updated_at = excluded.updated_at,
      last_synced_at = excluded.last_synced_at
    where directory_groups.tenant_id = excluded.tenant_id`);
}
