/**
 * One store, two engines. Real PostgreSQL (postgres.js) when a URL is given, embedded PGlite
 * otherwise (a data folder, or memory). Both are wrapped in drizzle with the same schema, and
 * both expose raw SQL, LISTEN/NOTIFY and close. Migrations run on open. PGlite runs on a worker
 * thread (pglite-remote.ts), off the event loop that answers requests.
 *
 * On PostgreSQL every query and transaction has a deadline, a lost connection is an error and
 * never a crash, reconnects back off at most 1 s, and LISTEN is re-established after a restart
 * with a reconnect callback for the resync (pg-guard.ts).
 */
import { mkdirSync } from 'node:fs';
import type { PGlite } from '@electric-sql/pglite';
import postgres from 'postgres';
import { drizzle as drizzlePg } from 'drizzle-orm/postgres-js';
import { drizzle as drizzleLite } from 'drizzle-orm/pglite';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { migrate } from './migrate.js';
import { createListener, guardedClient, InFlight } from './pg-guard.js';
import { RemotePglite } from './pglite-remote.js';

export type Db = PgDatabase<PgQueryResultHKT>;
export type Backend = 'postgres' | 'pglite' | 'memory';

export interface Store {
  readonly kind: 'postgres' | 'pglite';
  readonly db: Db;
  /** Runs one or more SQL statements with no parameters (migrations, DDL), optionally as one transaction. */
  exec(sqlText: string, opts?: { transaction?: boolean }): Promise<void>;
  /**
   * Subscribes to a NOTIFY channel; resolves with an unsubscribe function. `onReconnect` runs
   * after the subscription was lost (database restart, network) and re-established: payloads sent
   * in between are lost, so a consumer resyncs from the tables then. PGlite never reconnects.
   */
  listen(channel: string, onPayload: (payload: string) => void, onReconnect?: () => void): Promise<() => Promise<void>>;
  notify(channel: string, payload: string): Promise<void>;
  close(): Promise<void>;
  /**
   * PGlite only: loads rows written as COPY text (`copy-text.ts`) into `columns` of `table` with
   * one `COPY` statement (atomic: one refused row refuses them all). For many rows it costs the
   * engine thread, which shares this process's cores, well under an insert of the same rows from
   * a JSON parameter. Unset on PostgreSQL, where callers insert: with postgres.js 3.4 a COPY the
   * server refuses once its data is sent never settles its stream, and callers need the refusal
   * (audit/store.ts retries a batch refused as a duplicate the careful way).
   */
  copyRows?: (table: string, columns: readonly string[], text: string) => Promise<void>;
  /** PGlite only: a dump of the data dir (for cheap copies in tests). */
  dump?: () => Promise<Blob | File>;
}

export interface StoreOptions {
  backend?: Backend;
  /** PostgreSQL URL; selects the postgres backend when set. */
  url?: string;
  /** PGlite data folder; ignored for memory and postgres. */
  dataDir?: string;
  /** PostgreSQL schema to use (created if absent); tests use one schema per store. */
  schema?: string;
  /** Run migrations on open (default true). */
  migrate?: boolean;
  /** Max pool size for postgres (default 10). */
  poolSize?: number;
  /** PGlite only: start from this data-dir dump (tests use a migrated template). */
  loadDataDir?: Blob;
  /** PGlite only: how often tables are vacuumed and analyzed as autovacuum would (default 60 s; 0: never). */
  maintenanceMs?: number;
  /** postgres only: deadline of one query, also the server's statement_timeout (default 10 s). */
  queryTimeoutMs?: number;
  /** postgres only: deadline of one transaction (default 60 s: a 100k-user directory sync fits). */
  transactionTimeoutMs?: number;
}

export const DEFAULT_QUERY_TIMEOUT_MS = 10_000;
export const DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000;

const IDENT = /^[a-z_][a-z0-9_]{0,62}$/;

export async function openStore(opts: StoreOptions = {}): Promise<Store> {
  const backend: Backend = opts.backend ?? (opts.url ? 'postgres' : 'pglite');
  if (opts.schema !== undefined && !IDENT.test(opts.schema)) throw new Error(`invalid schema name ${opts.schema}`);
  const store = backend === 'postgres' ? await openPostgres(opts) : await openPglite(backend, opts);
  if (opts.migrate !== false) {
    try {
      await migrate(store);
    } catch (e) {
      await store.close();
      throw e;
    }
  }
  return store;
}

/** Advisory lock key serializing schema creation (distinct from the migration lock). */
const SCHEMA_LOCK_KEY = 5_717_002;

