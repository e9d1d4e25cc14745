/** zod schemas of the directory API (SPEC 2.7, 4.4): they validate requests and document responses. */
import { z } from '@hono/zod-openapi';
import { TenantId } from './http.js';

export const SyncRequestSchema = z
  .object({
    tenantId: TenantId,
    idp: z.enum(['idp_a', 'idp_b']).default('idp_a'),
    mode: z.enum(['snapshot']).default('snapshot').openapi({ description: 'Only full snapshots are reconciled.' }),
    // Required: an omitted list must never read as "everyone left the company".
    users: z.array(z.unknown()).openapi({ description: 'Raw SCIM 2.0 User resources. Absent users are deactivated.' }),
    groups: z
      .array(z.unknown())
      .optional()
      .openapi({ description: 'Raw SCIM 2.0 Group resources. When omitted, groups and memberships are left as they are.' }),
  })
  .openapi('DirectorySyncRequest');

const ts = z.string().nullable();

export const EmployeeSchema = z
  .object({
    employee_subject: z.string(),
    idp: z.string(),
    tenant_id: z.string(),
    external_id: z.string(),
    external_idp_id: z.string().nullable(),
    email: z.string().nullable(),
    display_name: z.string().nullable(),
    given_name: z.string().nullable(),
    family_name: z.string().nullable(),
    title: z.string().nullable(),
    department: z.string().nullable(),
    manager_subject: z.string().nullable(),
    groups: z.array(z.string()),
    roles: z.array(z.string()),
    app_assignments: z.array(z.string()),
    status: z.enum(['active', 'inactive']),
    active: z.boolean(),
    source: z.string(),
    created_at: z.string(),
    updated_at: z.string(),
    deactivated_at: ts,
    last_synced_at: ts,
    session: z.record(z.string(), z.unknown()).nullable(),
  })
  .openapi('Employee');

export const GroupSchema = z
  .object({
    group_key: z.string(),
    tenant_id: z.string(),
    external_id: z.string(),
    display_name: z.string().nullable(),
    members: z.array(z.string()),
    created_at: z.string(),
    updated_at: z.string(),
    last_synced_at: ts,
  })
  .openapi('DirectoryGroup');

export const ConflictSchema = z
  .object({ type: z.enum(['manager_missing', 'manager_inactive']), subject: z.string(), detail: z.string() })
  .openapi('DirectoryConflict');

export const SyncErrorSchema = z.object({ resource_type: z.enum(['User', 'Group']), external_id: z.string(), error: z.string() });

export const SyncRunSchema = z
  .object({
    id: z.string(),
    tenant_id: z.string(),
    idp: z.string(),
    started_at: z.string(),
    finished_at: ts,
    status: z.enum(['ok', 'partial']),
    counts: z.record(z.string(), z.number()),
    errors: z.array(SyncErrorSchema),
    conflicts: z.array(ConflictSchema),
    cascade: z.record(z.string(), z.unknown()).nullable(),
  })
  .openapi('DirectorySyncRun');
