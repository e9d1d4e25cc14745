/**
 * apply(desired, {owner}): the one write path. Pure planner tables, then the store-backed
 * registry on PGlite (and PostgreSQL with TEST_DATABASE_URL): create/update/prune/conflict,
 * unchanged re-apply writes nothing, replicas converge on one version.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../../lib/log.js';
import { openStore, rowsOf, type Store } from '../../store/factory.js';
import { pgBinaries, startPgCluster } from '../../store/pg-cluster.testing.js';
import { openTestPostgres, testBackends, testSchema, TEST_DATABASE_URL } from '../../store/testing.js';
import { openAuditChain, type AuditChain } from '../audit/chain.js';
import type { Service } from '../types.js';
import { contentKey, planApply, type CurrentEntry } from './plan.js';
import { createRegistry, type Registry } from './registry.js';
import { RegistryConflictError } from './service.js';

setLogLevel('error');

const svc = (name: string, extra: Partial<Service> = {}): Service => ({ name, upstream: `${name}.svc:80`, ...extra });
const cur = (s: Service, owner: string): CurrentEntry => ({ svc: s, owner, key: contentKey(s) });

describe('planApply (pure)', () => {
  const current = new Map<string, CurrentEntry>([
    ['a', cur(svc('a'), 'folder:x')],
    ['b', cur(svc('b'), 'folder:x')],
    ['c', cur(svc('c'), 'api')],
    ['gone', cur(svc('gone'), 'folder:x')],
  ]);
  const owned = ['a', 'b', 'gone'];
  const rows: { name: string; desired: unknown[]; expect: Record<string, string[]> }[] = [
    { name: 'nothing changed', desired: [svc('a'), svc('b'), svc('gone')], expect: { unchanged: ['a', 'b', 'gone'] } },
    { name: 'create', desired: [svc('a'), svc('b'), svc('gone'), svc('new')], expect: { creates: ['new'], unchanged: ['a', 'b', 'gone'] } },
    { name: 'update', desired: [svc('a', { public: true }), svc('b'), svc('gone')], expect: { updates: ['a'], unchanged: ['b', 'gone'] } },
    { name: 'prune what the owner no longer declares', desired: [svc('a'), svc('b')], expect: { deletes: ['gone'], unchanged: ['a', 'b'] } },
    { name: 'empty desired state prunes everything owned', desired: [], expect: { deletes: ['a', 'b', 'gone'] } },
    {
      name: 'another owner holds it: conflict, never taken over',
      desired: [svc('a'), svc('b'), svc('gone'), svc('c', { public: true })],
      expect: { conflicts: ['c'], unchanged: ['a', 'b', 'gone'] },
    },
    {
      name: 'invalid entry is reported and keeps its current version',
      desired: [{ name: 'a', upstream: 'bad' }, svc('b'), svc('gone')],
      expect: { invalid: ['a'], unchanged: ['b', 'gone'] },
    },
    {
      name: 'duplicate name is invalid',
      desired: [svc('a'), svc('a', { public: true }), svc('b'), svc('gone')],
      expect: { invalid: ['a'], unchanged: ['a', 'b', 'gone'] },
    },
    {
      name: 'registeredAt alone is not a change',
      desired: [svc('a', { registeredAt: '2020-01-01T00:00:00Z' }), svc('b'), svc('gone')],
      expect: { unchanged: ['a', 'b', 'gone'] },
    },
  ];
  it.each(rows)('$name', (row) => {
    const p = planApply(row.desired, 'folder:x', (n) => current.get(n), owned);
    const got = {
      creates: p.creates.map((s) => s.name),
      updates: p.updates.map((s) => s.name),
      deletes: p.deletes,
      unchanged: p.unchanged,
      conflicts: p.conflicts.map((c) => c.name),
      invalid: p.invalid.map((i) => i.name),
    };
    const want = { creates: [], updates: [], deletes: [], unchanged: [], conflicts: [], invalid: [], ...row.expect };
    expect(got).toEqual(want);
  });
  it('names the owner of a conflict and the error of an invalid entry', () => {
    const p = planApply([svc('c'), { name: 'x', upstream: 'nope' }], 'folder:x', (n) => current.get(n), []);
    expect(p.conflicts).toEqual([{ name: 'c', owner: 'api' }]);
    expect(p.invalid[0]!.error).toMatch(/upstream/);
  });
});

async function count(store: Store, table: string): Promise<number> {
  return (await rowsOf<{ n: number }>(store.db, sql.raw(`select count(*)::int as n from ${table}`)))[0]!.n;
}

describe.each(testBackends())('apply on $name', (b) => {
  let store: Store;
  let audit: AuditChain;
  let reg: Registry;
  beforeAll(async () => {
    store = await b.open();
    audit = await openAuditChain(store);
    reg = await createRegistry(store, { audit });
  });
  afterAll(async () => {
    await reg.close();
    await audit.close();
    await store.close();
  });

  it('creates, updates and prunes one owner; an unchanged re-apply writes no row, bumps no version, appends no record', async () => {
    const v0 = reg.version;
    const first = await reg.apply([svc('f1'), svc('f2', { kind: 'agent', egressAllow: ['f1'] })], { owner: 'folder:/p' });
    expect(first).toMatchObject({ created: ['f1', 'f2'], updated: [], deleted: [], unchanged: [], conflicts: [], invalid: [] });
    expect(first.version).toBe(v0 + 1);
    expect(reg.ownerOf('f1')).toBe('folder:/p');

    const seq = audit.stats().lastSeq;
    const updatedAt = await rowsOf<{ u: string }>(store.db, sql`select updated_at::text as u from registry_services where name = 'f1'`);
    const again = await reg.apply([svc('f1'), svc('f2', { kind: 'agent', egressAllow: ['f1'] })], { owner: 'folder:/p' });
    expect(again).toMatchObject({ version: first.version, created: [], updated: [], deleted: [], unchanged: ['f1', 'f2'] });
    expect(reg.version).toBe(first.version);
    expect(audit.stats().lastSeq).toBe(seq);
    expect(await rowsOf<{ u: string }>(store.db, sql`select updated_at::text as u from registry_services where name = 'f1'`)).toEqual(updatedAt);

    const third = await reg.apply([svc('f2', { kind: 'agent', egressAllow: [] })], { owner: 'folder:/p' });
    expect(third).toMatchObject({ version: first.version + 1, updated: ['f2'], deleted: ['f1'] });
    expect(reg.get('f1')).toBeUndefined();
    expect(reg.get('f2')!.egressAllow).toBeUndefined();
    const recs = audit.recent(2);
    expect(recs.map((r) => r.service).sort()).toEqual(['f1', 'f2']);
    expect(recs.find((r) => r.service === 'f1')!.reason).toMatch(/^deleted by folder:\/p/);
  });

  it('a notification that arrives after a newer local write still loads the entries it names', async () => {
    // `late` hears only its own channel, so the other writer's notification is delivered by hand,
    // after `late` has written a newer version itself (the order two replicas can see under load).
    const late = await createRegistry(store, { channel: `late_${process.pid}`, resyncMs: 0 });
    try {
      const other = await reg.apply([svc('race-a'), svc('race-b')], { owner: 'folder:/race' });
      await late.apply([svc('race-own')], { owner: 'folder:/late' });
      expect(late.version).toBeGreaterThan(other.version);
      expect(late.get('race-a')).toBeUndefined();
      await store.db.execute(sql`select pg_notify(${late.channel}, ${JSON.stringify({ v: other.version, n: ['race-a', 'race-b'] })})`);
      const until = Date.now() + 5000;
      while (!late.get('race-b') && Date.now() < until) await new Promise((r) => setTimeout(r, 5));
      expect(late.get('race-a')?.upstream).toBe('race-a.svc:80');
      expect(late.get('race-b')?.upstream).toBe('race-b.svc:80');
      await late.apply([], { owner: 'folder:/late' });
      await reg.apply([], { owner: 'folder:/race' });
    } finally {
      await late.close();
    }
  });

  it('never takes over another owner: apply reports the conflict, upsert and delete answer conflict errors', async () => {
    await reg.upsert({ name: 'api-owned', upstream: 'x.svc:1' });
    const r = await reg.apply([svc('api-owned'), svc('mine')], { owner: 'kubernetes:c1' });
    expect(r.conflicts).toEqual(['api-owned']);
    expect(r.conflictOwners).toEqual({ 'api-owned': 'api' });
    expect(r.created).toEqual(['mine']);
    expect(reg.get('api-owned')!.upstream).toBe('x.svc:1');
    await expect(reg.upsert(svc('mine', { public: true }))).rejects.toBeInstanceOf(RegistryConflictError);
    await expect(reg.remove('mine', { owner: 'api' })).rejects.toBeInstanceOf(RegistryConflictError);
    expect(reg.get('mine')).toBeDefined();
    // The owner itself withdraws it.
    expect(await reg.remove('mine', { owner: 'kubernetes:c1' })).toBe(true);
    expect(reg.get('mine')).toBeUndefined();
    expect(await reg.remove('mine', { owner: 'kubernetes:c1' })).toBe(false);
  });

  it('dry run plans without writing; invalid entries never block the others', async () => {
    const v = reg.version;
    const rowsBefore = await count(store, 'registry_services');
    const dry = await reg.apply([svc('dry1'), { name: 'broken', upstream: 'no-port' }], { owner: 'folder:/dry', dryRun: true });
    expect(dry).toMatchObject({ version: v, created: ['dry1'], invalid: [{ name: 'broken' }] });
    expect(await count(store, 'registry_services')).toBe(rowsBefore);
    expect(reg.get('dry1')).toBeUndefined();
    const live = await reg.apply([svc('dry1'), { name: 'broken', upstream: 'no-port' }], { owner: 'folder:/dry' });
    expect(live.created).toEqual(['dry1']);
    expect(live.invalid.map((i) => i.name)).toEqual(['broken']);
  });

  it('the snapshot is immutable and versioned; its hash follows content', async () => {
    const s1 = reg.snapshot();
    const h1 = s1.hash;
    await reg.apply([svc('dry1', { public: true })], { owner: 'folder:/dry' });
    const s2 = reg.snapshot();
    expect(s2.version).toBe(s1.version + 1);
    expect(s2.hash).not.toBe(h1);
    expect(s1.get('dry1')!.public).toBe(false);
    expect(s2.get('dry1')!.public).toBe(true);
    expect(Object.isFrozen(s2)).toBe(true);
  });
});

describe.skipIf(!TEST_DATABASE_URL)('apply on postgres: two replicas reach the same version', () => {
  it('concurrent applies from two replicas serialize; both converge on version and content', async () => {
    const schema = testSchema();
    const s1 = await openTestPostgres({ schema, keepSchema: true });
    const s2 = await openTestPostgres({ schema, keepSchema: true });
    const [r1, r2] = await Promise.all([createRegistry(s1, { resyncMs: 0 }), createRegistry(s2, { resyncMs: 0 })]);
    try {
      const many = Array.from({ length: 300 }, (_, i) => svc(`bulk-${i}`));
      await Promise.all([r1.apply(many, { owner: 'folder:a' }), r2.apply([svc('k1'), svc('k2')], { owner: 'kubernetes:c' })]);
      await r2.apply([svc('k1', { public: true })], { owner: 'kubernetes:c' });
      const until = Date.now() + 5000;
      while ((r1.version !== r2.version || r1.snapshot().hash !== r2.snapshot().hash) && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
      expect(r1.version).toBe(3);
      expect(r2.version).toBe(3);
      expect(r1.snapshot().hash).toBe(r2.snapshot().hash);
      expect(r1.get('k2')).toBeUndefined();
      expect(r1.get('k1')!.public).toBe(true);
      expect(r2.list().length).toBe(301);
    } finally {
      await Promise.all([r1.close(), r2.close()]);
      await s2.close();
      await s1.exec(`drop schema "${schema}" cascade`);
      await s1.close();
    }
  });
});

describe.skipIf(!pgBinaries())('registry replicas across a PostgreSQL restart (own cluster)', () => {
  it('a change made while the other replica lost its LISTEN connection reaches it on reconnect, not after the 30 s resync', { timeout: 90_000 }, async () => {
    const pg = await startPgCluster();
    try {
      const s1 = await openStore({ url: pg.url, schema: 'reg_restart' });
      const s2 = await openStore({ url: pg.url, schema: 'reg_restart' });
      const [r1, r2] = await Promise.all([createRegistry(s1), createRegistry(s2)]);
      try {
        await r1.apply([svc('before')], { owner: 'folder:x' });
        const until = async (ok: () => boolean, ms: number) => {
          const end = Date.now() + ms;
          while (!ok() && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
          return ok();
        };
        expect(await until(() => r2.get('before') !== undefined, 5000)).toBe(true);
        await pg.stop('immediate');
        await pg.start();
        // r1 writes as soon as it can; r2's LISTEN is coming back on its own.
        let wrote = false;
        for (let i = 0; i < 100 && !wrote; i++) {
          wrote = await r1.apply([svc('before'), svc('after')], { owner: 'folder:x' }).then(
            () => true,
            () => false,
          );
          if (!wrote) await new Promise((r) => setTimeout(r, 100));
        }
        expect(wrote).toBe(true);
        const t0 = Date.now();
        expect(await until(() => r2.get('after') !== undefined && r2.version === r1.version, 10_000)).toBe(true);
        expect(Date.now() - t0).toBeLessThan(10_000);
      } finally {
        await Promise.all([r1.close(), r2.close()]);
        await s1.close().catch(() => {});
        await s2.close().catch(() => {});
      }
    } finally {
      await pg.destroy();
    }
  });
});
