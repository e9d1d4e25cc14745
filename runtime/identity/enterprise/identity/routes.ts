/**
 * Identity routes (SPEC 4.4 "Identity"): POST /v1/identity/resolve and GET /v1/identity/sessions.
 *
 * Resolution reads the directory through the tenant-scoped `directoryRepo` and writes ONLY the
 * `session` column of the employee row, in one statement guarded by `status = 'active'`: no other
 * column (status, email, groups, ...) is ever written here, so a stale token can neither change
 * directory truth nor reactivate anyone, and a sign-in racing a deactivating sync records nothing.
 */
import { subApi } from '../../../lib/api.js';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { and, eq, inArray } from 'drizzle-orm';
import type { Db } from '../../../store/factory.js';
import { employees, groups } from '../../../store/schema/directory.js';
import { body, invalid, json, Limit, TenantId } from '../directory/http.js';
import { directoryRepo, directoryTenants, type EmployeeRecord } from '../directory/repo.js';
import { employeeSubject } from '../tenant.js';
import { assess, effectiveOf, IDPS, parseIssuerMap, PRECEDENCE, providerSubject, routeClaims, type IssuerMap, type Session } from './resolve.js';

export interface IdentityRouteDeps {
  db: Db;
  now: () => number;
  /** IDP_ISSUER_MAP as given (unset: every issuer unknown). */
  issuerMap?: string;
}

const ConflictOut = z.object({ type: z.enum(['email_conflict', 'group_conflict', 'stale_token_inactive', 'unresolved']), detail: z.string() });
const SessionOut = z
  .object({
    last_seen_at: z.string(),
    idp_issuer: z.string().nullable(),
    token_email: z.string().nullable(),
    token_groups: z.array(z.string()),
    token_roles: z.array(z.string()),
    preferred_username: z.string().nullable(),
    conflicts: z.array(ConflictOut),
  })
  .openapi('IdentitySession');
const Effective = z.object({
  employee_subject: z.string(),
  email: z.string().nullable(),
  display_name: z.string().nullable(),
  department: z.string().nullable(),
  manager_subject: z.string().nullable(),
  groups: z.array(z.string()),
  roles: z.array(z.string()),
  status: z.string(),
  active: z.boolean(),
});
const ResolveIn = z
  .object({
    claims: z.record(z.string(), z.unknown()),
    idp: z.enum(IDPS).optional(),
    tenant: TenantId.optional(),
  })
  .openapi('IdentityResolveRequest');
const ResolveOut = z
  .object({
    resolved: z.boolean(),
    reason: z.string(),
    employee_subject: z.string().nullable(),
    idp: z.string().nullable(),
    tenant_id: z.string().nullable(),
    effective: Effective.nullable(),
    session: SessionOut.nullable(),
    session_recorded: z.boolean(),
    conflicts: z.array(ConflictOut),
    precedence: z.record(z.string(), z.string()),
  })
  .openapi('IdentityResolveResponse');
const SessionItem = z
  .object({
    employee_subject: z.string(),
    display_name: z.string().nullable(),
    tenant_id: z.string(),
    status: z.string(),
    email: z.string().nullable(),
    department: z.string().nullable(),
    session: z.record(z.string(), z.unknown()).nullable(),
  })
  .openapi('IdentitySessionItem');

type ResolveBody = z.infer<typeof ResolveOut>;

