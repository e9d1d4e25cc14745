/**
 * Egress approval routes of the control-plane management app (SPEC 4.3), a zod-openapi sub-app
 * composed with `app.route('/', approvalRoutes(...))` like every other area; its schemas validate
 * the requests and generate `/openapi.json`:
 *   GET  /v1/egress/requests?status=&limit=      newest first
 *   POST /v1/egress/requests/{id}/approve        {approver, digest?}
 *   POST /v1/egress/requests/{id}/deny           {approver, reason}
 * With WRIT_API_AUTH=keys the approver is the authenticated caller (lib/api-auth.ts), never the
 * body's `approver` (then optional and ignored), and an approval must name the request's `digest`
 * (as listed): it releases exactly the request the human saw. A request is decided once; an
 * expired one cannot be approved (409).
 * Errors follow the management app's shape `{error: string}` (body validation adds `detail`):
 * 400 bad body or query, 404 unknown id, 409 not pending, 503 queue disabled (no forward proxy,
 * answered before anything is read) or store/audit unavailable.
 */
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import type { Context, MiddlewareHandler } from 'hono';
import type { ZodError } from 'zod';
import { ApiError, zodDetail } from '../../lib/errors.js';
import { principalOf } from '../../lib/api-auth.js';
import { errMsg, logger } from '../../lib/log.js';
import { mgmtOnError } from '../mgmt-errors.js';
import type { ApprovalQueue } from './queue.js';
import { EGRESS_STATUSES } from './record.js';

const log = logger('approvals');

const Approver = z.string().trim().min(1, 'approver must not be empty').max(253);
const Digest = z.string().regex(/^[A-Za-z0-9_-]{43}$/, 'digest must be the request digest as listed');
export const ApproveBody = z
  .object({
    approver: Approver.optional().openapi({ description: 'Who approves; required without WRIT_API_AUTH, ignored with it (the caller approves).' }),
    digest: Digest.optional().openapi({ description: 'The digest of the request as listed; required with WRIT_API_AUTH=keys.' }),
  })
  .strict()
  .openapi('EgressApproval');
export const DenyBody = z
  .object({
    approver: Approver.optional().openapi({ description: 'Who denies; required without WRIT_API_AUTH, ignored with it (the caller denies).' }),
    reason: z.string().trim().min(1, 'reason must not be empty').max(4096),
  })
  .strict()
  .openapi('EgressDenial');

const statusError = (input: unknown) => `status must be one of ${EGRESS_STATUSES.join(', ')} (got ${JSON.stringify(input)})`;
const limitError = (input: unknown) => `limit must be an integer >= 1 (got ${JSON.stringify(input)})`;
const ListQuery = z.object({
  // Empty means no filter.
  status: z.enum([...EGRESS_STATUSES, ''], { error: (iss) => statusError(iss.input) }).optional(),
  limit: z
    .string({ error: (iss) => limitError(iss.input) })
    .regex(/^0*[1-9]\d*$/, { error: (iss) => limitError(iss.input) })
    .optional()
    .openapi({ description: 'How many, newest first (capped by the queue).' }),
});
const IdParam = z.object({ id: z.string().openapi({ param: { name: 'id', in: 'path' } }) });

const EgressRequestSchema = z
  .object({
    id: z.string(),
    status: z.enum(EGRESS_STATUSES),
    actor: z.string(),
    actorDid: z.string(),
    target: z.string(),
    service: z.string().openapi({ description: '`external` or a registry name.' }),
    action: z.string(),
    resource: z.string(),
    reason: z.string(),
    requestedAt: z.string(),
    expiresAt: z.string(),
    approver: z.string().nullable(),
    decidedAt: z.string().nullable(),
    denyReason: z.string().nullable(),
    held: z.boolean().openapi({ description: 'A connection is waiting on it.' }),
    usedAt: z.string().nullable().openapi({ description: 'When the decision reached the agent.' }),
    digest: z.string().openapi({ description: 'SHA-256 (base64url) of exactly what is held; an approval naming it releases only this request.' }),
  })
  .openapi('EgressRequest');
const Err = z.object({ error: z.string() });
const BodyErr = z.object({ error: z.string(), detail: z.array(z.any()).optional() });
const Decided = z.object({ error: z.string(), status: z.enum(EGRESS_STATUSES).optional() });

const json = <T extends z.ZodType>(schema: T, description: string) => ({ content: { 'application/json': { schema } }, description });
const decidedResponses = {
  200: json(EgressRequestSchema, 'The request as decided.'),
  400: json(BodyErr, 'Bad body.'),
  404: json(Err, 'No such request.'),
  409: json(Decided, 'Not pending (decided, expired), or another request digest.'),
  503: json(Err, 'Queue disabled (no forward proxy), or its store or audit log unavailable.'),
};

/** The queue, or a getter read on every request (the gateway starts the queue after the app is built). */
export type QueueSource = ApprovalQueue | undefined | (() => ApprovalQueue | undefined);

