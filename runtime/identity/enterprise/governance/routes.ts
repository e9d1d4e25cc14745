/**
 * Governance routes (SPEC 4.4): governed agents, issues, summary, authority delegations, the
 * on-demand revocation cascade and the revocation log. Handlers are thin: zod validates (422
 * {detail}), the service functions decide and write, ApiErrors become {error:{code,message}}.
 */
import { actorOf, applierOf, mayApplyAs, principalOf, producerScope } from '../../../lib/api-auth.js';
import { subApi } from '../../../lib/api.js';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { errorResponse, invalid, json, body, Limit } from '../directory/http.js';
import { getAgent, listAgents, registerAgent, transferOwnership, transitionAgent, updateAgentFields, type GovDeps } from './agents.js';
import { applyGoverned } from './apply.js';
import { forbidden } from '../../../lib/errors.js';
import { cascadeNow, getDelegation, grantDelegation, listDelegations, revocationLog, revokeDelegation, usable } from './delegations.js';
import { AGENT_STATUSES, DELEGATION_STATUSES } from './model.js';
import { listIssues, summary } from './reports.js';
import {
  AgentRecordSchema,
  CascadeCountsSchema,
  DelegationRecordSchema,
  GovAgentName,
  GovernedApplyResultSchema,
  GovernedApplySchema,
  GrantSchema,
  IdParam,
  IssueSchema,
  LogRowSchema,
  NameParam,
  q,
  RegisterSchema,
  RevokeSchema,
  SummarySchema,
  TenantQuery,
  TransferSchema,
  TransitionSchema,
  UpdateSchema,
  UsableSchema,
} from './schemas.js';

type AgentOut = z.infer<typeof AgentRecordSchema>;
type DelegationOut = z.infer<typeof DelegationRecordSchema>;

