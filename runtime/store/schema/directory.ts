/** Drizzle view of the directory tables (migration 0003_directory). */
import { bigserial, index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'string' });

export const employees = pgTable(
  'directory_employees',
  {
    employeeSubject: text('employee_subject').primaryKey(),
    tenantId: text('tenant_id').notNull(),
    idp: text('idp').notNull(),
    externalId: text('external_id').notNull(),
    externalIdpId: text('external_idp_id'),
    email: text('email'),
    displayName: text('display_name'),
    givenName: text('given_name'),
    familyName: text('family_name'),
    title: text('title'),
    department: text('department'),
    managerSubject: text('manager_subject'),
    groups: jsonb('groups').$type<string[]>().notNull(),
    roles: jsonb('roles').$type<string[]>().notNull(),
    appAssignments: jsonb('app_assignments').$type<string[]>().notNull(),
    status: text('status').$type<'active' | 'inactive'>().notNull(),
    source: text('source').notNull(),
    session: jsonb('session').$type<Record<string, unknown> | null>(),
    createdAt: ts('created_at').notNull(),
    updatedAt: ts('updated_at').notNull(),
    deactivatedAt: ts('deactivated_at'),
    /** Tokens issued at or before this are inactive (set when the row turns inactive; migration 0028). */
    tokensNotBefore: ts('tokens_not_before'),
    lastSyncedAt: ts('last_synced_at'),
    /** Digest of the snapshot-owned columns (directory sync only). */
    syncHash: text('sync_hash'),
  },
  (t) => [index('directory_employees_tenant').on(t.tenantId, t.status)],
);

export const groups = pgTable('directory_groups', {
  groupKey: text('group_key').primaryKey(),
  tenantId: text('tenant_id').notNull(),
  externalId: text('external_id').notNull(),
  displayName: text('display_name'),
  members: jsonb('members').$type<string[]>().notNull(),
  createdAt: ts('created_at').notNull(),
  updatedAt: ts('updated_at').notNull(),
  lastSyncedAt: ts('last_synced_at'),
});

export const syncRuns = pgTable('directory_sync_runs', {
  id: text('id').primaryKey(),
  seq: bigserial('seq', { mode: 'number' }),
  tenantId: text('tenant_id').notNull(),
  idp: text('idp').notNull(),
  startedAt: ts('started_at').notNull(),
  finishedAt: ts('finished_at'),
  status: text('status').$type<'ok' | 'partial'>().notNull(),
  counts: jsonb('counts').$type<Record<string, number>>().notNull(),
  errors: jsonb('errors').$type<{ resource_type: string; external_id: string; error: string }[]>().notNull(),
  conflicts: jsonb('conflicts').$type<{ type: string; subject: string; detail: string }[]>().notNull(),
  cascade: jsonb('cascade').$type<Record<string, unknown> | null>(),
});
