/**
 * A producer's apply of identity agents (`POST /v1/agents/apply`, the registry's apply model) and
 * the idempotent `POST /v1/agents`, on PGlite and PostgreSQL: created, updated, unchanged (no row
 * touched), conflicts with another producer, and retirement of what it no longer declares
 * (credentials revoked, its VPs refused, record kept, no new identity until declared again).
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { rowsOf } from '../store/factory.js';
import { testBackends } from '../store/testing.js';
import { presentationFor } from './client.js';
import { provisioner, useAuthority, type Json } from './server-testing.js';

const caps = (resource: string) => [{ action: 'db:read', resource, constraints: { max: 3, of: 'rows' } }];

describe.each(testBackends())('identity agents apply on $name', (b) => {
  const t = useAuthority(b);
  const provisioned = provisioner(() => t.api);
  const apply = (owner: string, agents: unknown[]) => t.api.post('/v1/agents/apply', { owner, agents });
  const rows = () =>
    rowsOf<{ n: string; x: string; m: string | null; r: boolean }>(
      t.store.db,
      sql`select name as n, xmin::text as x, managed_by as m, retired_at is not null as r from identity_agents order by 1`,
    );
  const revoked = async () => (await rowsOf<{ n: string }>(t.store.db, sql`select count(*)::text as n from identity_revocations`))[0]!.n;

  it('creates, updates, leaves the unchanged untouched, and reports names another producer manages', async () => {
    const a = { name: 'app-a', role: 'reader', capabilities: caps('db/a') };
    const bb = { name: 'app-b', role: 'reader', capabilities: [] };
    const first = await apply('folder:/one', [bb, a]);
    expect(first.status).toBe(200);
    expect(first.json).toEqual({
      owner: 'folder:/one',
      created: ['app-a', 'app-b'],
      updated: [],
      unchanged: [],
      retired: [],
      conflicts: [],
      conflictOwners: {},
    });
    const before = (await rows()).filter((r) => r.n.startsWith('app-'));
    expect(before.map((r) => [r.n, r.m, r.r])).toEqual([
      ['app-a', 'folder:/one', false],
      ['app-b', 'folder:/one', false],
    ]);
    // The same set again, capabilities' keys in another order: nothing written.
    const same = await apply('folder:/one', [{ ...a, capabilities: [{ constraints: { of: 'rows', max: 3 }, resource: 'db/a', action: 'db:read' }] }, bb]);
    expect(same.json).toMatchObject({ created: [], updated: [], unchanged: ['app-a', 'app-b'], retired: [] });
    expect((await rows()).filter((r) => r.n.startsWith('app-'))).toEqual(before);
    const changed = await apply('folder:/one', [{ ...a, role: 'writer' }, bb]);
    expect(changed.json).toMatchObject({ updated: ['app-a'], unchanged: ['app-b'] });
    expect((await t.api.get('/v1/agents/app-a')).json).toMatchObject({ role: 'writer' });
    const other = await apply('kubernetes:prod', [{ ...a, role: 'admin' }]);
    expect(other.json).toEqual({
      owner: 'kubernetes:prod',
      created: [],
      updated: [],
      unchanged: [],
      retired: [],
      conflicts: ['app-a'],
      conflictOwners: { 'app-a': 'folder:/one' },
    });
    expect((await t.api.get('/v1/agents/app-a')).json).toMatchObject({ role: 'writer' });
  });

  it('POST /v1/agents with the same declaration touches no row; an agent it registered is adopted by the first producer declaring it', async () => {
    const body = { name: 'api-made', role: 'worker', capabilities: caps('db/x') };
    expect((await t.api.post('/v1/agents', body)).status).toBe(201);
    const before = (await rows()).find((r) => r.n === 'api-made');
    expect((await t.api.post('/v1/agents', body)).status).toBe(201);
    expect((await rows()).find((r) => r.n === 'api-made')).toEqual(before);
    expect(before!.m).toBeNull();
    expect((await apply('folder:/two', [body])).json).toMatchObject({ updated: ['api-made'] });
    expect((await rows()).find((r) => r.n === 'api-made')!.m).toBe('folder:/two');
  });

  it('retires what the producer no longer declares: credentials revoked, VPs refused, no new identity, record kept; declared again it may be provisioned', async () => {
    const id: Json = await provisioned('ret-1', [{ action: 'db:read', resource: 'db/*' }]);
    const decl = { name: 'ret-1', role: 'worker', capabilities: [{ action: 'db:read', resource: 'db/*' }] };
    expect((await apply('folder:/three', [decl])).json).toMatchObject({ updated: ['ret-1'] });
    const vp = await presentationFor(id, { now: t.clock });
    expect((await t.api.post('/v1/agents/verify-presentation', { vp })).json).toMatchObject({ ok: true });
    const revokedBefore = Number(await revoked());
    const gone = await apply('folder:/three', []);
    expect(gone.json).toMatchObject({ retired: ['ret-1'], created: [], updated: [], unchanged: [] });
    expect(Number(await revoked())).toBe(revokedBefore + 2); // its Membership VC and its one capability VC
    expect((await t.api.post('/v1/agents/verify-presentation', { vp: await presentationFor(id, { now: t.clock }) })).json).toMatchObject({
      ok: false,
      reason: 'membership credential revoked',
    });
    const rec = (await t.api.get('/v1/agents/ret-1')).json;
    expect(rec).toMatchObject({ name: 'ret-1', did: id.did, provisioned: true, retired_at: expect.any(String) });
    const refused = await t.api.post('/v1/agents/ret-1/provision');
    expect(refused.status).toBe(409);
    expect(refused.json.error.code).toBe('agent_retired');
    // Retired once: the next apply without it writes nothing.
    const after = await rows();
    expect((await apply('folder:/three', [])).json).toMatchObject({ retired: [] });
    expect(await rows()).toEqual(after);
    expect((await apply('folder:/three', [decl])).json).toMatchObject({ updated: ['ret-1'] });
    expect((await t.api.get('/v1/agents/ret-1')).json.retired_at).toBeUndefined();
    expect((await t.api.post('/v1/agents/ret-1/provision')).status).toBe(200);
  });

  it('refuses a name declared twice and a malformed owner with 422 (nothing written); /openapi.json has the route', async () => {
    const before = await rows();
    const d = { name: 'dup', role: 'r', capabilities: [] };
    expect((await apply('folder:/x', [d, d])).status).toBe(422);
    expect((await apply('', [])).status).toBe(422);
    expect((await apply('folder:/x', [{ name: 'has space', role: 'r', capabilities: [] }])).status).toBe(422);
    expect(await rows()).toEqual(before);
    const doc = (await t.api.get('/openapi.json')).json;
    expect(doc.paths['/v1/agents/apply'].post.responses['200']).toBeDefined();
  });
});
