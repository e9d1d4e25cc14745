/**
 * The service registry (SPEC 2.1): durable rows in `registry_services`, served from an
 * immutable in-memory snapshot (snapshot.ts) so the decision hot path never waits on the
 * database.
 *
 * One write path: `apply(desired, {owner})` diffs the owner's desired entries (plan.ts),
 * creates, updates and prunes what that owner owns, and does nothing at all (no transaction, no
 * version bump, no audit record) when nothing changed. A change set is one transaction
 * (writer.ts): it takes the `registry_state` row lock (writers serialize across replicas),
 * re-plans against the locked rows, bumps the version once, writes the rows, NOTIFYs the changed
 * names and appends one `registry.upsert` record per effective change; the snapshot changes after
 * commit. The SPEC's upsert and the delete route are that same path for one entry of owner `api`.
 *
 * Replicas on one PostgreSQL schema LISTEN on the schema's channel and reload the named rows
 * (an entry older than the one held never wins; a row gone at a version newer than the held
 * entry is removed), a full resync when the listen connection comes back after a loss, and
 * one every 30 s as a fallback.
 */
import { createHash } from 'node:crypto';
import { eq, inArray, sql } from 'drizzle-orm';
import { BRAND } from '../../lib/brand.js';
import { errMsg, logger } from '../../lib/log.js';
import { rowsOf, type Store } from '../../store/factory.js';
import { registryServices, registryState } from '../../store/schema/control-plane.js';
import type { AuditEntry, Service } from '../types.js';
import { isNoop, planApply, type ApplyPlan } from './plan.js';
import { RegistryConflictError, parseService } from './service.js';
import { createSnapshot, emptySnapshot, type RegistryEntry, type RegistrySnapshot } from './snapshot.js';
import { createWriter, entryOf } from './writer.js';

export interface ApplyResult {
  version: number;
  created: string[];
  updated: string[];
  deleted: string[];
  unchanged: string[];
  /** Names held by another owner (not written). */
  conflicts: string[];
  /** name -> the owner holding it, for each conflict. */
  conflictOwners: Record<string, string>;
  /** Desired entries that failed validation, with why (the others were applied). */
  invalid: { name: string; error: string }[];
}

export interface ApplyOptions {
  /** The producer: `api`, `examples`, `folder:<path>`, `kubernetes:<cluster>`, ... */
  owner: string;
  /** Plan only: nothing is written. */
  dryRun?: boolean;
  /** Who the audit records name (default the owner). */
  by?: string;
}

