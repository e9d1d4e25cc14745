/**
 * Directory routes (SPEC 4.4): SCIM snapshot sync and tenant-scoped reads.
 *
 * Reads that name no `tenant` answer for every tenant: the list of tenants is read once and each
 * tenant's rows are then read through its own `directoryRepo`, so no single query ever spans
 * tenants. Reads by key derive the tenant from the key (subject `<idp>:<tenant>:<ext>`, group key
 * `<tenant>:<ext>`); an optional `tenant` that disagrees with the key is a 404.
 */
import { limitBody, slicedJsonBody, subApi } from '../../../lib/api.js';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { notFound } from '../../../lib/errors.js';
import type { Db } from '../../../store/factory.js';
import type { ChangeFeed } from '../../change-feed.js';
import { tenantOfGroupKey, tenantOfSubject } from '../tenant.js';
import { body, errorResponse, invalid, json, Limit, TenantId } from './http.js';
import { conflictsOfRows } from './conflicts.js';
import { directoryRepo, directoryTenants, type EmployeeRecord, type GroupRecord, type SyncRunRecord } from './repo.js';
import { ConflictSchema, EmployeeSchema, GroupSchema, SyncRequestSchema, SyncRunSchema } from './schemas.js';
import { syncDirectory, type CascadeFn, type SyncStage } from './sync.js';

/**
 * Body limit of POST /v1/directory/sync: a 100k-user snapshot of Entra-style resources is about
 * 80 MiB of JSON, so 256 MiB leaves headroom. Every other enterprise route keeps the API default.
 * NOTE: createApi() installs a global limit first; the server must allow this size on this path.
 */
export const SYNC_BODY_LIMIT = 256 * 1024 * 1024;

export interface DirectoryRouteDeps {
  db: Db;
  now: () => number;
  cascade?: CascadeFn;
  failpoint?: (stage: SyncStage) => void | Promise<void>;
  /** The change feed's barrier: a sync answers once every replica has what its cascade revoked. */
  changes?: Pick<ChangeFeed, 'settled'>;
}

/** Employees per page of `GET /v1/directory/employees` (a 40k-employee answer was 54 MB, built in one turn of the loop). */
const EMPLOYEE_PAGE = 1000;
const EMPLOYEE_PAGE_MAX = 5000;
const TenantQuery = z.object({ tenant: TenantId.optional().openapi({ param: { name: 'tenant', in: 'query' } }) });
const SubjectParam = z.object({
  subject: z
    .string()
    .min(1)
    .max(600)
    .openapi({ param: { name: 'subject', in: 'path' } }),
});
const GroupKeyParam = z.object({
  group_key: z
    .string()
    .min(1)
    .max(400)
    .openapi({ param: { name: 'group_key', in: 'path' } }),
});

/** Runs `read` for the named tenant, or for every tenant in name order when none is named. */
async function perTenant<T>(db: Db, tenant: string | undefined, read: (tenantId: string) => Promise<T[]>): Promise<T[]> {
  const tenants = tenant !== undefined ? [tenant] : await directoryTenants(db);
  const out: T[] = [];
  for (const t of tenants) out.push(...(await read(t)));
  return out;
}

