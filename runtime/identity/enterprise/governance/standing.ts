/**
 * Governance standing for the decision engine, and the credential consequence of losing it.
 *
 * - `GET /v1/governance/standing`: every governed agent's lifecycle status, across tenants
 *   (agent names are unique across tenants), with an ETag so the control plane can poll it a few
 *   times a second for the price of a 304; answered from memory (the change feed) when it can be. This is the control plane's feed: a governed agent
 *   whose status is not `active` is denied egress (runtime/control-plane/decision).
 * - `revokeMemberships`: suspension, quarantine and retirement revoke the agent's Membership VC
 *   (the jti its provisioning recorded) in the same transaction as the move, each with a
 *   revocation-log row of kind `vc_revoke`, so the agent's VPs are refused too.
 */
import { subApi } from '../../../lib/api.js';
import { createHash } from 'node:crypto';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { and, asc, inArray, isNotNull, sql } from 'drizzle-orm';
import { rowsOf, type Db } from '../../../store/factory.js';
import { governedAgents } from '../../../store/schema/governance.js';
import { agents as identityAgents, revocations } from '../../../store/schema/identity.js';
import { conditional } from '../../routes-discovery.js';
import { DEFAULT_LIST } from '../../repo.js';
import type { DbOrTx } from '../tenant.js';
import type { GovernanceRepo } from './repo.js';
import type { Change, ChangeFeed } from '../../change-feed.js';
import { feedView } from '../../feed-view.js';

const HumanStanding = z
  .object({
    deactivated: z.boolean().openapi({ description: 'Every directory row this reference names is inactive: every token for this human is inactive' }),
    tokensNotBefore: z
      .number()
      .int()
      .nullable()
      .openapi({ description: 'Tokens issued (iat) at or before this time (epoch s) are inactive (the last deactivation)' }),
  })
  .openapi('HumanStanding');
const Standing = z
  .object({
    agents: z.record(z.string(), z.string()),
    humans: z
      .record(z.string(), HumanStanding)
      .optional()
      .openapi({ description: 'Directory humans (employee subject or email) who are or were deactivated (issue 43 item 4)' }),
  })
  .openapi('GovernanceStanding');

export interface HumanStandingEntry {
  deactivated: boolean;
  tokensNotBefore: number | null;
}

/**
 * Every human reference (employee subject, and email) that is deactivated (every row it names
 * inactive) or was (a tokens_not_before set, migration 0028), as the change feed's `hu` carries it.
 */
export async function humanStandingOf(db: Db): Promise<Map<string, HumanStandingEntry>> {
  const rows = await rowsOf<{ ref: string; off: boolean; nb: number | string | null }>(
    db,
    sql`select ref, bool_and(status <> 'active') as off, floor(extract(epoch from max(tokens_not_before)))::bigint as nb
        from (select employee_subject as ref, status, tokens_not_before from directory_employees
              union all select email, status, tokens_not_before from directory_employees where email is not null) x
        group by ref having bool_and(status <> 'active') or max(tokens_not_before) is not null`,
  );
  return new Map(rows.map((r) => [r.ref, { deactivated: r.off, tokensNotBefore: r.nb === null ? null : Number(r.nb) }]));
}

/** name -> status of every governed agent, in name order. */
export async function standingOf(db: DbOrTx): Promise<Record<string, string>> {
  const rows = await db.select({ n: governedAgents.agentName, s: governedAgents.status }).from(governedAgents).orderBy(asc(governedAgents.agentName));
  const out: Record<string, string> = {};
  for (const r of rows) out[r.n] = r.s;
  return out;
}

/** The standing as the route answers it: name -> status in name order, humans by reference, and its ETag. */
export interface StandingAnswer {
  agents: Record<string, string>;
  humans: Record<string, HumanStandingEntry>;
  etag: string;
}

const byKey = <T>(pairs: Iterable<[string, T]>) => [...pairs].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

/** The answer of name -> status pairs and the humans: keys in code-point order, whichever collation read them. */
function answerOf(pairs: Iterable<[string, string]>, humans: Map<string, HumanStandingEntry>): StandingAnswer {
  const sorted = byKey(pairs);
  const people = byKey(humans);
  const etag = `W/"${createHash('sha256')
    .update(JSON.stringify([sorted, people]))
    .digest('base64url')
    .slice(0, 22)}"`;
  return { agents: Object.fromEntries(sorted), humans: Object.fromEntries(people), etag };
}