async function openPostgres(opts: StoreOptions): Promise<Store> {
  if (!opts.url) throw new Error('postgres backend needs a database URL');
  const connection: Record<string, string> = { application_name: 'writ' };
  if (opts.schema) {
    const admin = postgres(opts.url, { max: 1, onnotice: () => {}, fetch_types: false });
    try {
      // `create schema if not exists` races between concurrent starters (unique violation on
      // pg_namespace); the same advisory lock as the migrations serializes it.
      await admin.begin((tx) => tx.unsafe(`select pg_advisory_xact_lock(${SCHEMA_LOCK_KEY}); create schema if not exists "${opts.schema}"`));
    } finally {
      await admin.end();
    }
    connection.search_path = opts.schema;
  }
  const queryMs = opts.queryTimeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS;
  // The server gives up on a statement, or on a transaction left idle, no later than we do.
  connection.statement_timeout = String(queryMs);
  connection.idle_in_transaction_session_timeout = String(queryMs);
  const options = {
    onnotice: () => {},
    connection,
    connect_timeout: Math.max(1, Math.ceil(queryMs / 2000)),
    // Reconnect soon after the database is back (the default backoff grows to 20 s).
    backoff: (n: number) => Math.min(0.05 * 2 ** n, 1),
    // No array-type catalog query on each new connection: postgres.js drops its promise, so a
    // connection lost while it runs ends the process (porsager/postgres#1192). No column or
    // parameter here is an array.
    fetch_types: false,
  };
  const sql = postgres(opts.url, { ...options, max: opts.poolSize ?? 10 });
  const inFlight = new InFlight();
  const client = guardedClient(sql, { queryMs: queryMs + 1000, txMs: opts.transactionTimeoutMs ?? DEFAULT_TRANSACTION_TIMEOUT_MS }, inFlight);
  // Migrations and DDL: no statement timeout (a migration may wait for another replica's lock).
  const slow = guardedClient(sql, { queryMs: 600_000, txMs: 600_000 }, inFlight);
  const listener = createListener(opts.url, options);
  const db = drizzlePg(client) as unknown as Db;
  return {
    kind: 'postgres',
    db,
    exec: async (text, o) => {
      if (o?.transaction) await slow.begin((tx) => tx.unsafe(`set local statement_timeout = 0; ${text}`));
      else await slow.unsafe(text);
    },
    listen: (channel, onPayload, onReconnect) => listener.listen(channel, onPayload, onReconnect),
    notify: async (channel, payload) => {
      await client.notify(channel, payload);
    },
    close: async () => {
      await listener.close();
      // What callers still wait on finishes first (at most 5 s), then the pool ends at once: with
      // its server gone a connection never drains, and `end` would wait out its whole timeout.
      await inFlight.settled(5000);
      await sql.end({ timeout: 0 });
    },
  };
}

async function openPglite(backend: Backend, opts: StoreOptions): Promise<Store> {
  const dataDir = backend === 'memory' ? undefined : opts.dataDir;
  // A folder (not a `scheme://` location) is created with its parents: a fresh checkout has no `.data/`.
  if (dataDir && !dataDir.includes('://')) mkdirSync(dataDir, { recursive: true });
  // The engine runs on its own thread (pglite-remote.ts): its work never stalls this event loop.
  const pg = await RemotePglite.open({
    dataDir,
    schema: opts.schema,
    loadDataDir: opts.loadDataDir && (await opts.loadDataDir.arrayBuffer()),
    maintenanceMs: opts.maintenanceMs,
  });
  const db = drizzleLite({ client: pg as unknown as PGlite }) as unknown as Db;
  return {
    kind: 'pglite',
    db,
    dump: () => pg.dumpDataDir(),
    copyRows: async (table, columns, text) => {
      for (const name of [table, ...columns]) if (!IDENT.test(name)) throw new Error(`invalid identifier ${name}`);
      await pg.query(`copy ${table} (${columns.join(', ')}) from '/dev/blob'`, [], { blob: new Blob([text]) });
    },
    exec: (text, o) => pg.exec(text, o),
    listen: (channel, onPayload) => pg.listen(channel, onPayload),
    notify: async (channel, payload) => {
      await pg.query('select pg_notify($1, $2)', [channel, payload]);
    },
    close: () => pg.close(),
  };
}

/** Rows of a raw `db.execute(sql…)`, whichever engine ran it (postgres.js: array; PGlite: {rows}). */
export async function rowsOf<T>(db: Db, query: import('drizzle-orm').SQL): Promise<T[]> {
  const r = (await db.execute(query)) as unknown;
  return Array.isArray(r) ? (r as T[]) : (r as { rows: T[] }).rows;
}
