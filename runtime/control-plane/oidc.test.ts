/** Workforce OIDC against a real local JWKS server, including a signing-key rotation. */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose';
import { close, listen } from '../lib/http.js';
import { createOidcVerifier, oidcFromEnv } from './oidc.js';

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

  it('oidcFromEnv: off when unset, on when complete, error when half-configured', () => {
    expect(oidcFromEnv({})).toBeUndefined();
    expect(oidcFromEnv({ OIDC_ISSUER: ISS, OIDC_JWKS_URL: jwksUrl, OIDC_AUDIENCE: AUD })).toBeDefined();
    expect(() => oidcFromEnv({ OIDC_ISSUER: ISS })).toThrow(/needs all of/);
  });
});
