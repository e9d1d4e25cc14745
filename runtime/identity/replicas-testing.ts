/**
 * Test helpers for identity authorities as replicas of one deployment: two authorities on one
 * fresh PostgreSQL schema, and a schema's change-feed LISTEN connections killed while something
 * is written (a failover, a proxy dropping idle connections: no notification reaches anyone).
 */
import postgres from 'postgres';
import { eventually } from '../lib/poll-testing.js';
import type { Store } from '../store/factory.js';
import { openTestPostgres, TEST_DATABASE_URL, testSchema } from '../store/testing.js';
import { startIdentityAuthority } from './server.js';
import { loadConfig } from '../lib/settings.js';

export type Authority = Awaited<ReturnType<typeof startIdentityAuthority>>;

export interface AuthorityPair {
  schema: string;
  a: Authority;
  b: Authority;
  /** Stops both authorities and closes their stores. */
  close(): Promise<void>;
}

/** Two authorities with `env` on one new schema, both ready and `settled` (what that means: `what`). */
export async function authorityPair(env: Record<string, string>, settled: (a: Authority) => boolean, what: string): Promise<AuthorityPair> {
  const schema = testSchema();
  const stores: Store[] = [];
  const running: Authority[] = [];
  const close = async () => {
    for (const r of running.reverse()) await r.close();
    for (const s of stores.reverse()) await s.close();
  };
  try {
    stores.push(await openTestPostgres({ schema }));
    stores.push(await openTestPostgres({ schema, keepSchema: true }));
    for (const store of stores) running.push(await startIdentityAuthority({ store, config: loadConfig(env), addr: '127.0.0.1:0' }));
    const [a, b] = running as [Authority, Authority];
    await Promise.all([a.authority.whenReady(), b.authority.whenReady()]);
    await eventually(() => settled(a) && settled(b), what, 5000);
    return { schema, a, b, close };
  } catch (e) {
    await close();
    throw e;
  }
}

/**
 * Terminates the LISTEN connections of `schema`'s identity change feed, then runs `write` on an
 * admin connection while nobody listens. Resolves with how many connections were terminated.
 */
export async function withListenersKilled(schema: string, write: (admin: postgres.Sql) => Promise<unknown>): Promise<number> {
  const admin = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
  try {
    const killed = await admin`select pg_terminate_backend(pid) from pg_stat_activity where query ilike ${`listen%identity_changes_${schema}%`}`;
    await write(admin);
    return killed.length;
  } finally {
    await admin.end();
  }
}
