/**
 * POST /v1/authority/preview (SPEC 2.11, 4.6): read-only eligibility. The subject is a stable
 * subject, an employee (external) id, an email or a display name; each kind is tried in that
 * order across the named tenant (or every tenant, one tenant-scoped query each), and the first
 * kind with any match decides: two or more matches is reported as ambiguous, never guessed.
 * Nothing is written.
 */
import { subApi } from '../../../lib/api.js';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { and, eq, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../../../store/factory.js';
import { employees } from '../../../store/schema/directory.js';
import { body, invalid, json, TenantId } from '../directory/http.js';
import { directoryRepo, directoryTenants, employeeOut, type EmployeeRecord } from '../directory/repo.js';
import { groupKeyIn } from '../governance/directory-view.js';
import { governanceRepo } from '../governance/repo.js';
import { isTenantId, tenantOfSubject } from '../tenant.js';
import { ACTIONS, decide, denyAll, type AgentFact } from './decide.js';

export interface PreviewRouteDeps {
  db: Db;
  /** IDP_AUDIT_ROLES: comma-separated roles that see audit previews. */
  auditRoles: string;
}

const PreviewIn = z
  .object({
    subject: z.string().trim().min(1).max(600),
    scenario: z.string().min(1).max(300).optional(),
    actions: z.array(z.enum(ACTIONS)).max(5).optional(),
    /** Extension: limit the subject search to one tenant. */
    tenant: TenantId.optional(),
  })
  .openapi('AuthorityPreviewRequest');
const ResultOut = z.object({ action: z.string(), eligible: z.boolean(), reason: z.string(), note: z.string() });
const PreviewOut = z
  .object({
    mode: z.string(),
    kind: z.string(),
    subject: z.string(),
    scenario: z.string().optional(),
    scenarioKnown: z.boolean(),
    principalFound: z.boolean(),
    lifecycleState: z.string().optional(),
    employeeSubject: z.string().optional(),
    candidates: z.array(z.string()).optional(),
    results: z.array(ResultOut),
  })
  .openapi('AuthorityPreviewResponse');

type Lookup = { kind: 'found'; e: EmployeeRecord } | { kind: 'none' } | { kind: 'ambiguous'; candidates: string[] };

const looksLikeSubject = (s: string) => /^idp_[ab]:/.test(s) && s.split(':').length >= 3;

async function findPrincipal(db: Db, ref: string, tenant?: string): Promise<Lookup> {
  if (looksLikeSubject(ref)) {
    const t = tenantOfSubject(ref);
    if (!t || !isTenantId(t) || (tenant !== undefined && tenant !== t)) return { kind: 'none' };
    const e = await directoryRepo(db, t).getEmployee(ref);
    return e ? { kind: 'found', e } : { kind: 'none' };
  }
  const tenants = tenant !== undefined ? [tenant] : await directoryTenants(db);
  const kinds: SQL[] = [
    eq(employees.externalId, ref),
    eq(sql`lower(${employees.email})`, ref.toLowerCase()),
    eq(sql`lower(${employees.displayName})`, ref.toLowerCase()),
  ];
  for (const where of kinds) {
    const hits: EmployeeRecord[] = [];
    for (const t of tenants) {
      const rows = await db
        .select()
        .from(employees)
        .where(and(eq(employees.tenantId, t), where))
        .limit(10);
      hits.push(...rows.map(employeeOut));
    }
    if (hits.length === 1) return { kind: 'found', e: hits[0]! };
    if (hits.length > 1) return { kind: 'ambiguous', candidates: hits.map((h) => h.employee_subject).sort() };
  }
  return { kind: 'none' };
}

/** The principal's relation to every non-retired governed agent of their tenant (governance repo, read only). */
async function agentFacts(db: Db, e: EmployeeRecord): Promise<AgentFact[]> {
  const t = e.tenant_id;
  const dir = directoryRepo(db, t);
  const chains = new Map<string, Promise<EmployeeRecord[]>>();
  const out: AgentFact[] = [];
  for (const a of await governanceRepo(db, t).listAgents()) {
    if (a.status === 'retired') continue;
    let managerLevel = 0;
    let inOwningTeam = false;
    if (a.ownerType === 'employee') {
      if (a.ownerRef !== e.employee_subject) {
        let p = chains.get(a.ownerRef);
        if (!p) chains.set(a.ownerRef, (p = dir.managerChain(a.ownerRef)));
        managerLevel = (await p).findIndex((m) => m.employee_subject === e.employee_subject) + 1;
      }
    } else {
      const key = groupKeyIn(t, a.ownerRef);
      inOwningTeam = key !== undefined && e.groups.includes(key.slice(t.length + 1));
    }
    out.push({
      name: a.agentName,
      status: a.status,
      isOwner: a.ownerType === 'employee' && a.ownerRef === e.employee_subject,
      inOwningTeam,
      managerLevel,
      isSponsor: a.businessSponsor === e.employee_subject,
    });
  }
  return out;
}

export function previewRoutes(deps: PreviewRouteDeps): OpenAPIHono {
  const app = subApi();
  const { db } = deps;
  const auditRoles = deps.auditRoles
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/authority/preview',
      tags: ['authority'],
      summary: 'Read-only design-time eligibility for own, sponsor, approve, operate, audit (not an enforcement decision)',
      request: { body: body(PreviewIn) },
      responses: { 200: json(PreviewOut, 'Eligibility per action with reasons'), ...invalid },
    }),
    async (c) => {
      const b = c.req.valid('json');
      const actions = b.actions?.length ? [...new Set(b.actions)] : [...ACTIONS];
      const base = { mode: 'authority-preview', kind: 'eligibility', subject: b.subject, ...(b.scenario !== undefined ? { scenario: b.scenario } : {}) };
      const found = await findPrincipal(db, b.subject, b.tenant);
      if (found.kind === 'ambiguous') {
        return c.json(
          {
            ...base,
            scenarioKnown: b.scenario === undefined,
            principalFound: false,
            candidates: found.candidates,
            results: denyAll(
              actions,
              'principal_ambiguous',
              `${JSON.stringify(b.subject)} matches ${found.candidates.length} employees; name one by stable subject.`,
            ),
          },
          200,
        );
      }
      if (found.kind === 'none') {
        return c.json(
          {
            ...base,
            scenarioKnown: b.scenario === undefined,
            principalFound: false,
            results: denyAll(actions, 'principal_not_found', `No directory employee matches ${JSON.stringify(b.subject)}.`),
          },
          200,
        );
      }
      const e = found.e;
      const agents = await agentFacts(db, e);
      const who = { ...base, principalFound: true, lifecycleState: e.status, employeeSubject: e.employee_subject };
      let scenarioAgent: AgentFact | undefined;
      if (b.scenario !== undefined) {
        const name = b.scenario.startsWith('agent:') ? b.scenario.slice(6) : undefined;
        scenarioAgent = name !== undefined ? agents.find((a) => a.name === name) : undefined;
        if (!scenarioAgent) {
          return c.json(
            {
              ...who,
              scenarioKnown: false,
              results: denyAll(
                actions,
                'scenario_unknown',
                `Scenario ${JSON.stringify(b.scenario)} is not known (supported: agent:<governed agent name> of ${e.tenant_id}, not retired).`,
              ),
            },
            200,
          );
        }
      }
      const results = decide(
        actions,
        { subject: e.employee_subject, active: e.status === 'active', roles: e.roles, groups: e.groups, agents, scenarioAgent },
        auditRoles,
      );
      return c.json({ ...who, scenarioKnown: true, results }, 200);
    },
  );
  return app;
}