export interface Registry {
  /** The current immutable snapshot. */
  snapshot(): RegistrySnapshot;
  /** The current registry version (monotonic; 0 for a store never written). */
  readonly version: number;
  /** Snapshot reads (never wait on the database). Returned objects are frozen. */
  get(name: string): Service | undefined;
  list(): Service[];
  findByUpstream(hostPort: string): Service | undefined;
  /** The owner of an entry, if it exists. */
  ownerOf(name: string): string | undefined;
  apply(desired: readonly unknown[], opts: ApplyOptions): Promise<ApplyResult>;
  /**
   * SPEC 4.3 upsert of one service by owner `api` (audited on every call). Throws
   * RegistryValidationError on bad input and RegistryConflictError when another owner holds it.
   */
  upsert(input: unknown, opts?: { by?: string }): Promise<Service>;
  /** Deletes an entry the owner holds: false when unknown; RegistryConflictError when another owner holds it. */
  remove(name: string, opts: { owner: string; by?: string }): Promise<boolean>;
  /** Called after every snapshot change (local write, notification, resync). */
  onChange(listener: (snap: RegistrySnapshot) => void): () => void;
  /** Re-reads every entry and the version from the store. */
  reload(): Promise<void>;
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

const log = logger('registry');

async function defaultChannel(store: Store): Promise<string> {
  const [row] = await rowsOf<{ s: string }>(store.db, sql`select current_schema() as s`);
  const schema = row?.s ?? 'public';
  const ch = `${BRAND}_registry_${schema}`;
  // Channel names are identifiers (63 bytes max).
  return ch.length <= 63 ? ch : `${BRAND}_registry_${createHash('sha256').update(schema).digest('hex').slice(0, 24)}`;
}

function emptyResult(version: number, plan: ApplyPlan): ApplyResult {
  const conflictOwners: Record<string, string> = {};
  for (const c of plan.conflicts) conflictOwners[c.name] = c.owner;
  return {
    version,
    created: plan.creates.map((s) => s.name),
    updated: plan.updates.map((s) => s.name),
    deleted: [...plan.deletes],
    unchanged: [...plan.unchanged],
    conflicts: plan.conflicts.map((c) => c.name),
    conflictOwners,
    invalid: plan.invalid,
  };
}

export async function createRegistry(store: Store, opts: RegistryOptions = {}): Promise<Registry> {
  const now = opts.now ?? Date.now;
  const channel = opts.channel ?? (await defaultChannel(store));
  let snap = emptySnapshot();
  const listeners = new Set<(s: RegistrySnapshot) => void>();
  let closed = false;

  function publish(next: RegistrySnapshot): void {
    snap = next;
    for (const l of listeners) {
      try {
        l(next);
      } catch (e) {
        log.warn('registry change listener failed', { err: errMsg(e) });
      }
    }
  }

  async function reload(): Promise<void> {
    const read = () =>
      store.db.transaction(
        async (tx) => {
          const [st] = await tx.select({ version: registryState.version }).from(registryState).where(eq(registryState.id, 1));
          const all = await tx
            .select({ name: registryServices.name, doc: registryServices.doc, rev: registryServices.rev, owner: registryServices.managedBy })
            .from(registryServices);
          return { version: Number(st?.version ?? 0), rows: all };
        },
        { isolationLevel: 'repeatable read' }, // the version and the rows from one snapshot
      );
    let { version, rows } = await read();
    // A local write committed meanwhile is already served: a read from before it would go back.
    for (let i = 0; version < snap.version && i < 5; i++) ({ version, rows } = await read());
    if (version < snap.version) return;
    const entries = new Map<string, RegistryEntry>();
    for (const r of rows) entries.set(r.name, entryOf(r.doc, r.owner, Number(r.rev)));
    publish(createSnapshot(version, entries));
  }

  /**
   * Reloads the named rows after a notification of `version` from a writer (maybe ourselves).
   * Skipped only when every name is held at that revision or newer: an absent name is read, since
   * the snapshot's version may have passed `version` by a local write that never saw this change.
   */
  async function reloadNames(version: number, names: string[]): Promise<void> {
    if (names.every((n) => (snap.entry(n)?.rev ?? -1) >= version)) return;
    const rows = names.length
      ? await store.db
          .select({ name: registryServices.name, doc: registryServices.doc, rev: registryServices.rev, owner: registryServices.managedBy })
          .from(registryServices)
          .where(inArray(registryServices.name, names))
      : [];
    const found = new Map(rows.map((r) => [r.name, r]));
    const entries = new Map(snap.entries);
    for (const n of names) {
      const r = found.get(n);
      const cur = entries.get(n);
      if (r) {
        if (!cur || cur.rev < Number(r.rev)) entries.set(n, entryOf(r.doc, r.owner, Number(r.rev)));
      } else if (cur && cur.rev < version) {
        entries.delete(n);
      }
    }
    publish(createSnapshot(Math.max(snap.version, version), entries));
  }

  // Notifications are handled one at a time, in arrival order.
  let queue: Promise<void> = Promise.resolve();
  const enqueue = (job: () => Promise<void>) => {
    queue = queue.then(job).catch((e) => log.warn('registry reload failed', { err: errMsg(e) }));
  };

  // Subscribe before the initial load so no change between the two is missed.
  const unlisten = await store.listen(
    channel,
    (payload) => {
      let msg: { v?: unknown; n?: unknown };
      try {
        msg = JSON.parse(payload) as typeof msg;
      } catch {
        return;
      }
      const v = msg.v;
      const names = msg.n;
      if (typeof v !== 'number' || !Array.isArray(names) || !names.every((n) => typeof n === 'string')) return;
      enqueue(() => reloadNames(v, names as string[]));
      // Notifications sent while the listen connection was down are lost: resync once on reconnect.
    },
    () => enqueue(reload),
  );
  try {
    await reload();
  } catch (e) {
    await unlisten();
    throw e;
  }

  const resyncMs = opts.resyncMs ?? (store.kind === 'postgres' ? 30_000 : 0);
  const timer = resyncMs > 0 ? setInterval(() => enqueue(reload), resyncMs).unref() : undefined;

  // The write transaction and its audit records (writer.ts).
  const { write, committed } = createWriter(store, channel, now, opts);

  function publishWrite(version: number, written: Map<string, RegistryEntry>, deletes: string[]): void {
    const entries = new Map(snap.entries);
    for (const [n, e] of written) {
      const cur = entries.get(n);
      if (!cur || cur.rev <= e.rev) entries.set(n, e);
    }
    for (const n of deletes) if ((entries.get(n)?.rev ?? 0) < version) entries.delete(n);
    publish(createSnapshot(Math.max(snap.version, version), entries));
  }

  // Local writes are serialized too: the transaction's row lock orders them in the store, this
  // keeps the snapshot updates in the same order.
  let writes: Promise<unknown> = Promise.resolve();
  function serial<T>(job: () => Promise<T>): Promise<T> {
    const p = writes.then(job, job);
    writes = p.catch(() => {});
    return p;
  }

  const registry: Registry = {
    channel,
    snapshot: () => snap,
    get version() {
      return snap.version;
    },
    get: (name) => snap.get(name),
    list: () => [...snap.list()],
    findByUpstream: (hostPort) => snap.findByUpstream(hostPort),
    ownerOf: (name) => snap.entry(name)?.owner,
    onChange(l) {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    apply(desired, o) {
      if (closed) return Promise.reject(new Error('registry is closed'));
      if (!o.owner) return Promise.reject(new Error('apply needs an owner'));
      const by = o.by ?? o.owner;
      return serial(async () => {
        const s = snap;
        const plan = planApply(desired, o.owner, (n) => s.entry(n), s.ownedBy(o.owner));
        if (o.dryRun || isNoop(plan)) return emptyResult(s.version, plan);
        // The transaction re-plans only what the snapshot says changes, against the locked rows:
        // an entry another writer took meanwhile becomes a conflict, a prune of an entry no longer
        // ours is dropped. (Entries the snapshot calls unchanged are left as they are.)
        const changing = [...plan.creates, ...plan.updates];
        const names = [...changing.map((x) => x.name), ...plan.deletes];
        const w = await committed(by, () =>
          write(
            names,
            (cur) =>
              planApply(
                changing,
                o.owner,
                (n) => cur.get(n),
                plan.deletes.filter((n) => cur.get(n)?.owner === o.owner),
              ),
            o.owner,
            by,
          ),
        );
        publishWrite(w.version, w.written, w.plan.deletes);
        const merged: ApplyPlan = {
          ...w.plan,
          unchanged: [...plan.unchanged, ...w.plan.unchanged],
          conflicts: [...plan.conflicts, ...w.plan.conflicts],
          invalid: plan.invalid,
        };
        return emptyResult(Math.max(w.version, snap.version), merged);
      });
    },
    async upsert(input, o = {}) {
      if (closed) throw new Error('registry is closed');
      const svc = parseService(input);
      const by = o.by ?? 'api';
      return serial(async () => {
        const w = await committed(by, () => write([svc.name], (cur) => planApply([svc], 'api', (n) => cur.get(n), [], { prune: false }), 'api', by));
        const conflict = w.plan.conflicts[0];
        if (conflict) throw new RegistryConflictError(svc.name, conflict.owner);
        if (isNoop(w.plan)) {
          // SPEC 6: every upsert is audited, an unchanged one too (it bumps nothing).
          opts.audit?.append({ action: 'registry.upsert', subject: by, service: svc.name, allow: true, reason: 'unchanged' });
          if (!snap.get(svc.name)) await reload();
          return snap.get(svc.name)!;
        }
        publishWrite(w.version, w.written, []);
        return w.written.get(svc.name)!.svc;
      });
    },
    remove(name, o) {
      if (closed) return Promise.reject(new Error('registry is closed'));
      const by = o.by ?? o.owner;
      return serial(async () => {
        const w = await committed(by, () =>
          write(
            [name],
            (cur) => {
              const plan = planApply([], o.owner, () => undefined, [], { prune: false });
              const e = cur.get(name);
              if (e && e.owner !== o.owner) plan.conflicts.push({ name, owner: e.owner });
              else if (e) plan.deletes.push(name);
              return plan;
            },
            o.owner,
            by,
          ),
        );
        const conflict = w.plan.conflicts[0];
        if (conflict) throw new RegistryConflictError(name, conflict.owner);
        if (isNoop(w.plan)) {
          if (snap.entry(name)) await reload();
          return false;
        }
        publishWrite(w.version, w.written, w.plan.deletes);
        return true;
      });
    },
    reload: () => {
      const p = queue.then(reload);
      queue = p.catch(() => {});
      return p;
    },
    async close() {
      if (closed) return;
      closed = true;
      if (timer) clearInterval(timer);
      await unlisten();
    },
  };
  return registry;
}
