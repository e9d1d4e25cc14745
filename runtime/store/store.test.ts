import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
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
      const got = new Promise<string>((resolve) => void store.listen('writ_test', resolve));
      await new Promise((r) => setTimeout(r, 50));
      await store.notify('writ_test', 'hello');
      expect(await got).toBe('hello');
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
});

describe('store on a PGlite folder', () => {
  it('creates a missing data folder with its parents, and a reopen finds the data', async () => {
    const root = mkdtempSync(join(tmpdir(), 'writ-store-'));
    const dataDir = join(root, 'not', 'yet', 'there');
    try {
      const first = await openStore({ backend: 'pglite', dataDir });
      await first.db.execute(sql`insert into writ_meta(key, value) values ('kept', 'yes')`);
      await first.close();
      const again = await openStore({ backend: 'pglite', dataDir });
      try {
        expect(await rowsOf(again.db, sql`select value from writ_meta where key = 'kept'`)).toEqual([{ value: 'yes' }]);
      } finally {
        await again.close();
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
