import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import { migrate } from './migrate.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore, rowsOf } from './factory.js';
import { testBackends, TEST_DATABASE_URL, openTestPostgres, testSchema } from './testing.js';

describe.each(testBackends())('store on $name', (b) => {
  it('migrates idempotently and runs queries through drizzle', async () => {
    const store = await b.open();
    try {
      await migrate(store);
      await migrate(store);
      await store.db.execute(sql`insert into writ_meta(key, value) values ('k', 'v')`);
      expect(await rowsOf(store.db, sql`select value from writ_meta where key = 'k'`)).toEqual([{ value: 'v' }]);
      const list = (await rowsOf<{ name: string }>(store.db, sql`select name from writ_migrations order by name`)).map((r) => r.name);
      expect(list[0]).toBe('0000_base');
      expect(new Set(list).size).toBe(list.length);
    } finally {
      await store.close();
    }
  });

  it('delivers NOTIFY to a listener', async () => {
    const store = await b.open();
    try {
      // listen() resolves once LISTEN is in force; a fixed sleep raced the connection under CI load.
      let deliver!: (payload: string) => void;
      const got = new Promise<string>((resolve) => (deliver = resolve));
      const stop = await store.listen(`writ_test_${process.pid}`, deliver);
      await store.notify(`writ_test_${process.pid}`, 'hello');
      expect(await got).toBe('hello');
      await stop();
    } finally {
      await store.close();
    }
  });
});

describe.skipIf(!TEST_DATABASE_URL)('store on postgres: concurrent start', () => {
  it('two replicas migrating the same schema at once both succeed, once each', async () => {
    const schema = testSchema();
    const [a, b] = await Promise.all([openTestPostgres({ schema, keepSchema: true }), openTestPostgres({ schema, keepSchema: true })]);
    try {
      const rows = await rowsOf<{ n: number }>(a.db, sql`select name, count(*)::int as n from writ_migrations group by name`);
      expect(rows.length).toBeGreaterThan(0);
      for (const r of rows) expect(r.n).toBe(1);
    } finally {
      await b.close();
      await a.db.execute(sql.raw(`drop schema "${schema}" cascade`));
      await a.close();
    }
  });

  it('a transaction whose connection is killed between statements fails with CONNECTION_CLOSED; nothing is written after', async () => {
    // postgres.js would write the next statement to the dead socket from a setImmediate (an
    // uncaught TypeError that ends the process) or to the pool's next socket, outside the transaction.
    const store = await openTestPostgres();
    const admin = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
    try {
      await store.db.execute(sql`create table killed_tx (n int)`);
      const tx = store.db.transaction(async (t) => {
        await t.execute(sql`insert into killed_tx values (1)`);
        const [row] = await rowsOf<{ pid: number }>(t, sql`select pg_backend_pid() as pid`);
        await admin`select pg_terminate_backend(${row!.pid})`;
        await new Promise((r) => setTimeout(r, 300)); // the body is between statements when the connection goes
        await t.execute(sql`insert into killed_tx values (2)`);
      });
      await expect(tx).rejects.toMatchObject({ code: 'CONNECTION_CLOSED' });
      await new Promise((r) => setTimeout(r, 600)); // past the body's next statement: a write from a setImmediate would have thrown
      expect(await rowsOf(store.db, sql`select n from killed_tx`)).toEqual([]);
    } finally {
      await admin.end();
      await store.close();
    }
  });
});

describe('store on a PGlite folder', () => {
  it('creates a missing data folder with its parents, and a reopen finds the data and the engine settings', async () => {
    const root = mkdtempSync(join(tmpdir(), 'writ-store-'));
    const dataDir = join(root, 'not', 'yet', 'there');
    try {
      const first = await openStore({ backend: 'pglite', dataDir });
      await first.db.execute(sql`insert into writ_meta(key, value) values ('kept', 'yes')`);
      await first.close();
      const again = await openStore({ backend: 'pglite', dataDir });
      try {
        expect(await rowsOf(again.db, sql`select value from writ_meta where key = 'kept'`)).toEqual([{ value: 'yes' }]);
        // The engine's settings (pglite-worker.ts) hold on a folder: a small buffer pool, small samples.
        const settings = await rowsOf<{ name: string; setting: string }>(
          again.db,
          sql`select name, setting from pg_settings where name in ('shared_buffers', 'default_statistics_target') order by name`,
        );
        expect(settings).toEqual([
          { name: 'default_statistics_target', setting: '10' },
          { name: 'shared_buffers', setting: '2048' },
        ]);
      } finally {
        await again.close();
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
