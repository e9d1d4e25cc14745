/**
 * The service registry (SPEC 2.1): durable rows in `registry_services`, served from an
 * in-memory snapshot so the decision hot path never waits on the database.
 *
 * Writes: one statement upserts the row (keeping the original registeredAt, bumping `rev`),
 * NOTIFYs the change and appends the `registry.upsert` audit record, all in one transaction;
 * the snapshot is updated after commit. Replicas sharing a PostgreSQL schema LISTEN on the
 * schema's channel and reload the named entry; a version (`rev`) check makes late or
 * duplicate notifications harmless. With PostgreSQL a periodic full resync (default 30 s)
 * covers notifications missed while the listen connection was reconnecting.
 */
import { createHash } from 'node:crypto';
import { asc, eq, sql } from 'drizzle-orm';
import { BRAND } from '../../lib/brand.js';
import { errMsg, logger } from '../../lib/log.js';
import { rowsOf, type Store } from '../../store/factory.js';
import { registryServices } from '../../store/schema/control-plane.js';
import type { AuditEntry, Service } from '../types.js';
import { deepFreeze, parseService, storedShape } from './service.js';

export interface Registry {
  /** Snapshot read (never waits on the database). Returned objects are frozen. */
  get(name: string): Service | undefined;
  /** Every service, sorted by name. */
  list(): Service[];
  /** The service whose upstream is `host:port` (host case-insensitive); first by name if several. */
  findByUpstream(hostPort: string): Service | undefined;
  /**
   * Validates (ServiceSchema, strict), stores and returns the stored service. Throws
   * RegistryValidationError on bad input (nothing changes); store errors propagate.
   */
  upsert(input: unknown, opts?: { by?: string }): Promise<Service>;
  /** Re-reads one entry, or every entry, from the store into the snapshot. */
  reload(name?: string): Promise<void>;
  readonly channel: string;
  close(): Promise<void>;
}

export interface RegistryOptions {
  /** Receives `registry.upsert` records; an append that throws aborts the write. */
  audit?: { append(entry: AuditEntry): unknown };
  /** Clock (ms since epoch) for registeredAt / updated_at. */
  now?: () => number;
  /** Full resync period; default 30 s on postgres, off on PGlite (single process). 0 disables. */
  resyncMs?: number;
  /** NOTIFY channel; default `<brand>_registry_<schema>` so schemas never cross-talk. */
  channel?: string;
}

interface Entry {
  svc: Service;
  rev: number;
}

const log = logger('registry');

async function defaultChannel(store: Store): Promise<string> {
  const [row] = await rowsOf<{ s: string }>(store.db, sql`select current_schema() as s`);
  const schema = row?.s ?? 'public';
  const ch = `${BRAND}_registry_${schema}`;
  // Channel names are identifiers (63 bytes max).
  return ch.length <= 63 ? ch : `${BRAND}_registry_${createHash('sha256').update(schema).digest('hex').slice(0, 24)}`;
}

