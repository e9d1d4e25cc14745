/**
 * The registry's write side: a change set is one transaction. It takes the `registry_state` row
 * lock (writers serialize across replicas), reads the rows it touches, re-plans against them as
 * they stand, bumps the version once, writes the rows (as the owner), NOTIFYs the changed names
 * (payloads chunked under the size limit) and appends one `registry.upsert` record per effective
 * change. A commit that fails after records were appended says so in the audit chain too.
 */
import { eq, inArray, sql } from 'drizzle-orm';
import { errMsg } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import { registryServices, registryState } from '../../store/schema/control-plane.js';
import type { AuditEntry, Service } from '../types.js';
import { contentKey, isNoop, type ApplyPlan, type CurrentEntry } from './plan.js';
import { deepFreeze, storedShape } from './service.js';
import type { RegistryEntry } from './snapshot.js';

/** NOTIFY payloads must stay under 8000 bytes: changed names go in chunks. */
const NOTIFY_BYTES = 7000;
/** Rows per INSERT statement (6 parameters each, PostgreSQL allows 65535). */
const INSERT_CHUNK = 1000;

/** The entry a stored row (or a written document) is served as: frozen, with its content key. */
export function entryOf(doc: Service, owner: string, rev: number): RegistryEntry {
  const svc = deepFreeze(storedShape(doc, doc.registeredAt ?? ''));
  return { svc, owner, rev, key: contentKey(svc) };
}

/** NOTIFY payloads naming `names` at `version`, each under the size limit. */
function notifyPayloads(version: number, names: string[]): string[] {
  const out: string[] = [];
  let chunk: string[] = [];
  let bytes = 0;
  for (const n of names) {
    const b = Buffer.byteLength(n) + 3;
    if (chunk.length && bytes + b > NOTIFY_BYTES) {
      out.push(JSON.stringify({ v: version, n: chunk }));
      chunk = [];
      bytes = 0;
    }
    chunk.push(n);
    bytes += b;
  }
  out.push(JSON.stringify({ v: version, n: chunk }));
  return out;
}

export interface WriterOptions {
  /** Receives `registry.upsert` records; an append that throws aborts the write. */
  audit?: { append(entry: AuditEntry): unknown };
}

/**
 * The registry's writer on `store`: `write` runs one change set (notifying on `channel`, stamped
 * with `now`), `committed` runs a `write` and records a commit that failed after appending.
 */
export function createWriter(store: Store, channel: string, now: () => number, opts: WriterOptions) {
  /**
   * The write transaction: lock the version row, read the rows `names`, re-plan against them as
   * they stand, then write (as `owner`), notify and audit. Returns the plan that was written
   * (maybe a no-op) and the new entries.
   */
  async function write(
    names: string[],
    replan: (cur: ReadonlyMap<string, CurrentEntry>) => ApplyPlan,
    owner: string,
    by: string,
  ): Promise<{ plan: ApplyPlan; version: number; written: Map<string, RegistryEntry> }> {
    const audits: AuditEntry[] = [];
    return store.db.transaction(async (tx) => {
      const [st] = await tx.select({ version: registryState.version }).from(registryState).where(eq(registryState.id, 1)).for('update');
      const base = Number(st?.version ?? 0);
      const rows = names.length
        ? await tx
            .select({ name: registryServices.name, doc: registryServices.doc, owner: registryServices.managedBy, registeredAt: registryServices.registeredAt })
            .from(registryServices)
            .where(inArray(registryServices.name, names))
        : [];
      const cur = new Map<string, CurrentEntry & { registeredAt: string }>();
      for (const r of rows) cur.set(r.name, { svc: r.doc, owner: r.owner, key: contentKey(r.doc), registeredAt: r.doc.registeredAt ?? r.registeredAt });
      const plan = replan(cur);
      if (isNoop(plan)) return { plan, version: base, written: new Map<string, RegistryEntry>() };

      const version = base + 1;
      const at = new Date(now()).toISOString();
      await tx.update(registryState).set({ version, updatedAt: at }).where(eq(registryState.id, 1));
      const written = new Map<string, RegistryEntry>();
      const values = [];
      for (const svc of [...plan.creates, ...plan.updates]) {
        const existing = cur.get(svc.name);
        const registeredAt = existing?.registeredAt ?? (svc.registeredAt ? new Date(svc.registeredAt).toISOString() : at);
        const doc = storedShape(svc, registeredAt);
        values.push({ name: doc.name, doc, rev: version, registeredAt, updatedAt: at, managedBy: owner });
        written.set(doc.name, entryOf(doc, owner, version));
        audits.push({
          action: 'registry.upsert',
          subject: by,
          service: doc.name,
          allow: true,
          reason: `${existing ? 'updated' : 'registered'} by ${owner} (version ${version})`,
        });
      }
      for (let i = 0; i < values.length; i += INSERT_CHUNK) {
        await tx
          .insert(registryServices)
          .values(values.slice(i, i + INSERT_CHUNK))
          .onConflictDoUpdate({
            target: registryServices.name,
            set: { doc: sql`excluded.doc`, rev: sql`excluded.rev`, updatedAt: sql`excluded.updated_at`, managedBy: sql`excluded.managed_by` },
          });
      }
      for (let i = 0; i < plan.deletes.length; i += INSERT_CHUNK) {
        await tx.delete(registryServices).where(inArray(registryServices.name, plan.deletes.slice(i, i + INSERT_CHUNK)));
      }
      for (const name of plan.deletes)
        audits.push({ action: 'registry.upsert', subject: by, service: name, allow: true, reason: `deleted by ${owner} (version ${version})` });
      for (const p of notifyPayloads(version, [...written.keys(), ...plan.deletes])) await tx.execute(sql`select pg_notify(${channel}, ${p})`);
      // Last step inside the transaction: if the audit sink refuses, nothing is written.
      appendAll(audits);
      return { plan, version, written };
    });
  }

  /** Records appended by the write in flight (writes are serialized). */
  let appended: AuditEntry[] = [];
  function appendAll(entries: AuditEntry[]): void {
    appended = [];
    for (const e of entries) {
      opts.audit?.append(e);
      appended.push(e);
    }
  }

  /** Runs `write`; a commit that fails after records were appended says so in the chain too. */
  async function committed(by: string, run: () => ReturnType<typeof write>) {
    appended = [];
    try {
      return await run();
    } catch (e) {
      if (appended.length > 0) {
        const entry: AuditEntry = { action: 'registry.upsert', subject: by, allow: false, reason: `not committed: ${errMsg(e)}` };
        if (appended.length === 1 && appended[0]!.service) entry.service = appended[0]!.service;
        else entry.reason = `not committed (${appended.length} changes): ${errMsg(e)}`;
        try {
          opts.audit?.append(entry);
        } catch {}
      }
      throw e;
    } finally {
      appended = [];
    }
  }

  return { write, committed };
}