export function directoryRoutes(deps: DirectoryRouteDeps): OpenAPIHono {
  const app = subApi();
  const { db } = deps;

  app.use(
    '/v1/directory/sync',
    limitBody(SYNC_BODY_LIMIT),
    // A 100k-user snapshot is ~90 MB: parsed and checked in slices, never in one block of the loop.
    slicedJsonBody(),
  );
  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/directory/sync',
      tags: ['directory'],
      summary: 'Reconcile a SCIM 2.0 snapshot for one tenant (one transaction; the revocation cascade runs in it)',
      request: { body: body(SyncRequestSchema) },
      responses: { 200: json(SyncRunSchema, 'The sync-run record with the cascade block'), 413: errorResponse('Body too large'), ...invalid },
    }),
    async (c) => {
      const b = c.req.valid('json');
      const run = await syncDirectory(
        { db, now: deps.now, cascade: deps.cascade, failpoint: deps.failpoint },
        { tenantId: b.tenantId, idp: b.idp, mode: b.mode, users: b.users, groups: b.groups },
      );
      await deps.changes?.settled();
      return c.json(run as z.infer<typeof SyncRunSchema>, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/directory/employees',
      tags: ['directory'],
      summary:
        'Employees, by subject; every tenant when `tenant` is absent. Pages of `limit` (default 1000): a `Link: <...>; rel="next"` header names the next page (`after` = the last subject of this one)',
      request: {
        query: TenantQuery.extend({
          status: z
            .enum(['active', 'inactive'])
            .optional()
            .openapi({ param: { name: 'status', in: 'query' } }),
          limit: Limit(EMPLOYEE_PAGE, EMPLOYEE_PAGE_MAX).openapi({ param: { name: 'limit', in: 'query' } }),
          after: z
            .string()
            .min(1)
            .max(600)
            .optional()
            .openapi({ param: { name: 'after', in: 'query' } }),
        }),
      },
      responses: { 200: json(z.array(EmployeeSchema), 'Employees'), ...invalid },
    }),
    async (c) => {
      const q = c.req.valid('query');
      // Tenant by tenant in order, each by subject: the cursor's tenant is where the page resumes.
      const from = q.after !== undefined ? tenantOfSubject(q.after) : undefined;
      const tenants = (q.tenant !== undefined ? [q.tenant] : await directoryTenants(db)).filter((t) => from === undefined || t >= from);
      const page: EmployeeRecord[] = [];
      for (const t of tenants) {
        const after = t === from ? q.after : undefined;
        page.push(...(await directoryRepo(db, t).listEmployees({ status: q.status, after, limit: q.limit + 1 - page.length })));
        if (page.length > q.limit) break;
      }
      if (page.length > q.limit) {
        page.length = q.limit;
        const next = new URLSearchParams();
        if (q.tenant !== undefined) next.set('tenant', q.tenant);
        if (q.status !== undefined) next.set('status', q.status);
        next.set('limit', String(q.limit));
        next.set('after', page[page.length - 1]!.employee_subject);
        c.header('Link', `</v1/directory/employees?${next}>; rel="next"`);
      }
      return c.json(page, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/directory/employees/{subject}',
      tags: ['directory'],
      summary: 'One employee by stable subject',
      request: { params: SubjectParam, query: TenantQuery },
      responses: { 200: json(EmployeeSchema, 'Employee'), 404: errorResponse('Unknown employee'), ...invalid },
    }),
    async (c) => {
      const { subject } = c.req.valid('param');
      const { tenant } = c.req.valid('query');
      const t = tenantOfSubject(subject);
      const e = t !== undefined && (tenant === undefined || tenant === t) ? await directoryRepo(db, t).getEmployee(subject) : undefined;
      if (!e) throw notFound('employee', subject);
      return c.json(e, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/directory/groups',
      tags: ['directory'],
      summary: 'Directory groups; every tenant when `tenant` is absent',
      request: { query: TenantQuery },
      responses: { 200: json(z.array(GroupSchema), 'Groups'), ...invalid },
    }),
    async (c) => {
      const { tenant } = c.req.valid('query');
      return c.json(await perTenant<GroupRecord>(db, tenant, (t) => directoryRepo(db, t).listGroups()), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/directory/groups/{group_key}',
      tags: ['directory'],
      summary: 'One group by key `<tenant>:<external_id>`',
      request: { params: GroupKeyParam, query: TenantQuery },
      responses: { 200: json(GroupSchema, 'Group'), 404: errorResponse('Unknown group'), ...invalid },
    }),
    async (c) => {
      const { group_key } = c.req.valid('param');
      const { tenant } = c.req.valid('query');
      const t = tenantOfGroupKey(group_key);
      const g = t !== undefined && (tenant === undefined || tenant === t) ? await directoryRepo(db, t).getGroup(group_key) : undefined;
      if (!g) throw notFound('group', group_key);
      return c.json(g, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/directory/syncs',
      tags: ['directory'],
      summary: 'Sync-run history, newest first (every tenant when `tenant` is absent)',
      request: {
        query: TenantQuery.extend({
          limit: Limit(100, 1000)
            .optional()
            .openapi({ param: { name: 'limit', in: 'query' } }),
        }),
      },
      responses: { 200: json(z.array(SyncRunSchema), 'Sync runs'), ...invalid },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const limit = q.limit ?? 100;
      const runs = await perTenant<SyncRunRecord>(db, q.tenant, (t) => directoryRepo(db, t).listSyncRuns(limit));
      // Across tenants: newest first by start time (per tenant the order is the insertion sequence).
      if (q.tenant === undefined) runs.sort((a, b) => (a.started_at < b.started_at ? 1 : a.started_at > b.started_at ? -1 : 0));
      return c.json(runs.slice(0, limit) as z.infer<typeof SyncRunSchema>[], 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/directory/conflicts',
      tags: ['directory'],
      summary: 'Manager conflicts of the tenant, computed now from the stored directory',
      request: { query: z.object({ tenant: TenantId.openapi({ param: { name: 'tenant', in: 'query', required: true } }) }) },
      responses: { 200: json(z.array(ConflictSchema), 'Conflicts'), ...invalid },
    }),
    async (c) => {
      const { tenant } = c.req.valid('query');
      const rows = await directoryRepo(db, tenant).loadEmployeeRows();
      return c.json(conflictsOfRows(tenant, rows), 200);
    },
  );
  return app;
}
