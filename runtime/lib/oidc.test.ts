/** Workforce OIDC against a real local JWKS server, including a signing-key rotation. */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose';
import { close, listen } from './http.js';
import { loadConfig } from './settings.js';
import { createOidcVerifier, oidcOf } from './oidc.js';

const oidcOfEnv = (env: Record<string, string>) => oidcOf(loadConfig(env).controlPlane.oidc);
import { openStore } from '../store/factory.js';
import { createControlPlane } from '../control-plane/server.js';
import { createIdentityAuthority } from '../identity/server.js';

const ISS = 'https://idp.example.test/';
const AUD = 'writ-gateway';

describe('OIDC verifier', () => {
  let server: http.Server;
  let jwksUrl: string;
  let keys: JWK[] = [];
  let fetches = 0;
  let k1: CryptoKey;
  let k2: CryptoKey;
  let other: CryptoKey;

  const sign = (
    key: CryptoKey,
    kid: string,
    claims: Record<string, unknown> = {},
    opts: { aud?: string; iss?: string; exp?: string | number; alg?: string } = {},
  ) =>
    new SignJWT({ scope: 'a b', ...claims })
      .setProtectedHeader({ alg: opts.alg ?? 'ES256', kid })
      .setSubject('alice')
      .setIssuer(opts.iss ?? ISS)
      .setAudience(opts.aud ?? AUD)
      .setIssuedAt()
      .setExpirationTime(opts.exp ?? '5m')
      .sign(key);

  beforeAll(async () => {
    const a = await generateKeyPair('ES256');
    const b = await generateKeyPair('ES256');
    const c = await generateKeyPair('ES256');
    k1 = a.privateKey;
    k2 = b.privateKey;
    other = c.privateKey;
    keys = [{ ...(await exportJWK(a.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }];
    const k2pub = { ...(await exportJWK(b.publicKey)), kid: 'k2', alg: 'ES256', use: 'sig' };
    server = http.createServer((req, res) => {
      fetches++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ keys }));
    });
    (server as unknown as { k2pub: JWK }).k2pub = k2pub;
    const port = await listen(server, '127.0.0.1:0');
    jwksUrl = `http://127.0.0.1:${port}/jwks`;
  });
  afterAll(() => close(server));

  it('accepts a valid token and returns subject and claims', async () => {
    const v = createOidcVerifier({ issuer: ISS, jwksUrl, audience: AUD });
    const r = await v.verify(await sign(k1, 'k1'));
    expect(r).toMatchObject({ ok: true, subject: 'alice', claims: { scope: 'a b', iss: ISS } });
  });

  it.each([
    ['wrong audience', () => sign(k1, 'k1', {}, { aud: 'someone-else' }), /aud/],
    ['wrong issuer', () => sign(k1, 'k1', {}, { iss: 'https://evil.test/' }), /iss/],
    ['expired', () => sign(k1, 'k1', {}, { exp: Math.floor(Date.now() / 1000) - 3600 }), /expired/],
    ['signed by an unknown key under a known kid', () => sign(other, 'k1'), /signature/],
    ['garbage', async () => 'not.a.jwt', /malformed|invalid/i],
  ])('rejects %s', async (_n, make, reason) => {
    const v = createOidcVerifier({ issuer: ISS, jwksUrl, audience: AUD });
    const r = await v.verify(await make());
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toMatch(reason);
  });

  it('rejects an HMAC token even if its secret were the public key', async () => {
    const v = createOidcVerifier({ issuer: ISS, jwksUrl, audience: AUD });
    const secret = new TextEncoder().encode('x'.repeat(32));
    const t = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256', kid: 'k1' })
      .setSubject('a')
      .setIssuer(ISS)
      .setAudience(AUD)
      .setExpirationTime('5m')
      .sign(secret);
    expect((await v.verify(t)).ok).toBe(false);
  });

  it('follows a key rotation: refetches the key set on an unknown kid, keeps the cache otherwise', async () => {
    const v = createOidcVerifier({ issuer: ISS, jwksUrl, audience: AUD, cooldownMs: 0 });
    expect((await v.verify(await sign(k1, 'k1'))).ok).toBe(true);
    const before = fetches;
    expect((await v.verify(await sign(k1, 'k1'))).ok).toBe(true);
    expect(fetches).toBe(before); // cached
    // The IdP rotates: k2 published, k1 retired.
    keys = [(server as unknown as { k2pub: JWK }).k2pub];
    const r = await v.verify(await sign(k2, 'k2'));
    expect(r.ok).toBe(true);
    expect(fetches).toBe(before + 1);
    // Tokens of the retired key no longer verify once the key set has been refetched.
    const old = await v.verify(await sign(k1, 'k1'));
    expect(old.ok).toBe(false);
  });

  it('fails closed when the key set is unreachable', async () => {
    const v = createOidcVerifier({ issuer: ISS, jwksUrl: 'http://127.0.0.1:1/jwks', audience: AUD, timeoutMs: 500 });
    const r = await v.verify(await sign(k1, 'k1'));
    expect(r.ok).toBe(false);
  });

  it('oidcOf: off when unset, on when complete, error when half-configured', () => {
    expect(oidcOfEnv({})).toBeUndefined();
    expect(oidcOfEnv({ OIDC_ISSUER: ISS, OIDC_JWKS_URL: jwksUrl, OIDC_AUDIENCE: AUD })).toBeDefined();
    expect(() => oidcOfEnv({ OIDC_ISSUER: ISS })).toThrow(/needs all of/);
  });

  it('WRIT_API_AUTH=keys: a workforce token is a management credential, its scope claim mapped to route scopes', async () => {
    // The key set as the rotation test above left it: k2 published.
    keys = [(server as unknown as { k2pub: JWK }).k2pub];
    const store = await openStore({ backend: 'memory' });
    const plane = await createControlPlane({ store, config: loadConfig({ WRIT_API_AUTH: 'keys' }), oidc: { issuer: ISS, jwksUrl, audience: AUD } });
    try {
      const get = async (token?: string) =>
        (await plane.mgmtApp.request('/v1/registry/services', { headers: token ? { authorization: `Bearer ${token}` } : {} })).status;
      expect(await get()).toBe(401);
      const t1 = await sign(k2, 'k2', { scope: 'openid registry:read' });
      expect(await get(t1)).toBe(200);
      expect(await get(await sign(k2, 'k2', { scope: undefined, scp: ['registry:read'] }))).toBe(200);
      expect(await get(await sign(k2, 'k2', { scope: 'openid audit:read' }))).toBe(403);
      // Not ours: another signer, another audience, expired.
      expect(await get(await sign(other, 'k1', { scope: 'registry:read' }))).toBe(401);
      expect(await get(await sign(k2, 'k2', { scope: 'registry:read' }, { aud: 'someone-else' }))).toBe(401);
      expect(await get(await sign(k2, 'k2', { scope: 'registry:read' }, { exp: Math.floor(Date.now() / 1000) - 3600 }))).toBe(401);
      // A registry write is attributed to the token's subject.
      const w = await plane.mgmtApp.request('/v1/registry/services', {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${await sign(k2, 'k2', { scope: 'registry:write' })}` },
        body: JSON.stringify({ name: 'web', upstream: 'web.svc:80', public: true }),
      });
      expect(w.status).toBeLessThan(300);
      expect(plane.audit.recent(5).some((r) => r.subject === 'oidc:alice' || r.actor === 'oidc:alice')).toBe(true);
    } finally {
      await plane.close();
      await store.close();
    }
  });

  it('WRIT_API_AUTH=keys on the identity authority: a workforce token is a credential there too', async () => {
    keys = [(server as unknown as { k2pub: JWK }).k2pub];
    const store = await openStore({ backend: 'memory' });
    const idp = createIdentityAuthority({ store, config: loadConfig({ WRIT_API_AUTH: 'keys', OIDC_ISSUER: ISS, OIDC_JWKS_URL: jwksUrl, OIDC_AUDIENCE: AUD }) });
    try {
      await idp.whenReady();
      const get = async (token?: string) => (await idp.app.request('/v1/agents', { headers: token ? { authorization: `Bearer ${token}` } : {} })).status;
      expect(await get()).toBe(401);
      expect(await get(await sign(k2, 'k2', { scope: 'openid identity:read' }))).toBe(200);
      expect(await get(await sign(k2, 'k2', { scope: 'openid directory:read' }))).toBe(403);
      expect(await get(await sign(other, 'k1', { scope: 'identity:read' }))).toBe(401);
      expect(await get(await sign(k2, 'k2', { scope: 'identity:read' }, { aud: 'someone-else' }))).toBe(401);
    } finally {
      await idp.close();
      await store.close();
    }
  });
});
