/** Task-scoped delegations (SPEC 3.3, 4.4): request, list, get, approve, deny, vc, check. */
import { subApi } from '../lib/api.js';
import { actorOf } from '../lib/api-auth.js';
import { randomUUID } from 'node:crypto';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { ApiError, conflict, notFound } from '../lib/errors.js';
import type { IdentityContext } from './context.js';
import { checkDelegation, type CheckQuery, type CheckVerdict } from './delegation-core.js';
import { INACTIVE_AGENT, type AgentStatus } from './enterprise/governance/model.js';
import { identityRepo, type DelegationRow } from './repo.js';
import {
  ApprovedSchema,
  ApproveSchema,
  body,
  CheckQuerySchema,
  CheckResponseSchema,
  DEFAULT_DELEGATION_TTL,
  DelegationRequestSchema,
  DelegationSchema,
  DenySchema,
  err,
  errors,
  json,
} from './schemas.js';
import { DELEGATION_TYPE, issueCredential } from './vc.js';

/** GET /v1/delegations/check's answer: an approved, unexpired, unrevoked delegation for `q`, if any. */
export async function delegationVerdict(ctx: IdentityContext, q: CheckQuery): Promise<CheckVerdict> {
  const repo = identityRepo(ctx.store);
  const rows = await repo.approvedFor(q.actor, q.task, q.action);
  const revoked = await repo.revokedAmong(rows.map((r) => r.vcJti).filter((j): j is string => !!j));
  return checkDelegation(rows, q, Math.floor(ctx.now() / 1000), (j) => revoked.has(j));
}

const IdParam = z.object({
  id: z
    .string()
    .min(1)
    .max(128)
    .openapi({ param: { name: 'id', in: 'path' } }),
});

export function delegationRecord(d: DelegationRow) {
  return {
    id: d.id,
    status: d.status,
    actorName: d.actorName,
    actorDid: d.actorDid,
    task: d.task,
    action: d.action,
    resource: d.resource,
    reason: d.reason,
    ttlSeconds: d.ttlSeconds,
    requestedAt: d.requestedAt,
    approver: d.approver,
    approvedAt: d.approvedAt,
    deniedAt: d.deniedAt,
    denyReason: d.denyReason,
    vcJti: d.vcJti,
    notAfter: d.notAfter,
  };
}

/** A suspended, quarantined or retired governed agent receives no delegation (SPEC 4.4): 409. */
async function inStanding(repo: ReturnType<typeof identityRepo>, agent: string): Promise<void> {
  const status = await repo.governanceStatus(agent);
  if (status !== undefined && INACTIVE_AGENT.has(status as AgentStatus)) {
    throw conflict('agent_not_in_standing', `agent ${agent} is ${status} (governance): it receives no delegation`);
  }
}

const notPending = (d: DelegationRow) => conflict('not_pending', `delegation ${d.id} is ${d.status}, not pending`);

