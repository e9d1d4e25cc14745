import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../store/factory.js';
import { testBackends } from '../store/testing.js';
import { presentationFor } from './client.js';
import { createIdentityAuthority } from './server.js';
import { client, expectDetail, expectEnvelope, useAuthority } from './server-testing.js';
import { loadConfig } from '../lib/settings.js';

describe.each(testBackends())('identity authority on $name', (b) => {
  const t = useAuthority(b);

  describe('discovery', () => {
    it('healthz, readyz, did.json, issuer, openapi, docs', async () => {
      expect(await t.api.get('/healthz')).toMatchObject({ status: 200, json: { status: 'ok' } });
      expect(await t.api.get('/readyz')).toMatchObject({ status: 200, json: { status: 'ready' } });
      expect(t.auth.issuerDid).toBe('did:web:idp.example.com%3A8443');
      const iss = await t.api.get('/v1/issuer');
      expect(iss.json.issuerDid).toBe(t.auth.issuerDid);
      expect(iss.json.issuerPubMultibase).toMatch(/^z6Mk/);
      const doc = (await t.api.get('/.well-known/did.json')).json;
      expect(doc.id).toBe(t.auth.issuerDid);
      expect(doc['@context'][0]).toBe('https://www.w3.org/ns/did/v1');
      expect(doc.verificationMethod[0]).toEqual({
        id: `${t.auth.issuerDid}#key-1`,
        type: 'Ed25519VerificationKey2020',
        controller: t.auth.issuerDid,
        publicKeyMultibase: iss.json.issuerPubMultibase,
      });
      expect(doc.assertionMethod).toEqual([`${t.auth.issuerDid}#key-1`]);
      const oa = await t.api.get('/openapi.json');
      expect(oa.json.openapi).toBe('3.1.0');
      for (const p of [
        '/healthz',
        '/readyz',
        '/.well-known/did.json',
        '/v1/issuer',
        '/v1/agents',
        '/v1/agents/{name}',
        '/v1/agents/{name}/provision',
        '/v1/agents/verify-presentation',
        '/v1/delegations/request',
        '/v1/delegations',
        '/v1/delegations/{id}',
        '/v1/delegations/{id}/approve',
        '/v1/delegations/{id}/deny',
        '/v1/delegations/{id}/vc',
        '/v1/delegations/check',
        '/v1/revoke',
        '/v1/revocations',
        '/status/{list}',
      ]) {
        expect(oa.json.paths[p], p).toBeDefined();
      }
      expect(oa.json.paths['/v1/agents'].post.requestBody.required).toBe(true);
      const docs = await t.api.get('/docs');
      expect(docs.status).toBe(200);
      expect(docs.text).toMatch(/swagger/i);
    });

    it('unknown route and malformed JSON use the error shapes', async () => {
      const nf = await t.api.get('/v1/nope');
      expect(nf.status).toBe(404);
      expectEnvelope(nf, 'not_found');
      // A path that exists, asked with a method it does not take: 405 naming the ones it does.
      const put = await t.auth.app.request('/v1/agents', { method: 'PUT' });
      expect(put.status).toBe(405);
      const allow = put.headers.get('allow')!.split(', ');
      expect(allow).toEqual(expect.arrayContaining(['GET', 'HEAD', 'POST']));
      expect(allow).not.toContain('PUT');
      expectEnvelope({ json: await put.json() }, 'method_not_allowed');
      // A path with a parameter too (the OpenAPI `{name}` of the route).
      const one = await t.auth.app.request('/v1/agents/someone', { method: 'PATCH' });
      expect(one.status).toBe(405);
      expect(one.headers.get('allow')!.split(', ')).toEqual(expect.arrayContaining(['GET', 'HEAD']));
      const bad = await t.api.post('/v1/agents', '{not json');
      expectDetail(bad);
      expect(bad.json.detail[0].type).toBe('json_invalid');
    });

    it('bodies over 1 MiB are 413, except a SCIM snapshot, which may be larger', async () => {
      const big = JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) });
      const tooBig = await t.api.post('/v1/agents', big);
      expect(tooBig.status).toBe(413);
      expectEnvelope(tooBig, 'payload_too_large');
      const sync = await t.api.post('/v1/directory/sync', JSON.stringify({ pad: 'x'.repeat(2 * 1024 * 1024) }));
      expect(sync.status).not.toBe(413);
      expect(sync.status).toBeLessThan(500);
    });
  });
});

describe.each(testBackends())('issuer key persistence on $name', (b) => {
  it('restart keeps the DID and key; sealed with IDP_KEY_ENCRYPTION_KEY; wrong or missing secret is not ready', async () => {
    const store = await b.open();
    try {
      const env = { IDP_ISSUER_HOST: 'localhost:8090' };
      const a1 = createIdentityAuthority({ store, config: loadConfig(env) });
      await a1.whenReady();
      const api1 = client(a1);
      const pub1 = (await api1.get('/v1/issuer')).json.issuerPubMultibase;
      await api1.post('/v1/agents', { name: 'k1', role: 'r', capabilities: [] });
      const prov = (await api1.post('/v1/agents/k1/provision')).json;
      await a1.close();
      expect(a1.issuerDid).toBe('did:web:localhost%3A8090');
      const plain = (await rowsOf<{ enc: string; private_key: string }>(store.db, sql`select enc, private_key from identity_issuer_keys`))[0]!;
      expect(plain.enc).toBe('none');

      // Restart with a secret: same key, now sealed in place; old credentials still verify.
      const sealedEnv = { ...env, IDP_KEY_ENCRYPTION_KEY: 'correct horse battery staple' };
      const a2 = createIdentityAuthority({ store, config: loadConfig(sealedEnv) });
      await a2.whenReady();
      const api2 = client(a2);
      expect((await api2.get('/v1/issuer')).json.issuerPubMultibase).toBe(pub1);
      expect((await api2.post('/v1/agents/verify-presentation', { vp: await presentationFor(prov) })).json).toMatchObject({ ok: true, agentName: 'k1' });
      await a2.close();
      const sealed = (await rowsOf<{ enc: string; private_key: string }>(store.db, sql`select enc, private_key from identity_issuer_keys`))[0]!;
      expect(sealed.enc).toBe('aes-256-gcm');
      expect(sealed.private_key).not.toBe(plain.private_key);
      expect(sealed.private_key).not.toContain(plain.private_key);

      for (const bad of [env, { ...env, IDP_KEY_ENCRYPTION_KEY: 'wrong' }]) {
        const a3 = createIdentityAuthority({ store, config: loadConfig(bad) });
        const api3 = client(a3);
        // Give the load attempt time to fail; readiness must stay false.
        await new Promise((r) => setTimeout(r, 300));
        expect(a3.ready()).toBe(false);
        expect((await api3.get('/readyz')).status).toBe(503);
        const iss = await api3.get('/v1/issuer');
        expect(iss.status).toBe(503);
        expectEnvelope(iss, 'not_ready');
        expect((await api3.get('/healthz')).status).toBe(200);
        await a3.close();
      }
      const a4 = createIdentityAuthority({ store, config: loadConfig(sealedEnv) });
      await a4.whenReady();
      expect((await client(a4).get('/v1/issuer')).json.issuerPubMultibase).toBe(pub1);
      await a4.close();
    } finally {
      await store.close();
    }
  });
});
