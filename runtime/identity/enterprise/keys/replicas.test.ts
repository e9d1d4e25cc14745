/**
 * API-key verification from memory (cache.ts) is exactly as strict as reading the store: rotate
 * and revoke take effect at once on the replica that made them and on another replica on the
 * same PostgreSQL schema, and with change notifications lost a replica reads the store.
 * Over real sockets; PGlite always, PostgreSQL when TEST_DATABASE_URL is set.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../../../lib/log.js';
import type { Store } from '../../../store/factory.js';
import { TEST_DATABASE_URL, testBackends } from '../../../store/testing.js';
import { startIdentityAuthority } from '../../server.js';
import { authorityPair, withListenersKilled, type Authority, type AuthorityPair } from '../../replicas-testing.js';
import { eventually } from '../../../lib/poll-testing.js';
import { loadConfig } from '../../../lib/settings.js';

const env = { IDP_ISSUER_HOST: 'idp.keys.test', IDP_API_KEY_PEPPER: 'hex:' + 'ab'.repeat(32) };

function api(a: Authority) {
  const base = `http://127.0.0.1:${a.port}`;
  const post = async (path: string, body?: unknown) => {
    const r = await fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body ?? {}) });
    return (await r.json()) as any;
  };
  return {
    create: (name: string) => post('/v1/keys', { name, env: 'live', scopes: ['models:invoke'] }) as Promise<{ key: { id: string }; plaintext: string }>,
    verify: async (key: string) => (await post('/v1/keys/verify', { key, scope: 'models:invoke' })).reason as string,
    rotate: (id: string) => post(`/v1/keys/${id}/rotate`, { by: 'ops' }) as Promise<{ key: { id: string }; plaintext: string }>,
    revoke: (id: string) => post(`/v1/keys/${id}/revoke`, { by: 'ops' }),
  };
}

const live = (a: Authority) => a.authority.context.changes!.live();

beforeAll(() => setLogLevel('error'));

describe.each(testBackends())('API-key cache on $name', (b) => {
  let store: Store;
  let idp: Authority;
  beforeAll(async () => {
    store = await b.open();
    idp = await startIdentityAuthority({ store, config: loadConfig(env), addr: '127.0.0.1:0' });
    await idp.authority.whenReady();
    await eventually(() => live(idp), 'the key cache to go live', 5000);
  });
  afterAll(async () => {
    await idp?.close();
    await store?.close();
  });

  it('rotate and revoke take effect at once after cached verifications', async () => {
    const c = api(idp);
    const k = await c.create('one');
    expect(await c.verify(k.plaintext)).toBe('ok');
    expect(await c.verify(k.plaintext)).toBe('ok');
    const r = await c.rotate(k.key.id);
    expect(await c.verify(k.plaintext)).toBe('key_rotated');
    expect(await c.verify(r.plaintext)).toBe('ok');
    await c.revoke(r.key.id);
    expect(await c.verify(r.plaintext)).toBe('key_revoked');
    // A wrong secret for a cached id stays invalid (the compare is still done).
    const wrong = r.plaintext.slice(0, -2) + (r.plaintext.endsWith('AA') ? 'BB' : 'AA');
    expect(await c.verify(wrong)).toBe('invalid_key');
  });
});

describe.skipIf(!TEST_DATABASE_URL)('API keys on two identity authorities on one PostgreSQL schema', () => {
  let pair: AuthorityPair;
  beforeAll(async () => {
    pair = await authorityPair(env, live, "both replicas' key caches to go live");
  }, 30_000);
  afterAll(async () => pair?.close());

  it('a rotate or revoke on one replica is refused by the other at once', async () => {
    const ca = api(pair.a);
    const cb = api(pair.b);
    for (let i = 0; i < 5; i++) {
      const k = await ca.create(`k${i}`);
      expect(await cb.verify(k.plaintext)).toBe('ok');
      expect(await cb.verify(k.plaintext)).toBe('ok');
      const r = await ca.rotate(k.key.id);
      expect(await cb.verify(k.plaintext)).toBe('key_rotated');
      expect(await cb.verify(r.plaintext)).toBe('ok');
      await ca.revoke(r.key.id);
      expect(await cb.verify(r.plaintext)).toBe('key_revoked');
      expect(await ca.verify(r.plaintext)).toBe('key_revoked');
    }
  });

  it('with the LISTEN connections killed, a revoke written meanwhile is refused within about a second', async () => {
    const ca = api(pair.a);
    const cb = api(pair.b);
    const k = await ca.create('loss');
    expect(await cb.verify(k.plaintext)).toBe('ok');
    await withListenersKilled(pair.schema, (admin) => admin.unsafe(`update "${pair.schema}".api_keys set status = 'revoked' where id = $1`, [k.key.id]));
    await eventually(async () => (await cb.verify(k.plaintext)) === 'key_revoked', 'the revocation on replica b', 2000);
    await eventually(() => live(pair.b), "replica b's key cache to go live again", 15_000);
    expect(await cb.verify(k.plaintext)).toBe('key_revoked');
  }, 30_000);
});