export function delegationRoutes(ctx: IdentityContext): OpenAPIHono {
  const app = subApi();
  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/delegations/request',
      tags: ['delegations'],
      summary: 'Request a task-scoped delegation for a provisioned agent',
      request: { body: body(DelegationRequestSchema) },
      responses: {
        201: json(DelegationSchema, 'Created (pending)'),
        404: err('Unknown or unprovisioned agent'),
        409: err('The agent is suspended, quarantined or retired (governance)'),
        ...errors,
      },
    }),
    async (c) => {
      const b = c.req.valid('json');
      const repo = identityRepo(ctx.store);
      const agent = await repo.getAgent(b.actorName);
      if (!agent) throw notFound('agent', b.actorName);
      if (!agent.did) throw new ApiError(404, 'agent_not_provisioned', `agent ${JSON.stringify(b.actorName)} is not provisioned`);
      await inStanding(repo, agent.name);
      const row = await repo.insertDelegation({
        id: randomUUID(),
        status: 'pending',
        actorName: agent.name,
        actorDid: agent.did,
        task: b.task,
        action: b.action,
        resource: b.resource,
        reason: b.reason,
        ttlSeconds: b.ttlSeconds ?? DEFAULT_DELEGATION_TTL,
        requestedAt: new Date(ctx.now()).toISOString(),
      });
      return c.json(delegationRecord(row), 201);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/delegations',
      tags: ['delegations'],
      summary: 'All delegations, newest first',
      responses: { 200: json(z.array(DelegationSchema)), ...errors },
    }),
    async (c) => c.json((await identityRepo(ctx.store).listDelegations()).map(delegationRecord), 200),
  );

  // Declared before /{id} so "check" is never taken for an id.
  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/delegations/check',
      tags: ['delegations'],
      summary: 'Is there an approved, unexpired, unrevoked delegation for actor, task, action and resource (trailing /* glob)?',
      request: { query: CheckQuerySchema },
      responses: { 200: json(CheckResponseSchema), ...errors },
    }),
    async (c) => c.json(await delegationVerdict(ctx, c.req.valid('query')), 200),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/delegations/{id}',
      tags: ['delegations'],
      summary: 'One delegation',
      request: { params: IdParam },
      responses: { 200: json(DelegationSchema), 404: err('Unknown delegation'), ...errors },
    }),
    async (c) => {
      const { id } = c.req.valid('param');
      const d = await identityRepo(ctx.store).getDelegation(id);
      if (!d) throw notFound('delegation', id);
      return c.json(delegationRecord(d), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/delegations/{id}/approve',
      tags: ['delegations'],
      summary: 'Approve a pending delegation: issues the delegation VC bound to the actor DID, task, action and resource',
      request: { params: IdParam, body: body(ApproveSchema) },
      responses: { 200: json(ApprovedSchema), 404: err('Unknown delegation'), 409: err('Not pending, or the agent is not in standing'), ...errors },
    }),
    async (c) => {
      const { id } = c.req.valid('param');
      // With WRIT_API_AUTH=keys the approver is the authenticated caller, never the body's field.
      const approver = actorOf(c, c.req.valid('json').approver);
      const repo = identityRepo(ctx.store);
      // Read before the approving transaction (PGlite has one connection, which it holds).
      const asked = await repo.getDelegation(id);
      if (asked) await inStanding(repo, asked.actorName);
      const issuer = ctx.issuer();
      const nowSec = Math.floor(ctx.now() / 1000);
      // Signed inside the approving transaction, from the locked pending row, and answered only
      // once that transaction has committed (repo.approveDelegation).
      const done = await repo.approveDelegation(
        id,
        approver,
        async (d) => {
          const subjectDid = d.actorDid ?? `urn:agent:${encodeURIComponent(d.actorName)}`;
          const vc = await issueCredential(issuer, {
            subjectDid,
            type: DELEGATION_TYPE,
            claims: { delegationId: d.id, actorName: d.actorName, task: d.task, action: d.action, resource: d.resource, approver },
            ttlSeconds: d.ttlSeconds,
            nowSec,
            statusListUrl: `${ctx.settings.publicUrl}/status/default`,
          });
          return { jwt: vc.jwt, jti: vc.jti, exp: vc.exp, subjectDid };
        },
        ctx.now(),
      );
      if (!done) {
        // Unknown, or not pending (perhaps it lost a race with another approve/deny): say which.
        const now = await repo.getDelegation(id);
        throw now ? notPending(now) : notFound('delegation', id);
      }
      const { row } = done;
      return c.json({ id, status: 'approved' as const, vc: done.vc, vcJti: row.vcJti!, notAfter: row.notAfter! }, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/delegations/{id}/deny',
      tags: ['delegations'],
      summary: 'Deny a pending delegation',
      request: { params: IdParam, body: body(DenySchema) },
      responses: { 200: json(DelegationSchema), 404: err('Unknown delegation'), 409: err('Not pending'), ...errors },
    }),
    async (c) => {
      const { id } = c.req.valid('param');
      const given = c.req.valid('json');
      const b = { ...given, approver: actorOf(c, given.approver) };
      const repo = identityRepo(ctx.store);
      const row = await repo.denyDelegation(id, b, ctx.now());
      if (!row) {
        const now = await repo.getDelegation(id);
        throw now ? notPending(now) : notFound('delegation', id);
      }
      return c.json(delegationRecord(row), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/delegations/{id}/vc',
      tags: ['delegations'],
      summary: 'The delegation VC (JWT) of an approved delegation',
      request: { params: IdParam },
      responses: { 200: json(z.object({ vc: z.string() })), 404: err('Unknown delegation'), 409: err('Not approved'), ...errors },
    }),
    async (c) => {
      const { id } = c.req.valid('param');
      const d = await identityRepo(ctx.store).getDelegation(id);
      if (!d) throw notFound('delegation', id);
      if (d.status !== 'approved' || !d.vc) throw conflict('not_approved', `delegation ${id} is ${d.status}, not approved`);
      return c.json({ vc: d.vc }, 200);
    },
  );
  return app;
}
