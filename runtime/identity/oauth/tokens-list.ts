/**
 * `GET /v1/tokens`: the access tokens issued here, as recorded (migration 0025: never a token's
 * value), newest first, for the portal's tokens view beside the delegations (issue 43 item 8).
 * A management read (`identity:read`), scoped to one tenant (`tenant`, default `default`: every
 * statement carries it), filtered by `agent` or `delegation`, in pages of `limit` (default 100,
 * at most 500) whose `next` cursor names where the next page starts.
 *
 * `status`: `revoked` when the token's jti or its delegation VC's jti is on a revocation list
 * (`revokedBy` says which), else `expired` past its `exp`, else `active`. A token whose agent lost
 * its standing or whose human was deactivated is refused where it is used (and by introspection)
 * without being listed as revoked here: those show on the agent's and the directory's views.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { and, desc, eq, lt, or, type SQL } from 'drizzle-orm';
import { alias } from 'drizzle-orm/pg-core';
import { subApi } from '../../lib/api.js';
import { oauthTokens } from '../../store/schema/oauth.js';
import { revocations } from '../../store/schema/identity.js';
import { Limit, TenantId } from '../enterprise/directory/http.js';
import { DEFAULT_TENANT } from '../repo.js';
import { errors, json } from '../schemas.js';
import { nowSec, type OAuthContext } from './context.js';

const IssuedToken = z
  .object({
    jti: z.string(),
    tenant: z.string(),
    grant: z.enum(['token-exchange', 'client_credentials']),
    agent: z.string(),
    agentDid: z.string(),
    human: z.string().nullable().openapi({ description: 'The human the token speaks for (its `sub`); null for client_credentials' }),
    audience: z.string(),
    scope: z.string(),
    delegationId: z.string().nullable(),
    issuedAt: z.string(),
    expiresAt: z.string(),
    status: z.enum(['active', 'revoked', 'expired']),
    revokedBy: z.enum(['token', 'delegation']).nullable(),
    revokedAt: z.string().nullable(),
  })
  .openapi('IssuedToken');
const TokenPage = z.object({ tokens: z.array(IssuedToken), next: z.string().nullable() }).openapi('IssuedTokenPage');
type Item = z.infer<typeof IssuedToken>;

const Query = z.object({
  tenant: TenantId.optional().openapi({ param: { name: 'tenant', in: 'query' } }),
  agent: z
    .string()
    .min(1)
    .max(253)
    .optional()
    .openapi({ param: { name: 'agent', in: 'query' } }),
  delegation: z
    .string()
    .min(1)
    .max(200)
    .optional()
    .openapi({ param: { name: 'delegation', in: 'query' } }),
  limit: Limit(100, 500).openapi({ param: { name: 'limit', in: 'query' } }),
  after: z
    .string()
    .max(400)
    .optional()
    .openapi({ param: { name: 'after', in: 'query' }, description: "The previous page's `next`" }),
});

/** The page cursor: the last row's (issued_at, jti), base64url JSON. */
const cursorOf = (issuedAt: string, jti: string) => Buffer.from(JSON.stringify([issuedAt, jti])).toString('base64url');
function parseCursor(s: string): [string, string] | undefined {
  try {
    const v = JSON.parse(Buffer.from(s, 'base64url').toString('utf8')) as unknown;
    return Array.isArray(v) && v.length === 2 && typeof v[0] === 'string' && !Number.isNaN(Date.parse(v[0])) && typeof v[1] === 'string'
      ? [v[0], v[1]]
      : undefined;
  } catch {
    return undefined;
  }
}

const tokenRevocation = alias(revocations, 'token_revocation');
const delegationRevocation = alias(revocations, 'delegation_revocation');
const iso = (ts: string) => new Date(ts).toISOString();

async function page(o: OAuthContext, q: z.infer<typeof Query>, after: [string, string] | undefined) {
  const t = oauthTokens;
  const where: (SQL | undefined)[] = [eq(t.tenantId, q.tenant ?? DEFAULT_TENANT)];
  if (q.agent) where.push(eq(t.agentName, q.agent));
  if (q.delegation) where.push(eq(t.delegationId, q.delegation));
  if (after) where.push(or(lt(t.issuedAt, after[0]), and(eq(t.issuedAt, after[0]), lt(t.jti, after[1]))));
  return o.id.store.db
    .select({ row: t, tokenRevokedAt: tokenRevocation.revokedAt, delegationRevokedAt: delegationRevocation.revokedAt })
    .from(t)
    .leftJoin(tokenRevocation, eq(tokenRevocation.jti, t.jti))
    .leftJoin(delegationRevocation, eq(delegationRevocation.jti, t.delegationJti))
    .where(and(...where))
    .orderBy(desc(t.issuedAt), desc(t.jti))
    .limit(q.limit + 1);
}

type Row = Awaited<ReturnType<typeof page>>[number];

function itemOf({ row, tokenRevokedAt, delegationRevokedAt }: Row, now: number): Item {
  const revokedBy = tokenRevokedAt ? 'token' : delegationRevokedAt ? 'delegation' : null;
  const revokedAt = tokenRevokedAt ?? delegationRevokedAt;
  const delegated = row.grantType !== 'client_credentials';
  return {
    jti: row.jti,
    tenant: row.tenantId,
    grant: delegated ? 'token-exchange' : 'client_credentials',
    agent: row.agentName,
    agentDid: row.agentDid,
    human: delegated ? row.subject : null,
    audience: row.audience,
    scope: row.scope,
    delegationId: row.delegationId,
    issuedAt: iso(row.issuedAt),
    expiresAt: new Date(row.exp * 1000).toISOString(),
    status: revokedBy ? 'revoked' : row.exp <= now ? 'expired' : 'active',
    revokedBy,
    revokedAt: revokedAt ? iso(revokedAt) : null,
  };
}

export function tokenListRoutes(o: OAuthContext): OpenAPIHono {
  const app = subApi();
  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/tokens',
      tags: ['oauth'],
      summary: 'Access tokens issued here (never their values), newest first, one tenant; pages of `limit`, `next` names the following one',
      request: { query: Query },
      responses: {
        200: json(TokenPage, 'A page of issued tokens'),
        400: json(z.object({ error: z.object({ code: z.string(), message: z.string() }) }), 'Bad cursor'),
        ...errors,
      },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const after = q.after === undefined ? undefined : parseCursor(q.after);
      if (q.after !== undefined && !after) return c.json({ error: { code: 'bad_cursor', message: 'after is not a cursor this route answered' } }, 400);
      const rows = await page(o, q, after);
      const more = rows.length > q.limit;
      const shown = more ? rows.slice(0, q.limit) : rows;
      const last = shown.at(-1)?.row;
      const now = nowSec(o);
      return c.json({ tokens: shown.map((r) => itemOf(r, now)), next: more && last ? cursorOf(last.issuedAt, last.jti) : null }, 200);
    },
  );
  return app;
}
