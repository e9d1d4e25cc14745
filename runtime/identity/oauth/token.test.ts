/**
 * The enforcement point's offline token check (token.ts, verifier.ts): the negative table of
 * tokens that must not pass, the target and delegation checks, the cache (a repeat costs no
 * signature verification) and revocation / standing read on every use.
 */
import { describe, expect, it } from 'vitest';
import { generateKeyPairSync } from 'node:crypto';
import { SignJWT } from 'jose';
import { makeIssuer } from '../testkit.js';
import { mintAccessToken, verifyAccessToken } from './token.js';
import { delegationCovers, tokenMismatch, type AccessTokenClaims } from '../../lib/access-token.js';
import { createTokenVerifier } from './verifier.js';

const ISS = 'http://idp.test';
const NOW = 1_800_000_000;
const issuer = makeIssuer('idp.test');
const keyFor = (kid: unknown) => (kid === issuer.kid ? issuer.publicKey : undefined);

const claims = (over: Partial<AccessTokenClaims> = {}): AccessTokenClaims => ({
  iss: ISS,
  sub: 'alice',
  aud: 'crm',
  act: { sub: 'did:key:z6MkAgent', name: 'agent-1' },
  client_id: 'agent-1',
  membership_jti: 'urn:uuid:m-1',
  scope: 'crm:read',
  jti: 'urn:uuid:t-1',
  iat: NOW - 10,
  exp: NOW + 290,
  delegation: { id: 'd-1', vc_jti: 'urn:uuid:vc-1', task: 'T-1', action: 'crm:read', resource: 'crm/acme/*' },
  ...over,
});

const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');

describe('access token check', () => {
  it('refuses every token that is not a live, well-signed Writ access token', async () => {
    const good = await mintAccessToken(issuer, claims());
    const [h, p, s] = good.split('.') as [string, string, string];
    const flipped = s.slice(0, 10) + (s[10] === 'A' ? 'B' : 'A') + s.slice(11);
    const other = makeIssuer('idp.test');
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    const cases: [string, string, string][] = [
      ['expired', await mintAccessToken(issuer, claims({ exp: NOW - 60 })), 'token expired'],
      ['wrong issuer', await mintAccessToken(issuer, claims({ iss: 'https://evil.test' })), 'token issuer mismatch'],
      ['altered signature', `${h}.${p}.${flipped}`, 'token signature invalid'],
      ['altered payload', `${h}.${b64({ ...claims(), sub: 'mallory' })}.${s}`, 'token signature invalid'],
      ['alg none', `${b64({ alg: 'none', typ: 'at+jwt', kid: issuer.kid })}.${p}.`, 'token algorithm not accepted'],
      [
        'RS256',
        await new SignJWT({ ...claims() }).setProtectedHeader({ alg: 'RS256', typ: 'at+jwt', kid: issuer.kid }).sign(rsa),
        'token algorithm not accepted',
      ],
      ['another key, same kid', await mintAccessToken(other, claims()), 'token signature invalid'],
      ['unknown kid', await mintAccessToken({ ...issuer, kid: 'k-2' }, claims()), 'token signing key unknown'],
      [
        'not typ at+jwt',
        await new SignJWT({ ...claims() }).setProtectedHeader({ alg: 'EdDSA', kid: issuer.kid }).sign(issuer.privateKey),
        'token is not an access token (typ)',
      ],
      ['no act', await mintAccessToken(issuer, { ...claims(), act: undefined as never }), 'token lacks act'],
      ['no membership_jti', await mintAccessToken(issuer, { ...claims(), membership_jti: undefined as never }), 'token lacks membership_jti'],
      ['not a JWS', 'abc.def', 'token is not a compact JWS'],
    ];
    for (const [name, token, reason] of cases) {
      expect({ name, r: verifyAccessToken(token, { issuer: ISS, keyFor, nowSec: NOW }) }).toEqual({ name, r: { ok: false, reason } });
    }
    expect(verifyAccessToken(good, { issuer: ISS, keyFor, nowSec: NOW })).toEqual({ ok: true, claims: claims() });
  });

  it('the token speaks for its audience, agent, and what its delegation covers', () => {
    const c = claims();
    expect(tokenMismatch(c, { target: 'crm', actor: 'agent-1' })).toBeUndefined();
    expect(tokenMismatch(c, { target: 'hr' })).toBe('token audience "crm" is not the target "hr"');
    expect(tokenMismatch(c, { target: 'crm', actor: 'agent-2' })).toBe('token is for agent "agent-1", not "agent-2"');
    expect(delegationCovers(c, { target: 'crm', task: 'T-1', action: 'crm:read', resource: 'crm/acme/42' })).toBe(true);
    expect(delegationCovers(c, { target: 'crm', task: 'T-2', action: 'crm:read', resource: 'crm/acme/42' })).toBe(false);
    expect(delegationCovers(c, { target: 'crm', task: 'T-1', action: 'crm:write', resource: 'crm/acme/42' })).toBe(false);
    expect(delegationCovers(c, { target: 'crm', task: 'T-1', action: 'crm:read', resource: 'crm/other/1' })).toBe(false);
    expect(delegationCovers(c, { target: 'crm', task: 'T-1', action: 'crm:read', resource: 'crm/acme/../admin' })).toBe(false);
    expect(delegationCovers(claims({ delegation: undefined }), { target: 'crm', task: 'T-1', action: 'crm:read', resource: 'crm/acme/1' })).toBe(false);
  });

  it('verifies a token once; every use reads its lifetime, revocation and standing', async () => {
    let now = NOW * 1000;
    const revoked = new Set<string>();
    const standing = new Map<string, string>();
    const v = createTokenVerifier({
      issuer: ISS,
      keyFor,
      now: () => now,
      skewSec: 0,
      state: { isRevoked: (j) => revoked.has(j), agentDenial: (a) => (standing.has(a) ? `agent ${a} is ${standing.get(a)}` : undefined) },
    });
    const token = await mintAccessToken(issuer, claims());
    expect(v.claimed(token)).toBe(true);
    expect(v.claimed(await mintAccessToken(issuer, claims({ iss: 'https://other.test' })))).toBe(false);
    for (let i = 0; i < 5; i++) expect(v.check(token).ok).toBe(true);
    expect(v.signatureChecks()).toBe(1);
    standing.set('agent-1', 'suspended');
    expect(v.check(token)).toEqual({ ok: false, reason: 'agent agent-1 is suspended' });
    standing.clear();
    revoked.add('urn:uuid:vc-1');
    expect(v.check(token)).toEqual({ ok: false, reason: 'delegation revoked' });
    revoked.clear();
    revoked.add('urn:uuid:t-1');
    expect(v.check(token)).toEqual({ ok: false, reason: 'token revoked' });
    revoked.clear();
    revoked.add('urn:uuid:m-1');
    expect(v.check(token)).toEqual({ ok: false, reason: "agent's Membership VC revoked" });
    revoked.clear();
    now = (NOW + 291) * 1000;
    expect(v.check(token)).toEqual({ ok: false, reason: 'token expired' });
    expect(v.signatureChecks()).toBe(1);
  });
});