export interface ApprovalRoutesDeps {
  /** Undefined when the forward proxy (and so the queue) is disabled: every route answers 503. */
  queue: QueueSource;
}

const DISABLED = 'egress approval queue is disabled: the forward proxy runs only when AGENT_IDP_URL is set';

/** Validation answers as these routes always gave them: `invalid body: <field>: <message>` with detail, a query's own message. */
function approvalsHook(result: { success: boolean; error?: unknown; target: string }, c: Context) {
  if (result.success) return undefined;
  const err = result.error as ZodError;
  if (result.target !== 'json') return c.json({ error: err.issues.map((i) => i.message).join('; ') }, 400);
  const detail = zodDetail(err, 'body');
  return c.json({ error: `invalid body: ${detail.map((d) => `${d.loc.slice(1).join('.') || 'body'}: ${d.msg}`).join('; ')}`, detail }, 400);
}

/** The queue's refusal (its own message: closed, audit log unavailable) or a store failure (logged, never answered): 503. */
function unavailable(c: Context, e: unknown) {
  if (e instanceof ApiError) return c.json({ error: e.message }, 503);
  log.error('egress queue operation failed', { err: errMsg(e) });
  return c.json({ error: 'egress queue store unavailable' }, 503);
}

/** A decision the queue refused: 404 unknown id, 409 not pending (with the status it has); else unavailable. */
function fail(c: Context, e: unknown) {
  if (e instanceof ApiError && (e.status === 404 || e.status === 409)) {
    const body: { error: string; status?: (typeof EGRESS_STATUSES)[number] } = { error: e.message };
    if (e.extra.status) body.status = e.extra.status as (typeof EGRESS_STATUSES)[number];
    return c.json(body, e.status);
  }
  return unavailable(c, e);
}

/** The approver: the authenticated caller when auth is on, else the body's (required then, as SPEC 4.3 has it). */
function approverOf(c: Context, given: string | undefined): string | undefined {
  return principalOf(c)?.id ?? given;
}

const NO_APPROVER = { error: 'invalid body: approver: Required' };

export function approvalRoutes(deps: ApprovalRoutesDeps): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: approvalsHook });
  // A body that is not JSON keeps the management app's `{error}` shape, mounted or alone.
  app.onError(mgmtOnError);
  const current = (): ApprovalQueue | undefined => (typeof deps.queue === 'function' ? deps.queue() : deps.queue);
  // Before any validation: a disabled queue is the answer whatever was sent.
  const enabled: MiddlewareHandler = async (c, next) => (current() ? next() : c.json({ error: DISABLED }, 503));
  const queueOf = (): ApprovalQueue => current()!;

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/egress/requests',
      middleware: [enabled],
      request: { query: ListQuery },
      responses: {
        200: json(z.array(EgressRequestSchema), 'Egress approval requests, newest first.'),
        400: json(Err, 'Bad status or limit.'),
        503: json(Err, 'Queue disabled, or its store unavailable.'),
      },
    }),
    async (c) => {
      const q = c.req.valid('query');
      try {
        return c.json(await queueOf().list({ status: q.status || undefined, limit: q.limit === undefined ? undefined : Number(q.limit) }), 200);
      } catch (e) {
        return unavailable(c, e);
      }
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/egress/requests/{id}/approve',
      middleware: [enabled],
      request: { params: IdParam, body: { content: { 'application/json': { schema: ApproveBody } }, required: true } },
      responses: decidedResponses,
    }),
    async (c) => {
      const b = c.req.valid('json');
      const approver = approverOf(c, b.approver);
      if (approver === undefined) return c.json(NO_APPROVER, 400);
      const { id } = c.req.valid('param');
      const queue = queueOf();
      try {
        // Bound to exactly the held request: its fields never change, so checking before the decision is exact.
        if (principalOf(c) && !b.digest) return c.json({ error: 'invalid body: digest: Required (the digest of the request being approved)' }, 400);
        if (b.digest) {
          const cur = await queue.get(id);
          if (cur && cur.digest !== b.digest) return c.json({ error: `digest does not match egress request ${id}: it is not the request that was shown` }, 409);
        }
        return c.json(await queue.approve(id, approver), 200);
      } catch (e) {
        return fail(c, e);
      }
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/egress/requests/{id}/deny',
      middleware: [enabled],
      request: { params: IdParam, body: { content: { 'application/json': { schema: DenyBody } }, required: true } },
      responses: decidedResponses,
    }),
    async (c) => {
      const b = c.req.valid('json');
      const approver = approverOf(c, b.approver);
      if (approver === undefined) return c.json(NO_APPROVER, 400);
      try {
        return c.json(await queueOf().deny(c.req.valid('param').id, approver, b.reason), 200);
      } catch (e) {
        return fail(c, e);
      }
    },
  );
  return app;
}
