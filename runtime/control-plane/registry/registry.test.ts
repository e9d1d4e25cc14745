import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../../lib/log.js';
import { rowsOf, type Store } from '../../store/factory.js';
import { openTestPostgres, testBackends, testSchema, TEST_DATABASE_URL } from '../../store/testing.js';
import { openAuditChain, type AuditChain } from '../audit/chain.js';
import type { Service } from '../types.js';
import { createRegistry, type Registry } from './registry.js';
import { RegistryValidationError } from './service.js';

setLogLevel('error');

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);

async function rowCount(store: Store): Promise<number> {
  return (await rowsOf<{ n: number }>(store.db, sql`select count(*)::int as n from registry_services`))[0]!.n;
}

async function dbDoc(store: Store, name: string): Promise<unknown> {
  return (await rowsOf<{ doc: unknown }>(store.db, sql`select doc from registry_services where name = ${name}`))[0]?.doc;
}

/** Waits (bounded) until `check` holds; the assertion is on the final value, not on timing. */
async function eventually<T>(read: () => T, check: (v: T) => boolean, ms = 5000): Promise<T> {
  const until = Date.now() + ms;
  let v = read();
  while (!check(v) && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 10));
    v = read();
  }
  return v;
}

describe.each(testBackends())('registry on $name', (b) => {
  let store: Store;
  let audit: AuditChain;
  let reg: Registry;
  let clock = T0;
  beforeAll(async () => {
    store = await b.open();
    audit = await openAuditChain(store);
    reg = await createRegistry(store, { audit, now: () => clock });
  });
  afterAll(async () => {
    await reg.close();
    await audit.close();
    await store.close();
  });

  it('upserts, gets, lists sorted by name and finds by upstream', async () => {
    const stored = await reg.upsert({ name: 'orders', upstream: 'orders.shop.svc:8080', owner: 'team-a', requireScope: 'orders:read' });
    expect(stored).toEqual({
      name: 'orders',
      upstream: 'orders.shop.svc:8080',
      owner: 'team-a',
      requireScope: 'orders:read',
      public: false,
      registeredAt: new Date(T0).toISOString(),
    });
    await reg.upsert({ name: 'billing', upstream: 'Billing.svc:443', public: true });
    await reg.upsert({
      name: 'agent-x',
      upstream: 'agent-x.svc:80',
      kind: 'agent',
      allowModels: ['gpt'],
      budget: { tokensPerHour: 1000 },
      dataClass: 'regulated',
    });
    expect(reg.get('orders')).toEqual(stored);
    expect(reg.get('nope')).toBeUndefined();
    expect(reg.list().map((s) => s.name)).toEqual(['agent-x', 'billing', 'orders']);
    expect(reg.findByUpstream('billing.svc:443')?.name).toBe('billing');
    expect(reg.findByUpstream('orders.shop.svc:8080')?.name).toBe('orders');
    expect(reg.findByUpstream('orders.shop.svc:9090')).toBeUndefined();
    // The durable row holds the same document.
    expect(await dbDoc(store, 'agent-x')).toEqual(reg.get('agent-x'));
    // Snapshot objects are frozen: the hot path cannot be corrupted by a caller.
    expect(() => (reg.get('agent-x')!.allowModels as string[]).push('x')).toThrow();
  });

  it('sets registeredAt once: kept on update, honoured when given on create, zero means unset', async () => {
    clock = T0 + 60_000;
    const first = await reg.upsert({ name: 'ts-svc', upstream: 'ts.svc:1' });
    expect(first.registeredAt).toBe(new Date(T0 + 60_000).toISOString());
    clock = T0 + 120_000;
    const second = await reg.upsert({ name: 'ts-svc', upstream: 'ts.svc:2', registeredAt: '2020-01-01T00:00:00Z' });
    expect(second.registeredAt).toBe(first.registeredAt);
    expect(second.upstream).toBe('ts.svc:2');
    expect(reg.get('ts-svc')).toEqual(second);
    const given = await reg.upsert({ name: 'ts-given', upstream: 'g.svc:1', registeredAt: '2020-01-01T02:00:00+02:00' });
    expect(given.registeredAt).toBe('2020-01-01T00:00:00.000Z');
    const zero = await reg.upsert({ name: 'ts-zero', upstream: 'z.svc:1', registeredAt: '0001-01-01T00:00:00Z' });
    expect(zero.registeredAt).toBe(new Date(clock).toISOString());
  });

  it('omits the agent-governance block when empty', async () => {
    const s = await reg.upsert({
      name: 'plain',
      upstream: 'plain.svc:80',
      kind: '',
      allowModels: [],
      allowTools: [],
      allowAgents: [],
      egressAllow: [],
      budget: { tokensPerHour: 0, callsPerHour: 0, costUsdPerDay: 0 },
      dataClass: '',
    });
    expect(Object.keys(s)).toEqual(['name', 'upstream', 'owner', 'requireScope', 'public', 'registeredAt']);
    expect(Object.keys((await dbDoc(store, 'plain')) as object).sort()).toEqual(Object.keys(s).sort());
    const full = await reg.upsert({
      name: 'plain',
      upstream: 'plain.svc:80',
      kind: 'agent',
      allowTools: ['search'],
      budget: { callsPerHour: 5, tokensPerHour: 0 },
    });
    expect(full.kind).toBe('agent');
    expect(full.allowTools).toEqual(['search']);
    expect(full.budget).toEqual({ tokensPerHour: 0, callsPerHour: 5 });
    expect(full.allowModels).toBeUndefined();
  });

  it('rejects invalid services naming the field, changing neither store, snapshot nor audit', async () => {
    const before = { rows: await rowCount(store), list: reg.list(), orders: await dbDoc(store, 'orders'), seq: audit.stats().lastSeq };
    const cases: [unknown, string][] = [
      [{ name: 'orders', upstream: 'orders.svc:80', colour: 'red' }, 'colour'],
      [{ name: 'orders', upstream: 'orders.svc' }, 'upstream'],
      [{ name: 'orders', upstream: 'orders.svc:0' }, 'upstream'],
      [{ name: 'orders', upstream: 'orders.svc:70000' }, 'upstream'],
      [{ name: 'orders', upstream: 'http://orders.svc:80' }, 'upstream'],
      [{ name: 'orders', upstream: 'orders.svc:80', kind: 'robot' }, 'kind'],
      [{ name: 'orders', upstream: 'orders.svc:80', dataClass: 'secret' }, 'dataClass'],
      [{ name: 'orders', upstream: 'orders.svc:80', budget: { tokensPerHour: -1 } }, 'budget.tokensPerHour'],
      [{ name: 'orders', upstream: 'orders.svc:80', budget: { costUsdPerDay: -0.5 } }, 'budget.costUsdPerDay'],
      [{ name: 'orders', upstream: 'orders.svc:80', budget: { callsPerHour: 1.5 } }, 'budget.callsPerHour'],
      [{ name: 'orders', upstream: 'orders.svc:80', budget: { perMinute: 1 } }, 'perMinute'],
      [{ name: 'orders', upstream: 'orders.svc:80', public: 'yes' }, 'public'],
      [{ name: 'orders', upstream: 'orders.svc:80', allowModels: 'gpt' }, 'allowModels'],
      [{ name: 'orders', upstream: 'orders.svc:80', allowModels: ['gpt', 'claude', 'gpt'] }, 'allowModels.2: duplicate entry "gpt"'],
      [{ name: 'orders', upstream: 'orders.svc:80', egressAllow: ['api.example.com:443', 'api.example.com:443'] }, 'egressAllow.1: duplicate entry'],
      [{ name: 'orders', upstream: 'orders.svc:80', registeredAt: 'yesterday' }, 'registeredAt'],
      [{ upstream: 'orders.svc:80' }, 'name'],
      [{ name: '', upstream: 'orders.svc:80' }, 'name'],
      [{ name: '-orders', upstream: 'orders.svc:80' }, 'name: letters, digits and . _ : / - only'],
      ...['x/../orders', 'x/./orders', 'x/..', 'x//orders', 'x/'].map(
        (name) => [{ name, upstream: 'orders.svc:80' }, 'no empty, . or .. segment'] as [unknown, string],
      ),
      [{ name: 'orders' }, 'upstream'],
      [null, 'expected object'],
      [[{ name: 'orders', upstream: 'orders.svc:80' }], 'expected object'],
      ['orders', 'expected object'],
    ];
    for (const [input, field] of cases) {
      const err = await reg.upsert(input).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, JSON.stringify(input)).toBeInstanceOf(RegistryValidationError);
      expect((err as Error).message, JSON.stringify(input)).toContain(field);
      expect((err as Error).message, 'a field is named once').not.toMatch(/(\w+): \1:/);
      expect((err as RegistryValidationError).issues.length).toBeGreaterThan(0);
    }
    expect(await rowCount(store)).toBe(before.rows);
    expect(reg.list()).toEqual(before.list);
    expect(await dbDoc(store, 'orders')).toEqual(before.orders);
    expect(audit.stats().lastSeq).toBe(before.seq);
  });

  it('audits each upsert as registry.upsert', async () => {
    const seq = audit.stats().lastSeq;
    await reg.upsert({ name: 'audited', upstream: 'a.svc:1' }, { by: 'alice' });
    await reg.upsert({ name: 'audited', upstream: 'a.svc:2' });
    const [created, updated] = audit.recent(2);
    expect(created).toMatchObject({ seq: seq + 1, action: 'registry.upsert', subject: 'alice', service: 'audited', allow: true });
    expect(created!.reason).toMatch(/^registered by api \(version \d+\)$/);
    expect(updated).toMatchObject({ seq: seq + 2, action: 'registry.upsert', service: 'audited', allow: true });
    expect(updated!.reason).toMatch(/^updated/);
    expect(audit.verify().ok).toBe(true);
  });

  it('an audit sink that refuses aborts the write: nothing stored, snapshot unchanged', async () => {
    const refusing = await createRegistry(store, {
      audit: {
        append: () => {
          throw new Error('audit unavailable');
        },
      },
    });
    try {
      const rows = await rowCount(store);
      await expect(refusing.upsert({ name: 'never', upstream: 'n.svc:1' })).rejects.toThrow('audit unavailable');
      await expect(refusing.upsert({ name: 'orders', upstream: 'changed.svc:1' })).rejects.toThrow('audit unavailable');
      expect(await rowCount(store)).toBe(rows);
      expect(refusing.get('never')).toBeUndefined();
      expect(refusing.get('orders')?.upstream).toBe('orders.shop.svc:8080');
      expect(((await dbDoc(store, 'orders')) as Service).upstream).toBe('orders.shop.svc:8080');
    } finally {
      await refusing.close();
    }
  });

  it('a commit that fails after the audit append is recorded as not committed, and changes nothing', async () => {
    // A deferred constraint trigger fires at COMMIT, i.e. after the in-transaction audit append.
    await store.exec(`
      create or replace function fail_at_commit() returns trigger language plpgsql as $f$
      begin raise exception 'commit refused for %', new.name; end $f$;
      create constraint trigger fail_at_commit after insert or update on registry_services
        deferrable initially deferred for each row when (new.name = 'doomed') execute function fail_at_commit();`);
    try {
      const seq = audit.stats().lastSeq;
      const rows = await rowCount(store);
      await expect(reg.upsert({ name: 'doomed', upstream: 'd.svc:1' })).rejects.toThrow();
      expect(await rowCount(store)).toBe(rows);
      expect(reg.get('doomed')).toBeUndefined();
      const [attempt, outcome] = audit.recent(2);
      expect(attempt).toMatchObject({ seq: seq + 1, action: 'registry.upsert', service: 'doomed', allow: true });
      expect(outcome).toMatchObject({ seq: seq + 2, action: 'registry.upsert', service: 'doomed', allow: false });
      expect(outcome!.reason).toMatch(/^not committed: .*commit refused for doomed/);
      expect(outcome!.reason.length).toBeLessThan(400);
    } finally {
      await store.exec('drop trigger fail_at_commit on registry_services; drop function fail_at_commit()');
    }
  });

  it('a new instance on the same store loads every service; instances converge through NOTIFY', async () => {
    const other = await createRegistry(store, { resyncMs: 0 });
    try {
      expect(other.list()).toEqual(reg.list());
      await reg.upsert({ name: 'zz-late', upstream: 'late.svc:1', owner: 'x' });
      const seen = await eventually(
        () => other.get('zz-late'),
        (v) => v !== undefined,
      );
      expect(seen).toEqual(reg.get('zz-late'));
      await other.upsert({ name: 'zz-late', upstream: 'late.svc:2' });
      const back = await eventually(
        () => reg.get('zz-late')?.upstream,
        (v) => v === 'late.svc:2',
      );
      expect(back).toBe('late.svc:2');
      // A stale notification (older version) never rolls the snapshot back.
      await store.notify(reg.channel, JSON.stringify({ v: 1, n: ['zz-late'] }));
      await reg.reload();
      expect(reg.get('zz-late')?.upstream).toBe('late.svc:2');
      expect(other.version).toBe(reg.version);
    } finally {
      await other.close();
    }
  });
});

