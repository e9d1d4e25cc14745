/**
 * The control plane's token follower against a real identity authority over HTTP: the key is read
 * from the published metadata and JWKS; a token verifies offline (once); a revoked token, a
 * revoked delegation, a suspended agent and one whose Membership VC is revoked (re-provisioned) are refused after the next poll of the feeds the
 * identity client already follows (every 500 ms and 250 ms by default: within 1 s), never by a
 * call per request; a bearer token of another issuer is not claimed.
 */
import { describe, expect, it } from 'vitest';
import { SignJWT } from 'jose';
import { generateKeyPairSync } from 'node:crypto';
import { seedAgent } from '../identity/enterprise/governance/testkit.js';
import { testBackends } from '../store/testing.js';
import { agent, delegation, exchangeDelegation, postForm, tool, useBed, type OAuthBed } from '../identity/oauth/oauth-testing.js';
import { createIdentityClient } from './identity-client.js';

async function tokenFor(bed: OAuthBed, name: string, task: string): Promise<{ token: string; vcJti: string }> {
  const me = await agent(bed, name, ['crm']);
  tool(bed, 'crm');
  const d = await delegation(bed, name, { task, action: 'crm:read', resource: 'crm/*' });
  const r = await exchangeDelegation(bed, me, d.vc!, 'crm');
  expect(r.status).toBe(200);
  return { token: r.json.access_token, vcJti: d.vcJti! };
}

describe.each(testBackends())('control-plane token follower on $name', (b) => {
  const bed = useBed(b);

  it('verifies offline and follows revocation and standing through the polls', async () => {
    const client = createIdentityClient({ baseUrl: `http://127.0.0.1:${bed.port}`, pollMs: 500 });
    try {
      const tokens = client.tokens();
      expect(await tokens.load()).toBe(true);
      expect(await client.pollRevocations()).toBe(true);
      expect(await client.pollStanding()).toBe(true);
      const a = await tokenFor(bed, 'f-a', 'T-1');
      const b2 = await tokenFor(bed, 'f-b', 'T-2');
      const c = await tokenFor(bed, 'f-c', 'T-3');
      const d = await tokenFor(bed, 'f-d', 'T-4');
      for (const t of [a, b2, c, d]) expect(tokens.check(t.token)).toMatchObject({ ok: true });
      expect(tokens.check(a.token)).toMatchObject({ ok: true, claims: { aud: 'crm', act: { name: 'f-a' }, delegation: { task: 'T-1' } } });
      expect(tokens.signatureChecks()).toBe(4);

      // RFC 7009 revocation of the token, the delegation VC revoked, the agent suspended, the
      // agent re-provisioned (its Membership VC revoked, a new key).
      expect((await bed.api.post('/v1/agents/f-d/provision')).status).toBe(200);
      expect((await postForm(bed, '/oauth/revoke', { token: a.token })).status).toBe(200);
      expect((await bed.api.post('/v1/revoke', { vcJti: b2.vcJti })).status).toBe(200);
      const now = new Date().toISOString();
      await seedAgent(bed.store.db, 'default', { agentName: 'f-c', ownerRef: 'x', status: 'suspended', createdAt: now, updatedAt: now });
      expect(await client.pollRevocations()).toBe(true);
      expect(await client.pollStanding()).toBe(true);
      expect(tokens.check(a.token)).toEqual({ ok: false, reason: 'token revoked' });
      expect(tokens.check(b2.token)).toEqual({ ok: false, reason: 'delegation revoked' });
      expect(tokens.check(c.token)).toEqual({ ok: false, reason: 'agent "f-c" is suspended (governance)' });
      expect(tokens.check(d.token)).toEqual({ ok: false, reason: "agent's Membership VC revoked" });
      expect(tokens.signatureChecks()).toBe(4);
      // Introspection (the authority's own view) agrees.
      for (const t of [a, b2, c, d]) expect((await postForm(bed, '/oauth/introspect', { token: t.token })).json).toEqual({ active: false });

      // Altered: claimed (Writ's issuer) and refused. Another issuer's at+jwt: not claimed.
      const [h, p] = c.token.split('.');
      expect(tokens.claimed(`${h}.${p}.${'A'.repeat(86)}`)).toBe(true);
      expect(tokens.check(`${h}.${p}.${'A'.repeat(86)}`)).toEqual({ ok: false, reason: 'token signature invalid' });
      const foreign = await new SignJWT({ act: { sub: 'x', name: 'f-a' } })
        .setProtectedHeader({ alg: 'EdDSA', typ: 'at+jwt' })
        .setIssuer('https://login.other.test')
        .setAudience('crm')
        .sign(generateKeyPairSync('ed25519').privateKey);
      expect(tokens.claimed(foreign)).toBe(false);
    } finally {
      await client.close();
    }
  });

  it('refuses every token while the key is not loaded or a feed is stale', async () => {
    const client = createIdentityClient({ baseUrl: `http://127.0.0.1:${bed.port}`, pollMs: 0 });
    try {
      const { token } = await tokenFor(bed, 'f-d', 'T-4');
      expect(client.tokens().claimed(token)).toBe(true);
      expect(client.tokens().check(token)).toEqual({ ok: false, reason: 'authorization server key not loaded yet (fail closed)' });
      expect(await client.tokens().load()).toBe(true);
      // pollMs 0: no revocation feed, so no token can be known unrevoked.
      expect(client.tokens().check(token)).toEqual({ ok: false, reason: 'revocation list not current: identity authority unreachable (fail closed)' });
    } finally {
      await client.close();
    }
  });
});
