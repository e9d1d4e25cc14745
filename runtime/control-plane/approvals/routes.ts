/**
 * Egress approval routes on the control-plane management app (SPEC 4.3):
 *   GET  /v1/egress/requests?status=&limit=      newest first
 *   POST /v1/egress/requests/{id}/approve        {approver, digest?}
 *   POST /v1/egress/requests/{id}/deny           {approver, reason}
 * With WRIT_API_AUTH=keys the approver is the authenticated caller (lib/api-auth.ts), never the
 * body's `approver` (then optional and ignored), and an approval must name the request's `digest`
 * (as listed): it releases exactly the request the human saw. A request is decided once; an
 * expired one cannot be approved (409).
 * Errors follow the management app's shape `{error: string}` (validation adds `detail`):
 * 400 bad body or query, 404 unknown id, 409 not pending, 503 queue disabled (no forward proxy)
 * or store/audit unavailable.
 */
import type { Context, Hono } from 'hono';
import { z } from 'zod';
import { ApiError, zodDetail } from '../../lib/errors.js';
import { principalOf } from '../../lib/api-auth.js';
import { errMsg, logger } from '../../lib/log.js';
import type { ApprovalQueue } from './queue.js';
import { EGRESS_STATUSES, type EgressStatus } from './record.js';

const log = logger('approvals');

const Approver = z.string().trim().min(1, 'approver must not be empty').max(253);
const Digest = z.string().regex(/^[A-Za-z0-9_-]{43}$/, 'digest must be the request digest as listed');
export const ApproveBody = z.object({ approver: Approver.optional(), digest: Digest.optional() }).strict();
export const DenyBody = z.object({ approver: Approver.optional(), reason: z.string().trim().min(1, 'reason must not be empty').max(4096) }).strict();

/** The approver: the authenticated caller when auth is on, else the body's (required then, as SPEC 4.3 has it). */
function approverOf(c: Context, given: string | undefined): string | Response {
  const p = principalOf(c);
  if (p) return p.id;
  return given ?? c.json({ error: 'invalid body: approver: Required' }, 400);
}

export interface EgressRoutesDeps {
  /**
   * The queue, or a getter read on every request (the routes are mounted when the management app
   * is built, the queue starts later: see egress-gateway.ts). Undefined when the forward proxy
   * (and so the queue) is disabled: every route answers 503.
   */
  queue: ApprovalQueue | undefined | (() => ApprovalQueue | undefined);
}

const DISABLED = 'egress approval queue is disabled: the forward proxy runs only when AGENT_IDP_URL is set';

function fail(c: Context, e: unknown) {
  if (e instanceof ApiError) {
    const body: Record<string, unknown> = { error: e.message };
    if (e.extra.status) body.status = e.extra.status;
    return c.json(body, e.status);
  }
  log.error('egress queue operation failed', { err: errMsg(e) });
  return c.json({ error: 'egress queue store unavailable' }, 503);
}

async function body<T>(c: Context, schema: z.ZodType<T>): Promise<{ ok: true; value: T } | { ok: false; res: Response }> {
  let raw: unknown;
  try {
    raw = JSON.parse(await c.req.text()) as unknown;
  } catch (e) {
    return { ok: false, res: c.json({ error: `malformed JSON body: ${errMsg(e)}` }, 400) };
  }
  const r = schema.safeParse(raw);
  if (!r.success) {
    const detail = zodDetail(r.error, 'body');
    return {
      ok: false,
      res: c.json({ error: `invalid body: ${detail.map((d) => `${d.loc.slice(1).join('.') || 'body'}: ${d.msg}`).join('; ')}`, detail }, 400),
    };
  }
  return { ok: true, value: r.data };
}

export function registerEgressRoutes(app: Hono, deps: EgressRoutesDeps): void {
  const current = (): ApprovalQueue | undefined => (typeof deps.queue === 'function' ? deps.queue() : deps.queue);

  app.get('/v1/egress/requests', async (c) => {
    const queue = current();
    if (!queue) return c.json({ error: DISABLED }, 503);
    const status = c.req.query('status');
    const rawLimit = c.req.query('limit');
    if (status !== undefined && status !== '' && !(EGRESS_STATUSES as readonly string[]).includes(status)) {
      return c.json({ error: `status must be one of ${EGRESS_STATUSES.join(', ')} (got ${JSON.stringify(status)})` }, 400);
    }
    if (rawLimit !== undefined && (!/^\d+$/.test(rawLimit) || Number(rawLimit) < 1)) {
      return c.json({ error: `limit must be an integer >= 1 (got ${JSON.stringify(rawLimit)})` }, 400);
    }
    try {
      const list = await queue.list({
        status: status ? (status as EgressStatus) : undefined,
        limit: rawLimit === undefined ? undefined : Number(rawLimit),
      });
      return c.json(list);
    } catch (e) {
      return fail(c, e);
    }
  });

  app.post('/v1/egress/requests/:id/approve', async (c) => {
    const queue = current();
    if (!queue) return c.json({ error: DISABLED }, 503);
    const b = await body(c, ApproveBody);
    if (!b.ok) return b.res;
    const approver = approverOf(c, b.value.approver);
    if (typeof approver !== 'string') return approver;
    const id = c.req.param('id');
    try {
      // Bound to exactly the held request: its fields never change, so checking before the decision is exact.
      if (principalOf(c) && !b.value.digest) return c.json({ error: 'invalid body: digest: Required (the digest of the request being approved)' }, 400);
      if (b.value.digest) {
        const cur = await queue.get(id);
        if (cur && cur.digest !== b.value.digest)
          return c.json({ error: `digest does not match egress request ${id}: it is not the request that was shown` }, 409);
      }
      return c.json(await queue.approve(id, approver));
    } catch (e) {
      return fail(c, e);
    }
  });

  app.post('/v1/egress/requests/:id/deny', async (c) => {
    const queue = current();
    if (!queue) return c.json({ error: DISABLED }, 503);
    const b = await body(c, DenyBody);
    if (!b.ok) return b.res;
    const approver = approverOf(c, b.value.approver);
    if (typeof approver !== 'string') return approver;
    try {
      return c.json(await queue.deny(c.req.param('id'), approver, b.value.reason));
    } catch (e) {
      return fail(c, e);
    }
  });
}
