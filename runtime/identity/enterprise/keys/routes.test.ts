/**
 * API keys over real HTTP on PGlite (and Postgres when TEST_DATABASE_URL is set): every route and
 * status, wrong/rotated/revoked keys, scopes deny by default, no secret in any read or log line,
 * tenant isolation, and the stored hash.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { rowsOf, type Store } from '../../../store/factory.js';
import { testBackends } from '../../../store/testing.js';
import { serve, type Served } from '../identity/testkit.js';
import { hashSecret, parseKey, pepperFromEnv } from './secret.js';

const PEPPER = 'test-pepper-0123456789abcdefghijklmnopqrstuvwxyz';
const T0 = Date.parse('2026-03-01T09:00:00.000Z');

describe.each(testBackends())('api keys on $name', (b) => {
  let store: Store;
  let api: Served;
  let clock = T0;
  const logged: string[] = [];
  const realWrite = process.stderr.write.bind(process.stderr);

  beforeAll(async () => {
    store = await b.open();
    api = await serve(store, () => clock, { IDP_API_KEY_PEPPER: PEPPER });
    process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
      logged.push(String(chunk));
      return (realWrite as (...a: unknown[]) => boolean)(chunk, ...rest);
    }) as typeof process.stderr.write;
  });
  afterAll(async () => {
    process.stderr.write = realWrite;
    await api?.close();
    await store?.close();
  });

  const create = (o: Record<string, unknown> = {}) => api.post('/v1/keys', { name: 'ci', scopes: ['models:invoke'], ...o });
  const verify = (key: string, o: Record<string, unknown> = {}) => api.post('/v1/keys/verify', { key, ...o });
  const plaintexts: string[] = [];

  it('mints test and live keys with the brand prefix, 256-bit secrets, plaintext once', async () => {
    const r = await create({ tenantId: 'contoso', createdBy: 'alice' });
    expect(r.status).toBe(201);
    const { key, plaintext } = r.body;
    plaintexts.push(plaintext);
    expect(plaintext).toMatch(/^writ_test_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);
    expect(Buffer.from(parseKey(plaintext)!.secret, 'base64url')).toHaveLength(32);
    expect(key).toEqual({
      id: parseKey(plaintext)!.id,
      name: 'ci',
      env: 'test',
      prefix: 'writ_test_',
      masked: expect.stringMatching(new RegExp(`^writ_test_${key.id}_•+${plaintext.slice(-4)}$`)),
      last4: plaintext.slice(-4),
      scopes: ['models:invoke'],
      status: 'active',
      tenantId: 'contoso',
      createdBy: 'alice',
      createdAt: '2026-03-01T09:00:00.000Z',
      lastUsedAt: null,
      revokedAt: null,
      revokedBy: null,
      rotatedAt: null,
      rotatedFrom: null,
    });
    const live = await create({ env: 'live', scopes: ['a', 'a', 'b'] });
    expect(live.status).toBe(201);
    plaintexts.push(live.body.plaintext);
    expect(live.body.plaintext.startsWith('writ_live_')).toBe(true);
    expect(live.body.key).toMatchObject({ env: 'live', prefix: 'writ_live_', scopes: ['a', 'b'], tenantId: null });

    // At rest: salt + HMAC-SHA-256(pepper, salt || secret), never the plaintext or the secret.
    const rows = await rowsOf<{ id: string; salt: string; hash: string; all: string }>(
      store.db,
      sql`select id, salt, hash, row_to_json(api_keys)::text as all from api_keys`,
    );
    for (const row of rows) {
      const pt = plaintexts.find((p) => parseKey(p)!.id === row.id)!;
      expect(row.all).not.toContain(parseKey(pt)!.secret);
      expect(row.hash).toBe(hashSecret(pepperFromEnv(PEPPER), row.salt, parseKey(pt)!.secret).toString('base64url'));
    }
  });

  it('verifies a good key, updates lastUsedAt, and denies scopes not granted (empty = nothing)', async () => {
    const pt = plaintexts[0]!;
    clock += 1000;
    const ok = await verify(pt, { scope: 'models:invoke' });
    expect(ok).toMatchObject({ status: 200, body: { valid: true, reason: 'ok', key: { lastUsedAt: '2026-03-01T09:00:01.000Z' } } });
    expect((await api.get(`/v1/keys/${parseKey(pt)!.id}`)).body.lastUsedAt).toBe('2026-03-01T09:00:01.000Z');
    expect((await verify(pt)).body).toMatchObject({ valid: true, reason: 'ok' });
    expect((await verify(pt, { scope: 'models:admin' })).body).toMatchObject({ valid: false, reason: 'scope_not_granted' });
    expect((await verify(pt, { scope: 'models:*' })).body).toMatchObject({ valid: false, reason: 'scope_not_granted' });
    const empty = (await create({ scopes: [] })).body.plaintext;
    plaintexts.push(empty);
    expect((await verify(empty, { scope: 'models:invoke' })).body).toMatchObject({ valid: false, reason: 'scope_not_granted' });
  });

  it('lastUsedAt moves at most once per minute (verification is a read otherwise)', async () => {
    const pt = plaintexts[0]!;
    const id = parseKey(pt)!.id;
    clock += 30_000;
    expect((await verify(pt)).body.key.lastUsedAt).toBe('2026-03-01T09:00:01.000Z');
    expect((await api.get(`/v1/keys/${id}`)).body.lastUsedAt).toBe('2026-03-01T09:00:01.000Z');
    clock += 31_000;
    expect((await verify(pt)).body.key.lastUsedAt).toBe('2026-03-01T09:01:02.000Z');
    expect((await api.get(`/v1/keys/${id}`)).body.lastUsedAt).toBe('2026-03-01T09:01:02.000Z');
    clock -= 61_000;
  });

  it('rejects wrong, malformed and foreign keys without disclosing anything', async () => {
    const pt = plaintexts[0]!;
    const flipped = pt.slice(0, -1) + (pt.endsWith('A') ? 'B' : 'A');
    expect((await verify(flipped)).body).toEqual({ valid: false, reason: 'invalid_key' });
    expect((await verify(pt.replace('writ_test_', 'writ_live_'))).body).toEqual({ valid: false, reason: 'invalid_key' });
    expect((await verify(`writ_test_0000000000000000_${'A'.repeat(43)}`)).body).toEqual({ valid: false, reason: 'invalid_key' });
    for (const bad of ['nope', 'writ_test_', `svc_test_${pt.slice(10)}`, pt + 'x']) {
      expect((await verify(bad)).body).toEqual({ valid: false, reason: 'malformed' });
    }
    expect((await verify(pt, { tenantId: 'fabrikam' })).body).toEqual({ valid: false, reason: 'tenant_mismatch' });
    expect((await verify(pt, { tenantId: 'contoso' })).body.valid).toBe(true);
    expect((await api.post('/v1/keys/verify', {})).status).toBe(422);
    expect((await api.post('/v1/keys/verify', { key: pt, scope: 'has space' })).status).toBe(422);
  });

  it('rotate: new plaintext, the prior secret stops working at once; 404/409/422', async () => {
    const old = plaintexts[0]!;
    const oldId = parseKey(old)!.id;
    clock += 1000;
    const r = await api.post(`/v1/keys/${oldId}/rotate`, { by: 'bob' });
    expect(r.status).toBe(200);
    const next = r.body.plaintext as string;
    plaintexts.push(next);
    expect(next).not.toBe(old);
    expect(r.body.key).toMatchObject({ rotatedFrom: oldId, status: 'active', createdBy: 'bob', scopes: ['models:invoke'], tenantId: 'contoso', name: 'ci' });
    expect((await verify(old)).body).toEqual({ valid: false, reason: 'key_rotated' });
    expect((await verify(next, { scope: 'models:invoke' })).body.valid).toBe(true);
    expect((await api.get(`/v1/keys/${oldId}`)).body).toMatchObject({ status: 'rotated', rotatedAt: '2026-03-01T09:00:02.000Z' });
    expect((await api.post(`/v1/keys/${oldId}/rotate`, { by: 'bob' })).body.error.code).toBe('key_not_active');
    expect((await api.post(`/v1/keys/${oldId}/rotate`, { by: 'bob' })).status).toBe(409);
    expect((await api.post('/v1/keys/ffffffffffffffff/rotate', { by: 'bob' })).status).toBe(404);
    expect((await api.post(`/v1/keys/${r.body.key.id}/rotate`, {})).status).toBe(422);
    expect((await api.post(`/v1/keys/${r.body.key.id}/rotate`)).status).toBe(422);
  });

  it('two concurrent rotations of one key: exactly one wins', async () => {
    const k = (await create({ tenantId: 'contoso', name: 'race' })).body;
    plaintexts.push(k.plaintext);
    const rs = await Promise.all([1, 2].map(() => api.post(`/v1/keys/${k.key.id}/rotate`, { by: 'x' })));
    expect(rs.map((r) => r.status).sort()).toEqual([200, 409]);
    const won = rs.find((r) => r.status === 200)!.body.plaintext as string;
    plaintexts.push(won);
    expect((await verify(won)).body.valid).toBe(true);
    expect((await verify(k.plaintext)).body.reason).toBe('key_rotated');
    const family = (await api.get('/v1/keys?tenant=contoso')).body.filter((x: any) => x.rotatedFrom === k.key.id);
    expect(family).toHaveLength(1);
  });

  it('revoke: record back, key dead, idempotent, 404 for unknown', async () => {
    const pt = plaintexts.at(-1)!;
    const id = parseKey(pt)!.id;
    clock += 1000;
    const r = await api.post(`/v1/keys/${id}/revoke`, { by: 'sec-team' });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ id, status: 'revoked', revokedBy: 'sec-team', revokedAt: '2026-03-01T09:00:03.000Z' });
    expect((await verify(pt)).body).toEqual({ valid: false, reason: 'key_revoked' });
    const again = await api.post(`/v1/keys/${id}/revoke`);
    expect(again).toMatchObject({ status: 200, body: { status: 'revoked', revokedBy: 'sec-team' } });
    expect((await api.post(`/v1/keys/${id}/rotate`, { by: 'x' })).status).toBe(409);
    expect((await api.post('/v1/keys/ffffffffffffffff/revoke')).status).toBe(404);
  });

  it('tenant isolation: list by tenant, ?tenant= guards on get/rotate/revoke are 404 and change nothing', async () => {
    const fab = await create({ tenantId: 'fabrikam', name: 'fab' });
    plaintexts.push(fab.body.plaintext);
    const fid = fab.body.key.id;
    const contoso = (await api.get('/v1/keys?tenant=contoso')).body as any[];
    expect(contoso.length).toBeGreaterThan(0);
    expect(contoso.every((k) => k.tenantId === 'contoso')).toBe(true);
    expect((await api.get('/v1/keys?tenant=fabrikam')).body.map((k: any) => k.id)).toEqual([fid]);
    expect((await api.get(`/v1/keys/${fid}?tenant=contoso`)).status).toBe(404);
    expect((await api.post(`/v1/keys/${fid}/revoke?tenant=contoso`, { by: 'x' })).status).toBe(404);
    expect((await api.post(`/v1/keys/${fid}/rotate?tenant=contoso`, { by: 'x' })).status).toBe(404);
    expect((await verify(fab.body.plaintext)).body.valid).toBe(true);
    expect((await api.get(`/v1/keys/${fid}?tenant=fabrikam`)).body.status).toBe('active');
    expect((await api.get('/v1/keys?tenant=bad:tenant')).status).toBe(422);
  });

  it('never shows a secret in list, get or logs; validation errors are 422', async () => {
    const all = await api.get('/v1/keys');
    expect(all.status).toBe(200);
    expect(all.body.length).toBe(plaintexts.length);
    const created = all.body.map((k: any) => k.createdAt);
    expect([...created].sort().reverse()).toEqual(created);
    const reads = [all.text, ...(await Promise.all(all.body.map((k: any) => api.get(`/v1/keys/${k.id}`)))).map((r) => r.text)].join('\n');
    const logs = logged.join('');
    for (const pt of plaintexts) {
      const secret = parseKey(pt)!.secret;
      expect(reads).not.toContain(secret);
      expect(logs).not.toContain(secret);
    }
    expect(reads).not.toMatch(/"(hash|salt|plaintext)"/);
    expect((await api.post('/v1/keys', { env: 'prod', name: 'x' })).status).toBe(422);
    expect((await api.post('/v1/keys', { scopes: [] })).status).toBe(422);
    expect((await api.post('/v1/keys', '{nope')).status).toBe(422);
  });
});