describe.skipIf(!TEST_DATABASE_URL)('registry on postgres: replicas on separate connections', () => {
  it('two registries on the same schema converge through LISTEN/NOTIFY; another schema is not affected', async () => {
    const schema = testSchema();
    const s1 = await openTestPostgres({ schema, keepSchema: true });
    const s2 = await openTestPostgres({ schema, keepSchema: true });
    const s3 = await openTestPostgres();
    const [r1, r2, r3] = await Promise.all([createRegistry(s1, { resyncMs: 0 }), createRegistry(s2, { resyncMs: 0 }), createRegistry(s3, { resyncMs: 0 })]);
    try {
      expect(r1.channel).toBe(r2.channel);
      expect(r3.channel).not.toBe(r1.channel);
      await r1.upsert({ name: 'shared', upstream: 'shared.svc:80', kind: 'agent', allowTools: ['t'] });
      const seen = await eventually(
        () => r2.get('shared'),
        (v) => v !== undefined,
      );
      expect(seen).toEqual(r1.get('shared'));
      // Concurrent updates from both replicas: both end on the version with the highest rev.
      await Promise.all([r1.upsert({ name: 'shared', upstream: 'one.svc:1' }), r2.upsert({ name: 'shared', upstream: 'two.svc:2' })]);
      const final = (await rowsOf<{ doc: Service }>(s1.db, sql`select doc from registry_services where name = 'shared'`))[0]!.doc.upstream;
      expect(
        await eventually(
          () => r1.get('shared')?.upstream,
          (v) => v === final,
        ),
      ).toBe(final);
      expect(
        await eventually(
          () => r2.get('shared')?.upstream,
          (v) => v === final,
        ),
      ).toBe(final);
      expect(r3.get('shared')).toBeUndefined();
    } finally {
      await Promise.all([r1.close(), r2.close(), r3.close()]);
      await s2.close();
      await s3.close();
      await s1.exec(`drop schema "${schema}" cascade`);
      await s1.close();
    }
  });
});
