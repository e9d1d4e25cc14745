/**
 * Ordered SQL migrations from ./migrations (NNNN_name.sql), applied once each, all in one
 * transaction under a transaction-scoped advisory lock, so two replicas starting at once
 * serialize: the second waits, then finds everything applied.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Store } from './factory.js';

const DIR = join(dirname(fileURLToPath(import.meta.url)), 'migrations');
/** Arbitrary constant key of the migration advisory lock. */
const LOCK_KEY = 5_717_001;

export interface Migration {
  name: string;
  sql: string;
}

export function loadMigrations(dir = DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((f) => ({ name: f.replace(/\.sql$/, ''), sql: readFileSync(join(dir, f), 'utf8') }));
}

const quote = (s: string) => `'${s.replace(/'/g, "''")}'`;

/** Applies every migration not yet applied. Migration files must not use the `$writ_migrate$` tag. */
export async function migrate(store: Store, migrations = loadMigrations()): Promise<void> {
  // Which migrations are new is decided inside the locked transaction by the SQL itself,
  // so a concurrent starter can never apply one twice.
  const blocks = migrations.map(
    (m) => `
    if not exists (select 1 from writ_migrations where name = ${quote(m.name)}) then
      ${m.sql.replace(/;\s*$/, '')};
      insert into writ_migrations(name) values (${quote(m.name)});
    end if;`,
  );
  const script = `
  select pg_advisory_xact_lock(${LOCK_KEY});
  create table if not exists writ_migrations (name text primary key, applied_at timestamptz not null default now());
  do $writ_migrate$
  begin
    ${blocks.join('\n')}
  end
  $writ_migrate$;`;
  await store.exec(script, { transaction: true });
}
