/**
 * Which approval-queue processes are alive (issue 16, item 5). Each queue has an instance id
 * (new per process start) and renews a heartbeat row in `egress_holders`; a pending request
 * records the instance holding its connection (`egress_requests.holder_instance`). A request
 * whose holder instance has no live heartbeat lost its connection with its process, whatever
 * replica id the process came back under: it is expired, and the `egress.proxy` record its
 * proxy would have written is written for it ("expired: the holding process is gone").
 *
 * PGlite is embedded (one process owns the data folder): an instance of another process is gone.
 */
import { randomUUID } from 'node:crypto';
import { sql, type SQL } from 'drizzle-orm';
import { errMsg, logger } from '../../lib/log.js';
import { rowsOf, type Store } from '../../store/factory.js';
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

/** The `egress.proxy` record of a hold that ended because its process died. */
export function lostHoldRecord(r: { id: string; actor: string; service: string; target: string }, why: string): AuditEntry {
  return {
    action: 'egress.proxy',
    subject: r.actor,
    actor: r.actor,
    service: r.service,
    allow: false,
    rule: 'delegation',
    reason: `egress request ${r.id} to ${r.target} expired: ${why}`,
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

/** Marks a freshly created request as held by `instance`. */
export async function claim(db: Store['db'], id: string, instance: string): Promise<void> {
  await db.execute(sql`update egress_requests set holder_instance = ${instance} where id = ${id}`);
}

/** Expires pending rows matching `where` and returns them (id, actor, service, target). */
export async function expireWhere(db: Store['db'], where: SQL, why: string, at: string) {
  return rowsOf<{ id: string; actor: string; service: string; target: string }>(
    db,
    sql`update egress_requests set status = 'expired', decided_at = ${at}, deny_reason = ${why}
        where status = 'pending' and ${where} returning id, actor, service, target`,
  );
}
