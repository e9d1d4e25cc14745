import { describe, expect, it } from 'vitest';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { VP_AUDIENCE } from '../lib/brand.js';
import { loadIdentity, presentationFor } from './client.js';
import { checkPresentation } from './vc.js';
import { makeAgent, makeIssuer } from './testkit.js';

describe('agent client', () => {
  it('mints a VP-JWT that the verifier accepts, with default audience and a fresh nonce', async () => {
    const issuer = makeIssuer();
    const agent = await makeAgent(issuer);
    const vp = await presentationFor(agent);
    const header = decodeProtectedHeader(vp);
    expect(header.alg).toBe('EdDSA');
    expect(header.kid).toBe(`${agent.did}#${agent.did.slice('did:key:'.length)}`);
    const p = decodeJwt(vp);
    expect(p.iss).toBe(agent.did);
    expect(p.aud).toBe(VP_AUDIENCE);
    expect(typeof p.nonce).toBe('string');
    expect((p.exp as number) - (p.nbf as number)).toBe(300);
    expect((p.vp as { verifiableCredential: string[] }).verifiableCredential).toEqual([agent.membershipVc]);
    const r = await checkPresentation(vp, { issuerDid: issuer.did, issuerKey: issuer.publicKey, audience: VP_AUDIENCE, nowSec: Math.floor(Date.now() / 1000) });
    expect(r).toMatchObject({ ok: true, holderDid: agent.did, membershipJti: agent.jti });
    const other = decodeJwt(await presentationFor(agent));
    expect(other.nonce).not.toBe(p.nonce);
  });

  it('honours audience, nonce and ttl', async () => {
    const issuer = makeIssuer();
    const agent = await makeAgent(issuer);
    const vp = await presentationFor(loadIdentity(agent), { audience: 'aud-x', nonce: 'n-1', ttlSeconds: 12 * 3600, now: 1_700_000_000_000 });
    const p = decodeJwt(vp);
    expect(p).toMatchObject({ aud: 'aud-x', nonce: 'n-1', nbf: 1_700_000_000, exp: 1_700_000_000 + 12 * 3600 });
  });

  it('rejects an identity whose key does not match its DID, and bad ttl', async () => {
    const issuer = makeIssuer();
    const a = await makeAgent(issuer);
    const b = await makeAgent(issuer);
    expect(() => loadIdentity({ ...a, privateKeyB64: b.privateKeyB64 })).toThrow(/does not match/);
    expect(() => loadIdentity({ ...a, did: 'did:web:x' })).toThrow();
    await expect(presentationFor(a, { ttlSeconds: 0 })).rejects.toThrow(/ttlSeconds/);
  });
});
