/**
 * Test helper: the store backends every store test runs on. PGlite in memory always; real
 * PostgreSQL too when TEST_DATABASE_URL is set, each store in its own fresh schema (dropped on
 * close) so parallel test files never see each other's rows.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { openStore, type Store, type StoreOptions } from './factory.js';
import { loadMigrations } from './migrate.js';

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
 * The migrated template's dump, made once for the whole run: a file in the temp folder named by
 * what it holds (every migration and the PGlite version), so test files and workers (each its
 * own module state) load it instead of each running initdb and the migrations (~3 s a file).
 * Written to a temporary name and renamed: a reader never sees half a dump.
 */
async function templateDump(): Promise<Blob> {
  const pglite = await readFile(new URL('../package.json', import.meta.resolve('@electric-sql/pglite')), 'utf8');
  const key = createHash('sha256')
    .update(JSON.stringify([pglite, loadMigrations()]))
    .digest('hex')
    .slice(0, 16);
  const file = join(tmpdir(), `writ-test-pglite-${key}.tar`);
  try {
    return new Blob([await readFile(file)]);
  } catch {
    // Not made yet (or unreadable): make it.
  }
  const t = await openStore({ backend: 'memory' });
  const blob = await t.dump!();
  await t.close();
  const part = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  await writeFile(part, Buffer.from(await blob.arrayBuffer()));
  await rename(part, file);
  // Templates of other migrations (an older checkout's) are not needed again: 41 MB each.
  for (const old of await readdir(tmpdir()).catch(() => [])) {
    if (/^writ-test-pglite-[0-9a-f]{16}\.tar$/.test(old) && join(tmpdir(), old) !== file) await rm(join(tmpdir(), old), { force: true });
  }
  return blob;
}

/**
 * A fresh, migrated in-memory PGlite. Booting PGlite and migrating costs seconds, loading a dump
 * well under one, so every store starts from a copy of one migrated template (templateDump).
 */
export async function openTestPglite(o: Partial<StoreOptions> = {}): Promise<Store> {
  template ??= templateDump();
  return openStore({ ...o, backend: 'memory', loadDataDir: await template });
}

export function testBackends(): TestBackend[] {
  const list: TestBackend[] = [{ name: 'pglite', open: (o = {}) => openTestPglite(o) }];
  if (TEST_DATABASE_URL) list.push({ name: 'postgres', open: (o = {}) => openTestPostgres(o) });
  return list;
}
