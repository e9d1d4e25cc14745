/**
 * A PostgreSQL outage, for real (issue 15 items 10 and 11): a cluster of the test's own is stopped
 * and started under a running identity authority and a second store.
 *
 * - The process survives a stop in the middle of a 10k-user SCIM sync (postgres.js used to throw an
 *   uncaught TypeError from `nextWrite` on the dead connection), requests answer 503
 *   `store_unavailable` promptly (not 500, not a hang), the failed sync never takes effect, and
 *   everything works again once the database is back.
 * - A transaction past its deadline (here: blocked on a row lock) answers 503 and never commits
 *   afterwards, even when the lock goes away.
 * - LISTEN is re-established within a second of the restart, the subscriber's reconnect callback
 *   runs once, and notifications flow again.
 *
 * Skips where no PostgreSQL server binaries are installed.
 */
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { syntheticSnapshot } from '../identity/enterprise/directory/fixtures.js';
import { startIdentityAuthority } from '../identity/server.js';
import { setLogLevel } from '../lib/log.js';
import { openStore, type Store } from './factory.js';
import { pgBinaries, startPgCluster, type PgCluster } from './pg-cluster.testing.js';
import { eventually } from '../lib/poll-testing.js';

setLogLevel('error');
const BIN = pgBinaries();
if (!BIN) console.warn('outage.test.ts skipped: no PostgreSQL server binaries under /usr/lib/postgresql (initdb, pg_ctl)');

