/**
 * One store, two engines. Real PostgreSQL (postgres.js) when a URL is given, embedded PGlite
 * otherwise (a data folder, or memory). Both are wrapped in drizzle with the same schema, and
 * both expose raw SQL, LISTEN/NOTIFY and close. Migrations run on open.
 */
import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import postgres from 'postgres';
import { drizzle as drizzlePg } from 'drizzle-orm/postgres-js';
import { drizzle as drizzleLite } from 'drizzle-orm/pglite';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { migrate } from './migrate.js';

export type Db = PgDatabase<PgQueryResultHKT>;
export type Backend = 'postgres' | 'pglite' | 'memory';

export interface Store {
  readonly kind: 'postgres' | 'pglite';
  readonly db: Db;
  /** Runs one or more SQL statements with no parameters (migrations, DDL), optionally as one transaction. */
  exec(sqlText: string, opts?: { transaction?: boolean }): Promise<void>;
  /** Subscribes to a NOTIFY channel; resolves with an unsubscribe function. */
  listen(channel: string, onPayload: (payload: string) => void): Promise<() => Promise<void>>;
  notify(channel: string, payload: string): Promise<void>;
  close(): Promise<void>;
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
}

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
    const admin = postgres(opts.url, { max: 1, onnotice: () => {} });
    try {
      // `create schema if not exists` races between concurrent starters (unique violation on
      // pg_namespace); the same advisory lock as the migrations serializes it.
      await admin.begin((tx) => tx.unsafe(`select pg_advisory_xact_lock(${SCHEMA_LOCK_KEY}); create schema if not exists "${opts.schema}"`));
    } finally {
      await admin.end();
    }
    connection.search_path = opts.schema;
  }
  const sql = postgres(opts.url, { max: opts.poolSize ?? 10, onnotice: () => {}, connection });
  const db = drizzlePg(sql) as unknown as Db;
  return {
    kind: 'postgres',
    db,
    exec: async (text, o) => {
      if (o?.transaction) await sql.begin((tx) => tx.unsafe(text));
      else await sql.unsafe(text);
    },
    listen: async (channel, onPayload) => {
      const sub = await sql.listen(channel, (p) => onPayload(p));
      return async () => sub.unlisten();
    },
    notify: async (channel, payload) => {
      await sql.notify(channel, payload);
    },
    close: async () => {
      await sql.end({ timeout: 5 });
    },
  };
}

async function openPglite(backend: Backend, opts: StoreOptions): Promise<Store> {
  const dataDir = backend === 'memory' ? undefined : opts.dataDir;
  // A folder (not a `scheme://` location) is created with its parents: a fresh checkout has no `.data/`.
  if (dataDir && !dataDir.includes('://')) mkdirSync(dataDir, { recursive: true });
  const pg = new PGlite(dataDir, opts.loadDataDir ? { loadDataDir: opts.loadDataDir } : {});
  await pg.waitReady;
  if (opts.schema) {
    await pg.exec(`create schema if not exists "${opts.schema}"; set search_path to "${opts.schema}"`);
  }
  const db = drizzleLite(pg) as unknown as Db;
  return {
    kind: 'pglite',
    db,
    dump: () => pg.dumpDataDir('none'),
    exec: async (text, o) => {
      if (o?.transaction) await pg.transaction((tx) => tx.exec(text));
      else await pg.exec(text);
    },
    listen: async (channel, onPayload) => pg.listen(channel, onPayload),
    notify: async (channel, payload) => {
      await pg.query('select pg_notify($1, $2)', [channel, payload]);
    },
    close: async () => {
      if (!pg.closed) await pg.close();
    },
  };
}

/** Rows of a raw `db.execute(sql…)`, whichever engine ran it (postgres.js: array; PGlite: {rows}). */
export async function rowsOf<T>(db: Db, query: import('drizzle-orm').SQL): Promise<T[]> {
  const r = (await db.execute(query)) as unknown;
  return Array.isArray(r) ? (r as T[]) : (r as { rows: T[] }).rows;
}