export function governanceRoutes(deps: GovDeps): OpenAPIHono {
  const app = subApi();
  const tags = ['governance'];
  const authority = ['authority delegations'];

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/governance/agents',
      tags,
      summary: 'Register a governed agent (starts draft; 400 for an unknown or cross-tenant owner)',
      request: { body: body(RegisterSchema) },
      responses: {
        201: json(AgentRecordSchema, 'Registered'),
        400: errorResponse('Unknown or cross-tenant owner or sponsor'),
        409: errorResponse('Name taken'),
        ...invalid,
      },
    }),
    // createdBy and a move's `by` are the producer's stated names (the operator finds the agents it
    // created, and tells its own moves from a human's hold, by them); not the authenticated caller.
    async (c) => c.json((await registerAgent(deps, c.req.valid('json'))) as AgentOut, 201),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/governance/agents',
      tags,
      summary: 'Governed agents with live owner health (every tenant when `tenant` is absent)',
      request: { query: TenantQuery.extend({ status: q(z.enum(AGENT_STATUSES).optional(), 'status') }) },
      responses: { 200: json(z.array(AgentRecordSchema), 'Governed agents'), ...invalid },
    }),
    async (c) => c.json((await listAgents(deps, c.req.valid('query'))) as AgentOut[], 200),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/governance/agents/{name}',
      tags,
      summary: 'One governed agent',
      request: { params: NameParam, query: TenantQuery },
      responses: { 200: json(AgentRecordSchema, 'Governed agent'), 404: errorResponse('Unknown agent'), ...invalid },
    }),
    async (c) => c.json((await getAgent(deps, c.req.valid('param').name, c.req.valid('query').tenant)) as AgentOut, 200),
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/governance/agents/{name}/transition',
      tags,
      summary: 'Manual lifecycle move (SPEC 3.1); responds with the updated agent',
      request: { params: NameParam, query: TenantQuery, body: body(TransitionSchema) },
      responses: {
        200: json(AgentRecordSchema, 'Moved'),
        404: errorResponse('Unknown agent'),
        409: errorResponse('bad_transition, or activation_blocked with `blockers`'),
        ...invalid,
      },
    }),
    async (c) => {
      const b = c.req.valid('json');
      return c.json(
        (await transitionAgent(deps, c.req.valid('param').name, b.status, b.by ?? principalOf(c)?.id, c.req.valid('query').tenant)) as AgentOut,
        200,
      );
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/governance/agents/{name}/transfer-ownership',
      tags,
      summary: 'Transfer ownership to an owner that resolves in the tenant and is active',
      request: { params: NameParam, query: TenantQuery, body: body(TransferSchema) },
      responses: {
        200: json(AgentRecordSchema, 'Transferred'),
        400: errorResponse('New owner unresolved, cross-tenant or inactive'),
        404: errorResponse('Unknown agent'),
        409: errorResponse('Agent retired'),
        ...invalid,
      },
    }),
    async (c) => {
      const b = c.req.valid('json');
      return c.json(
        (await transferOwnership(deps, c.req.valid('param').name, { ...b, by: b.by ?? principalOf(c)?.id }, c.req.valid('query').tenant)) as AgentOut,
        200,
      );
    },
  );

  app.openapi(
    createRoute({
      method: 'patch',
      path: '/v1/governance/agents/{name}',
      tags,
      summary: 'Update owner, team, sponsor, risk tier, runtime: one history entry per changed field, by the caller; nothing changed writes nothing',
      request: { params: NameParam, query: TenantQuery, body: body(UpdateSchema) },
      responses: {
        200: json(AgentRecordSchema, 'Updated (or unchanged)'),
        400: errorResponse('Owner, team or sponsor unresolved or cross-tenant; new owner inactive'),
        404: errorResponse('Unknown agent'),
        409: errorResponse('Agent retired'),
        ...invalid,
      },
    }),
    async (c) => {
      const { by, ...patch } = c.req.valid('json');
      const name = c.req.valid('param').name;
      return c.json((await updateAgentFields(deps, name, patch, actorOf(c, by) ?? 'unknown', c.req.valid('query').tenant)) as AgentOut, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/governance/agents/apply',
      tags,
      summary:
        "A producer's whole desired set (the registry's apply model): register, update, walk SPEC 3.1, retire what it manages and no longer declares; unchanged writes nothing",
      request: { body: body(GovernedApplySchema) },
      responses: {
        200: json(GovernedApplyResultSchema, 'Each declared agent with its outcome, and the agents retired'),
        403: errorResponse('With auth on: applying as an owner needs the scope `governance:owner:<owner>`'),
        409: errorResponse('An agent declared twice, or registered concurrently (apply again)'),
        ...invalid,
      },
    }),
    async (c) => {
      const b = c.req.valid('json');
      if (!mayApplyAs(c, 'governance', b.owner))
        throw forbidden('forbidden', `applying as owner ${JSON.stringify(b.owner)} needs the scope ${producerScope('governance', b.owner)} (or admin)`);
      return c.json(await applyGoverned(deps, b.owner, b.agents, applierOf(c, b.owner)), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/governance/issues',
      tags,
      summary: 'Ownership and completeness issues, computed now (status = the agent status)',
      request: { query: TenantQuery },
      responses: { 200: json(z.array(IssueSchema), 'Issues'), ...invalid },
    }),
    async (c) => c.json(await listIssues(deps, c.req.valid('query').tenant), 200),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/governance/summary',
      tags,
      summary: 'Fleet summary for the portal: totals, posture buckets, by owner, by department',
      request: { query: TenantQuery },
      responses: { 200: json(SummarySchema, 'Summary'), ...invalid },
    }),
    async (c) => c.json(await summary(deps, c.req.valid('query').tenant), 200),
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/authority/delegations',
      tags: authority,
      summary: 'Grant an authority delegation (an authorization decision: 403 with the decision when denied)',
      request: { body: body(GrantSchema) },
      responses: {
        201: json(DelegationRecordSchema, 'Granted (active)'),
        400: errorResponse('approverRef and grantedBy disagree'),
        403: errorResponse('Denied; `policy_decision` lists the checks'),
        404: errorResponse('Unknown agent in the tenant'),
        ...invalid,
      },
    }),
    async (c) => c.json((await grantDelegation(deps, c.req.valid('json'), principalOf(c))) as DelegationOut, 201),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/authority/delegations',
      tags: authority,
      summary: 'Authority delegations, newest first',
      request: {
        query: TenantQuery.extend({
          agent: q(GovAgentName.optional(), 'agent'),
          status: q(z.enum(DELEGATION_STATUSES).optional(), 'status'),
        }),
      },
      responses: { 200: json(z.array(DelegationRecordSchema), 'Delegations'), ...invalid },
    }),
    async (c) => c.json((await listDelegations(deps, c.req.valid('query'))) as DelegationOut[], 200),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/authority/delegations/{id}',
      tags: authority,
      summary: 'One authority delegation',
      request: { params: IdParam, query: TenantQuery },
      responses: { 200: json(DelegationRecordSchema, 'Delegation'), 404: errorResponse('Unknown delegation'), ...invalid },
    }),
    async (c) => c.json((await getDelegation(deps, c.req.valid('param').id, c.req.valid('query').tenant)) as DelegationOut, 200),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/authority/delegations/{id}/usable',
      tags: authority,
      summary: 'Whether the delegation may be used now (active, unexpired, agent active)',
      request: { params: IdParam, query: TenantQuery },
      responses: { 200: json(UsableSchema, 'Usability'), 404: errorResponse('Unknown delegation'), ...invalid },
    }),
    async (c) => c.json(await usable(deps, c.req.valid('param').id, c.req.valid('query').tenant), 200),
  );

  // Every revoke field is optional: an empty body (with or without a JSON content type) means {}.
  app.use('/v1/authority/delegations/:id/revoke', async (c, next) => {
    if (c.req.method === 'POST' && !(await c.req.raw.clone().text()).trim()) {
      const headers = new Headers(c.req.raw.headers);
      headers.set('content-type', 'application/json');
      headers.delete('content-length');
      c.req.raw = new Request(c.req.raw.url, { method: 'POST', headers, body: '{}' });
    }
    await next();
  });
  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/authority/delegations/{id}/revoke',
      tags: authority,
      summary: 'Revoke a live delegation (reason defaults to manual_admin_revocation)',
      request: { params: IdParam, query: TenantQuery, body: { required: false, content: { 'application/json': { schema: RevokeSchema } } } },
      responses: {
        200: json(DelegationRecordSchema, 'Revoked'),
        404: errorResponse('Unknown delegation'),
        409: errorResponse('Not live'),
        ...invalid,
      },
    }),
    async (c) => {
      const b = c.req.valid('json') ?? {};
      return c.json((await revokeDelegation(deps, c.req.valid('param').id, { ...b, by: actorOf(c, b.by) }, c.req.valid('query').tenant)) as DelegationOut, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/revocation/cascade',
      tags: ['revocation'],
      summary: 'Run the revocation cascade now (source admin); every tenant when `tenant` is absent',
      request: { query: TenantQuery.extend({ by: q(z.string().min(1).max(600).optional(), 'by') }) },
      responses: { 200: json(CascadeCountsSchema, 'What moved'), ...invalid },
    }),
    async (c) => {
      const { tenant, by } = c.req.valid('query');
      return c.json(await cascadeNow(deps, tenant, actorOf(c, by) ?? 'admin'), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/revocation/log',
      tags: ['revocation'],
      summary: 'Revocation-log rows, newest first',
      request: { query: TenantQuery.extend({ limit: q(Limit(500, 5000).optional(), 'limit') }) },
      responses: { 200: json(z.array(LogRowSchema), 'Log rows'), ...invalid },
    }),
    async (c) => {
      const { tenant, limit } = c.req.valid('query');
      return c.json(await revocationLog(deps, tenant, limit ?? 500), 200);
    },
  );
  return app;
}