/** The standing in memory: every governed agent's status, the humans, and the answer built from them (dropped on change). */
interface StandingMemo {
  byName: Map<string, string>;
  humans: Map<string, HumanStandingEntry>;
  answer?: StandingAnswer;
}

/** Folds a change into the memo (governed agents and directory humans; other kinds ignored). */
function applyChange(v: StandingMemo, c: Change): void {
  if (c.kind === 'governed') {
    if (c.status === null) v.byName.delete(c.name);
    else v.byName.set(c.name, c.status);
  } else if (c.kind === 'humans') {
    for (const h of c.humans) {
      if (h.deactivated || h.notBefore !== null) v.humans.set(h.ref, { deactivated: h.deactivated, tokensNotBefore: h.notBefore });
      else v.humans.delete(h.ref);
    }
  } else return;
  v.answer = undefined;
}

/**
 * The standing kept in memory by the change feed (migration 0018 notifies every status change),
 * so the control plane's poll is answered at once even while a long transaction holds the store
 * (a directory sync holds PGlite's only connection for seconds). The answer waits until every
 * change committed before the request has arrived (`caughtUp`: immediate on PGlite, one NOTIFY
 * round trip on PostgreSQL), so a client reads its own writes. Undefined while the view cannot be
 * trusted: the route then reads the store.
 */
export function createStandingView(db: Db, feed: ChangeFeed): StandingSource {
  const view = feedView<StandingMemo>(feed, {
    empty: () => ({ byName: new Map(), humans: new Map() }),
    load: async () => ({ byName: new Map(Object.entries(await standingOf(db))), humans: await humanStandingOf(db) }),
    apply: applyChange,
  });
  return {
    async answer() {
      if (!view.current()) return undefined;
      await feed.caughtUp(1000);
      const v = view.get();
      if (!v) return undefined;
      v.answer ??= answerOf(v.byName, v.humans);
      return v.answer;
    },
  };
}

/** Where the route's answer comes from when not from the store. */
export interface StandingSource {
  answer(): Promise<StandingAnswer | undefined>;
}

export function standingRoutes(deps: { db: Db; view?: StandingSource }): OpenAPIHono {
  const app = subApi();
  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/governance/standing',
      tags: ['governance'],
      summary: "Every governed agent's lifecycle status and every deactivated human (the control plane's decision feed; ETag / If-None-Match)",
      responses: { 200: { content: { 'application/json': { schema: Standing } }, description: 'name -> status' }, 304: { description: 'Unchanged' } },
    }),
    async (c) => {
      const { agents, humans, etag } = (await deps.view?.answer()) ?? answerOf(Object.entries(await standingOf(deps.db)), await humanStandingOf(deps.db));
      return conditional(c, etag, async () => ({ agents, humans })) as never;
    },
  );
  return app;
}

/**
 * Revokes the Membership VC of each named agent that has one (not yet revoked) and appends a
 * `vc_revoke` log row per revocation. Runs in the caller's transaction.
 */
export async function revokeMemberships(
  tx: DbOrTx,
  repo: GovernanceRepo,
  names: string[],
  at: string,
  source: 'auto' | 'admin',
  by: string,
  reasonCode: string,
): Promise<number> {
  if (!names.length) return 0;
  const held = await tx
    .select({ name: identityAgents.name, jti: identityAgents.membershipJti, tenantId: identityAgents.tenantId })
    .from(identityAgents)
    .where(and(inArray(identityAgents.name, names), isNotNull(identityAgents.membershipJti)));
  if (!held.length) return 0;
  const revoked = await tx
    .insert(revocations)
    .values(held.map((h) => ({ jti: h.jti!, tenantId: h.tenantId, list: DEFAULT_LIST, revokedAt: at })))
    .onConflictDoNothing()
    .returning({ jti: revocations.jti });
  const fresh = new Set(revoked.map((r) => r.jti));
  await repo.appendLog(
    held
      .filter((h) => fresh.has(h.jti!))
      .map((h) => ({ kind: 'vc_revoke' as const, reasonCode, agentId: h.name, delegationId: null, source, by, detail: `membership VC ${h.jti} revoked`, at })),
  );
  return fresh.size;
}