export async function resolveClaims(db: Db, map: IssuerMap, at: string, req: z.infer<typeof ResolveIn>): Promise<ResolveBody> {
  const unresolved = (reason: string, detail: string, part: Partial<ResolveBody> = {}): ResolveBody => ({
    resolved: false,
    reason,
    employee_subject: null,
    idp: null,
    tenant_id: null,
    effective: null,
    session: null,
    session_recorded: false,
    conflicts: [{ type: 'unresolved', detail }],
    precedence: PRECEDENCE,
    ...part,
  });
  const route = routeClaims(map, req.claims, { idp: req.idp, tenant: req.tenant });
  if (!route.ok) return unresolved(route.reason, route.detail);
  const where = { idp: route.idp, tenant_id: route.tenant };
  const ps = providerSubject(route.idp, req.claims);
  if (!ps) return unresolved('subject_claim_missing', `no ${route.idp === 'idp_a' ? 'oid (or sub)' : 'sub'} claim: cannot derive a stable subject`, where);
  const subject = employeeSubject(route.idp, route.tenant, ps.value);
  const repo = directoryRepo(db, route.tenant);
  let e = await repo.getEmployee(subject);
  if (!e) return unresolved('employee_not_found', `no directory employee ${subject} (no auto-provisioning)`, { ...where, employee_subject: subject });

  const names = await groupNames(db, route.tenant, e);
  let { conflicts, session } = assess(e, req.claims, names, at);
  let recorded = false;
  if (e.status === 'active') {
    recorded = await recordSession(db, route.tenant, subject, session);
    if (!recorded) {
      // Deactivated (or removed) between the read and the write: answer with what is true now.
      const now = await repo.getEmployee(subject);
      if (!now) return unresolved('employee_not_found', `no directory employee ${subject} (no auto-provisioning)`, { ...where, employee_subject: subject });
      e = now;
      ({ conflicts, session } = assess(e, req.claims, names, at));
    }
  }
  return {
    resolved: true,
    reason: e.status === 'active' ? 'resolved' : 'employee_inactive',
    employee_subject: subject,
    ...where,
    effective: effectiveOf(e),
    session,
    session_recorded: recorded,
    conflicts,
    precedence: PRECEDENCE,
  };
}

/** Display names of the employee's directory groups (tenant-scoped), to match name-valued token groups. */
async function groupNames(db: Db, tenant: string, e: EmployeeRecord): Promise<Map<string, string | null>> {
  if (!e.groups.length) return new Map();
  const rows = await db
    .select({ ext: groups.externalId, name: groups.displayName })
    .from(groups)
    .where(and(eq(groups.tenantId, tenant), inArray(groups.externalId, e.groups)));
  return new Map(rows.map((r) => [r.ext, r.name]));
}

/** Writes the session column only, only while the employee is active. */
async function recordSession(db: Db, tenant: string, subject: string, s: Session): Promise<boolean> {
  const rows = await db
    .update(employees)
    .set({ session: s as unknown as Record<string, unknown> })
    .where(and(eq(employees.tenantId, tenant), eq(employees.employeeSubject, subject), eq(employees.status, 'active')))
    .returning({ s: employees.employeeSubject });
  return rows.length === 1;
}

export function identityRoutes(deps: IdentityRouteDeps): OpenAPIHono {
  const app = subApi();
  const { db } = deps;
  const map = parseIssuerMap(deps.issuerMap);

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/identity/resolve',
      tags: ['identity'],
      summary: 'Resolve decoded login-token claims to a directory employee (no signature verification: trusted edge input)',
      request: { body: body(ResolveIn) },
      responses: { 200: json(ResolveOut, 'Resolution (resolved=false with an unresolved conflict when claims map to no employee)'), ...invalid },
    }),
    async (c) => c.json(await resolveClaims(db, map, new Date(deps.now()).toISOString(), c.req.valid('json')), 200),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/identity/sessions',
      tags: ['identity'],
      summary: 'Employees with a recorded sign-in, newest first (every tenant when `tenant` is absent)',
      request: {
        query: z.object({
          tenant: TenantId.optional().openapi({ param: { name: 'tenant', in: 'query' } }),
          limit: Limit(100, 1000)
            .optional()
            .openapi({ param: { name: 'limit', in: 'query' } }),
        }),
      },
      responses: { 200: json(z.array(SessionItem), 'Sessions'), ...invalid },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const limit = q.limit ?? 100;
      const tenants = q.tenant !== undefined ? [q.tenant] : await directoryTenants(db);
      const out: z.infer<typeof SessionItem>[] = [];
      for (const t of tenants) {
        for (const e of await directoryRepo(db, t).listSessions(limit)) {
          out.push({
            employee_subject: e.employee_subject,
            display_name: e.display_name,
            tenant_id: e.tenant_id,
            status: e.status,
            email: e.email,
            department: e.department,
            session: e.session,
          });
        }
      }
      const seen = (x: (typeof out)[number]) => String(x.session?.last_seen_at ?? '');
      out.sort((a, b) => (seen(a) < seen(b) ? 1 : seen(a) > seen(b) ? -1 : 0));
      return c.json(out.slice(0, limit), 200);
    },
  );
  return app;
}
