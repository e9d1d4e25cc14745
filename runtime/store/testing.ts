/**
 * Test helper: the store backends every store test runs on. PGlite in memory always; real
 * PostgreSQL too when TEST_DATABASE_URL is set, each store in its own fresh schema (dropped on
 * close) so parallel test files never see each other's rows.
 */
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { openStore, type Store, type StoreOptions } from './factory.js';

export interface TestBackend {
  name: 'pglite' | 'postgres';
  open(opts?: Partial<StoreOptions>): Promise<Store>;
}

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL || undefined;

export function testSchema(): string {
  return `t_${randomBytes(6).toString('hex')}`;
}

async function dropSchema(url: string, schema: string): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(`drop schema if exists "${schema}" cascade`);
  } finally {
    await sql.end();
  }
}

/** Opens a Postgres store in a fresh schema; `schema` reuses one (a "restart" of the same DB). */
export async function openTestPostgres(opts: Partial<StoreOptions> & { keepSchema?: boolean } = {}): Promise<Store> {
  const url = TEST_DATABASE_URL;
  if (!url) throw new Error('TEST_DATABASE_URL is not set');
  const schema = opts.schema ?? testSchema();
  const store = await openStore({ ...opts, url, schema });
  if (opts.keepSchema) return store;
  return {
    ...store,
    close: async () => {
      await store.close();
      await dropSchema(url, schema);
    },
  };
}

let template: Promise<Blob> | undefined;

/**
 * A fresh, migrated in-memory PGlite. Booting PGlite costs seconds, loading a dump well under one,
 * so each test worker migrates one template and every store starts from a copy of it.
 */
export async function openTestPglite(o: Partial<StoreOptions> = {}): Promise<Store> {
  template ??= (async () => {
    const t = await openStore({ backend: 'memory' });
    const blob = await t.dump!();
    await t.close();
    return blob;
  })();
  return openStore({ ...o, backend: 'memory', loadDataDir: await template });
}

export function testBackends(): TestBackend[] {
  const list: TestBackend[] = [{ name: 'pglite', open: (o = {}) => openTestPglite(o) }];
  if (TEST_DATABASE_URL) list.push({ name: 'postgres', open: (o = {}) => openTestPostgres(o) });
  return list;
}
