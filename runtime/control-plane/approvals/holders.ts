/**
 * Which approval-queue processes are alive (issue 16, item 5). Each queue has an instance id
 * (new per process start) and renews a heartbeat row in `egress_holders`; a request records the
 * instance holding its connection (`egress_requests.holder_instance`). A request whose holder
 * instance has no live heartbeat lost its connection with its process, whatever replica id the
 * process came back under: it is released (holder_instance NULL), the `egress.proxy` record its
 * proxy would have written is written for it, and it stays pending until its deadline, for the
 * agent's retry to pick up (issue 15, item 9).
 *
 * PGlite is embedded (one process owns the data folder): an instance of another process is gone.
 */
import { randomUUID } from 'node:crypto';
import { and, desc, eq, gt, inArray, isNull, ne, sql, type SQL } from 'drizzle-orm';
import { errMsg, logger } from '../../lib/log.js';
import { rowsOf, type Store } from '../../store/factory.js';
import { egressRequests as t } from '../../store/schema/egress.js';
import type { AuditEntry } from '../types.js';

const log = logger('approvals.holders');
const PROCESS = randomUUID();
let counter = 0;

export const DEFAULT_HOLDER_TTL_MS = 15_000;

/** SQL condition true for a row of `egress_requests` whose holder instance is gone (NULL: unknown, not gone). */
export function holderGone(store: Store): SQL {
  const live = sql`holder_instance in (select instance from egress_holders where expires_at > now())`;
  return store.kind === 'pglite'
    ? sql`(holder_instance is not null and (holder_instance not like ${PROCESS + ':%'} or not ${live}))`
    : sql`(holder_instance is not null and not ${live})`;
}

/** The `egress.proxy` record of a held connection its process lost (the request itself stays). */
export function lostHoldRecord(r: { id: string; actor: string; service: string; target: string }, why: string): AuditEntry {
  return {
    action: 'egress.proxy',
    subject: r.actor,
    actor: r.actor,
    service: r.service,
    allow: false,
    rule: 'delegation',
    reason: `egress request ${r.id} to ${r.target}: connection lost, ${why}`,
  };
}

export interface Heartbeat {
  readonly instance: string;
  stop(): Promise<void>;
}

/** Registers this queue's instance and keeps its heartbeat alive every ttl/3. */
export async function startHeartbeat(store: Store, replica: string, ttlMs: number, onTick: () => void): Promise<Heartbeat> {
  const instance = `${PROCESS}:${++counter}`;
  const beat = () =>
    store.db
      .execute(sql`insert into egress_holders (instance, replica, expires_at) values (${instance}, ${replica}, now() + make_interval(secs => ${ttlMs / 1000}))
      on conflict (instance) do update set expires_at = excluded.expires_at`);
  await beat();
  const timer = setInterval(
    () => {
      beat().then(onTick, (e: unknown) => log.warn('egress holder heartbeat failed', { instance, err: errMsg(e) }));
    },
    Math.max(20, ttlMs / 3),
  );
  timer.unref();
  return {
    instance,
    async stop() {
      clearInterval(timer);
      try {
        await store.db.execute(sql`delete from egress_holders where instance = ${instance}`);
        // Old heartbeats of gone processes: nothing refers to them once their rows are expired.
        await store.db.execute(sql`delete from egress_holders where expires_at < now() - interval '1 day'`);
      } catch (e) {
        log.warn('egress holder unregister failed (it lapses by itself)', { instance, err: errMsg(e) });
      }
    },
  };
}

/**
 * Releases the undecided-or-unused rows matching `where` from their (gone) holder and returns them:
 * no connection waits on them now; a retry of the same request may adopt them.
 */
export async function releaseWhere(db: Store['db'], where: SQL) {
  return rowsOf<{ id: string; actor: string; service: string; target: string }>(
    db,
    sql`update egress_requests set holder_instance = null
        where holder_instance is not null and used_at is null and status <> 'expired' and ${where}
        returning id, actor, service, target`,
  );
}

/** What identifies a request for adoption by a retry. */
export type RequestKey = Pick<typeof t.$inferInsert, 'actor' | 'actorDid' | 'target' | 'service' | 'action' | 'resource'>;

/**
 * Holds, for `instance`, the newest request identical to `k` that no connection waits on and whose
 * decision (if any) is unused, within its deadline `at`: the retry of a request whose process
 * stopped. Guarded, so two retries never adopt the same row.
 */
export async function adoptUnheld(db: Store['db'], k: RequestKey, instance: string, at: string) {
  const unheld = db
    .select({ id: t.id })
    .from(t)
    .where(
      and(
        eq(t.actor, k.actor),
        eq(t.target, k.target),
        isNull(t.holderInstance),
        isNull(t.usedAt),
        ne(t.status, 'expired'),
        gt(t.expiresAt, at),
        eq(t.actorDid, k.actorDid!),
        eq(t.service, k.service),
        eq(t.action, k.action),
        eq(t.resource, k.resource),
      ),
    )
    .orderBy(desc(t.seq))
    .limit(1);
  const [row] = await db
    .update(t)
    .set({ holderInstance: instance })
    .where(and(inArray(t.id, unheld), isNull(t.holderInstance), isNull(t.usedAt)))
    .returning();
  return row;
}
