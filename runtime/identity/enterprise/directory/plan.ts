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
import type { EmployeeRow, GroupRow, SyncError, Conflict } from './repo.js';
import type { Parsed, ScimUser } from './scim.js';
import { stagePlan } from './plan-stage.js';

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

/** An employee row as written by the sync: every column except `session` (sync never sets it) and `tokens_not_before` (the database's, migration 0028). */
export type EmployeeWrite = Omit<EmployeeRow, 'session' | 'tokensNotBefore'> & { syncHash: string };

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

/** The plan of a sync from the full current state (`stagePlan` in plan-stage.ts). */
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