export async function createRegistry(store: Store, opts: RegistryOptions = {}): Promise<Registry> {
  const now = opts.now ?? Date.now;
  const channel = opts.channel ?? (await defaultChannel(store));
  const snap = new Map<string, Entry>();
  let sorted: Service[] | undefined;
  let byUpstream: Map<string, Service> | undefined;

  /** Applies a stored version unless the snapshot already holds the same or a newer one. */
  function apply(doc: Service, rev: number): void {
    const cur = snap.get(doc.name);
    if (cur && cur.rev >= rev) return;
    snap.set(doc.name, { svc: deepFreeze(storedShape(doc, doc.registeredAt ?? '')), rev });
    sorted = undefined;
    byUpstream = undefined;
  }

  async function reload(name?: string): Promise<void> {
    const q = store.db.select({ doc: registryServices.doc, rev: registryServices.rev }).from(registryServices);
    const rows = name === undefined ? await q.orderBy(asc(registryServices.name)) : await q.where(eq(registryServices.name, name));
    for (const r of rows) apply(r.doc, Number(r.rev));
  }

  // Subscribe before the initial load so no change between the two is missed.
  const unlisten = await store.listen(channel, (payload) => {
    let msg: { name?: unknown; rev?: unknown };
    try {
      msg = JSON.parse(payload) as typeof msg;
    } catch {
      return;
    }
    if (typeof msg.name !== 'string') return;
    const cur = snap.get(msg.name);
    if (cur && typeof msg.rev === 'number' && cur.rev >= msg.rev) return; // our own write, or stale
    reload(msg.name).catch((e) => log.warn('registry reload failed', { name: msg.name, err: errMsg(e) }));
  });
  try {
    await reload();
  } catch (e) {
    await unlisten();
    throw e;
  }

  const resyncMs = opts.resyncMs ?? (store.kind === 'postgres' ? 30_000 : 0);
  const timer =
    resyncMs > 0
      ? setInterval(() => reload().catch((e) => log.warn('registry resync failed', { err: errMsg(e) })), resyncMs).unref()
      : undefined;

  let closed = false;

  return {
    channel,
    get: (name) => snap.get(name)?.svc,
    list() {
      sorted ??= [...snap.values()].map((e) => e.svc).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      return [...sorted];
    },
    findByUpstream(hostPort) {
      if (!byUpstream) {
        byUpstream = new Map();
        const all = [...snap.values()].map((e) => e.svc).sort((a, b) => (a.name < b.name ? -1 : 1));
        for (const s of all) {
          const k = s.upstream.toLowerCase();
          if (!byUpstream.has(k)) byUpstream.set(k, s);
        }
      }
      return byUpstream.get(hostPort.toLowerCase());
    },
    async upsert(input, o = {}) {
      if (closed) throw new Error('registry is closed');
      const svc = parseService(input);
      const at = new Date(now()).toISOString();
      const registeredAt = svc.registeredAt ? new Date(svc.registeredAt).toISOString() : at;
      const doc = storedShape(svc, registeredAt);
      let audited = false;
      const write = store.db.transaction(async (tx) => {
        const [row] = await tx
          .insert(registryServices)
          .values({ name: doc.name, doc, rev: 1, registeredAt, updatedAt: at })
          .onConflictDoUpdate({
            target: registryServices.name,
            // The original registeredAt wins on update (SPEC 2.1: set by the store if zero).
            set: {
              doc: sql`excluded.doc || jsonb_build_object('registeredAt', registry_services.doc -> 'registeredAt')`,
              rev: sql`registry_services.rev + 1`,
              registeredAt: sql`registry_services.registered_at`,
              updatedAt: sql`excluded.updated_at`,
            },
          })
          .returning({ doc: registryServices.doc, rev: registryServices.rev });
        if (!row) throw new Error('registry upsert returned no row');
        const rev = Number(row.rev);
        await tx.execute(sql`select pg_notify(${channel}, ${JSON.stringify({ name: doc.name, rev })})`);
        // Last step inside the transaction: if the audit sink refuses, nothing is written.
        opts.audit?.append({
          action: 'registry.upsert',
          subject: o.by ?? 'api',
          service: doc.name,
          allow: true,
          reason: rev === 1 ? 'registered' : `updated (rev ${rev})`,
        });
        audited = true;
        return { doc: row.doc, rev };
      });
      const stored = await write.catch((e: unknown) => {
        // The commit itself failed after the record was appended: say so in the chain too.
        if (audited) {
          try {
            opts.audit?.append({ action: 'registry.upsert', subject: o.by ?? 'api', service: doc.name, allow: false, reason: `not committed: ${errMsg(e)}` });
          } catch {}
        }
        throw e;
      });
      apply(stored.doc, stored.rev);
      // The version this call stored (a newer concurrent one may already be in the snapshot).
      return deepFreeze(storedShape(stored.doc, stored.doc.registeredAt ?? registeredAt));
    },
    reload,
    async close() {
      if (closed) return;
      closed = true;
      if (timer) clearInterval(timer);
      await unlisten();
    },
  };
}