type Json = any;
describe.skipIf(!BIN)('PostgreSQL outage', () => {
  let pg: PgCluster;
  let store: Store;
  let srv: Awaited<ReturnType<typeof startIdentityAuthority>>;
  let base: string;
  let admin: postgres.Sql;
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(base + path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    return { status: res.status, json: (text ? JSON.parse(text) : undefined) as Json };
  };
  const count = async (sqlText: string) => Number((await admin.unsafe(sqlText))[0]!.n);

  beforeAll(async () => {
    pg = await startPgCluster();
    store = await openStore({ url: pg.url, queryTimeoutMs: 1500, transactionTimeoutMs: 3000 });
    srv = await startIdentityAuthority({ store, addr: '127.0.0.1:0' });
    await srv.authority.whenReady();
    base = `http://127.0.0.1:${srv.port}`;
    admin = postgres(pg.url, { max: 1, onnotice: () => {}, backoff: () => 0.1 });
  }, 120_000);
  afterAll(async () => {
    await admin?.end({ timeout: 1 }).catch(() => {});
    await srv?.close();
    await store?.close();
    await pg?.destroy();
  });

  it('survives a stop in the middle of a 10k-user sync: 503s, no partial effect, works again after the restart', async () => {
    const body = JSON.stringify({ tenantId: 'big', idp: 'idp_a', ...syntheticSnapshot(10_000) });
    const sync = call('POST', '/v1/directory/sync', body);
    // Stop while the sync's transaction is writing.
    await eventually(
      async () => (await count(`select count(*) as n from pg_stat_activity where application_name = 'writ' and state <> 'idle'`)) > 0,
      'the sync to reach the database',
      30_000,
    );
    await admin.end({ timeout: 1 });
    await pg.stop('immediate');
    const t0 = Date.now();
    const r = await sync;
    expect(r.status).toBe(503);
    expect(r.json.error.code).toBe('store_unavailable');
    const read = await call('GET', '/v1/agents');
    expect(read.status).toBe(503);
    const write = await call('POST', '/v1/agents', { name: 'a1', role: 'worker', capabilities: [] });
    expect(write.status).toBe(503);
    expect(Date.now() - t0).toBeLessThan(10_000);
    await new Promise((r) => setTimeout(r, 500));
    await pg.start();
    admin = postgres(pg.url, { max: 1, onnotice: () => {} });
    // Nothing of the failed sync or the refused write landed.
    expect(await count(`select count(*) as n from directory_employees where tenant_id = 'big'`)).toBe(0);
    expect(await count(`select count(*) as n from identity_agents`)).toBe(0);
    // Back within a few seconds of the restart.
    await eventually(async () => (await call('GET', '/v1/agents')).status === 200, 'reads to work again', 5_000);
    expect((await call('POST', '/v1/agents', { name: 'a1', role: 'worker', capabilities: [] })).status).toBe(201);
    const again = await call('POST', '/v1/directory/sync', body);
    expect(again.status).toBe(200);
    expect(again.json.counts.users_created).toBe(10_000);
  }, 120_000);

  it('a transaction past its deadline answers 503 and never commits afterwards', async () => {
    expect((await call('POST', '/v1/agents', { name: 'bot', role: 'worker', capabilities: [] })).status).toBeLessThan(300);
    expect((await call('POST', '/v1/agents/bot/provision')).status).toBe(200);
    const d = await call('POST', '/v1/delegations/request', { actorName: 'bot', task: 't', action: 'read', resource: 'db/*', reason: 'r' });
    expect(d.status).toBe(201);
    // Another session holds the delegation row: the approve's `select ... for update` waits.
    const holder = postgres(pg.url, { max: 1, onnotice: () => {} });
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const holding = holder.begin(async (tx) => {
      await tx`select id from identity_delegations where id = ${d.json.id} for update`;
      await released;
    });
    await eventually(async () => (await count(`select count(*) as n from pg_locks where mode = 'RowShareLock'`)) > 0, 'the lock', 5_000);
    const t0 = Date.now();
    const r = await call('POST', `/v1/delegations/${d.json.id}/approve`, { approver: 'alice' });
    expect(r.status).toBe(503);
    expect(Date.now() - t0).toBeLessThan(8_000);
    release();
    await holding;
    await holder.end();
    await new Promise((r) => setTimeout(r, 1000));
    const after = await call('GET', `/v1/delegations/${d.json.id}`);
    expect(after.json.status).toBe('pending');
    expect(await count(`select count(*) as n from identity_credentials where kind = 'delegation'`)).toBe(0);
    // And it can be approved now.
    expect((await call('POST', `/v1/delegations/${d.json.id}/approve`, { approver: 'alice' })).status).toBe(200);
  }, 60_000);

  it('LISTEN comes back within a second of a restart, with one reconnect callback', async () => {
    const other = await openStore({ url: pg.url, migrate: false });
    const got: string[] = [];
    let reconnects = 0;
    const unlisten = await store.listen(
      'writ_outage_test',
      (p) => got.push(p),
      () => reconnects++,
    );
    await other.notify('writ_outage_test', 'before');
    await eventually(() => got.includes('before'), 'the first notification', 2_000);
    await admin.end({ timeout: 1 });
    await pg.stop('immediate');
    await new Promise((r) => setTimeout(r, 1500));
    await pg.start();
    const started = Date.now();
    await eventually(() => reconnects === 1, 'the reconnect callback', 3_000);
    expect(Date.now() - started).toBeLessThan(1_500);
    await eventually(
      async () => {
        await other.notify('writ_outage_test', 'after').catch(() => {});
        return got.includes('after');
      },
      'a notification after the restart',
      3_000,
    );
    expect(Date.now() - started).toBeLessThan(2_500);
    expect(reconnects).toBe(1);
    await unlisten();
    await other.close();
    admin = postgres(pg.url, { max: 1, onnotice: () => {} });
  }, 60_000);

  it('closing lets calls in flight finish, and does not wait for a database that has gone', async () => {
    // Healthy: the query and the transaction in flight get their answers before the pool ends.
    const healthy = await openStore({ url: pg.url, migrate: false });
    // (drizzle's queries are thenables that run when awaited: Promise.resolve starts them.)
    const query = Promise.resolve(healthy.db.execute(sql`select pg_sleep(0.3), 42 as n`));
    const tx = healthy.db.transaction(async (t) => {
      await t.execute(sql`select pg_sleep(0.3)`);
      return (await t.execute(sql`select 7 as n`)) as unknown as { n: number }[];
    });
    await new Promise((r) => setTimeout(r, 50));
    await healthy.close();
    expect(((await query) as unknown as { n: number }[])[0]!.n).toBe(42);
    expect((await tx)[0]!.n).toBe(7);
    // Gone: a connection asked to end while its query fails against the stopped server never
    // drains, and postgres.js's end used to wait out its whole timeout (5 s) for it.
    const orphan = await openStore({ url: pg.url, migrate: false });
    await orphan.db.execute(sql`select 1`);
    await admin.end({ timeout: 1 });
    await pg.stop('immediate');
    // Its rejection may come while close is awaited: caught as it comes (an unhandled rejection
    // otherwise), asserted below.
    const refused = Promise.resolve(orphan.db.execute(sql`select 1`)).then(
      () => undefined,
      (e: unknown) => e,
    );
    const t0 = Date.now();
    await orphan.close();
    expect(Date.now() - t0).toBeLessThan(2_000);
    expect(await refused).toBeInstanceOf(Error);
    await pg.start();
    admin = postgres(pg.url, { max: 1, onnotice: () => {} });
  }, 60_000);
});
