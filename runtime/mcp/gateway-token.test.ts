/**
 * The MCP gateway takes a Writ access token as the agent's credential (issue 43 item 5): the
 * official MCP SDK client connects and calls a tool with `Authorization: Bearer <token>` issued
 * for the MCP entry; the token is checked offline (the real verifier) and never reaches the
 * server; a token issued for another entry, or altered, is refused before the server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AccessTokenClaims } from '../lib/access-token.js';
import { mintAccessToken } from '../identity/oauth/token.js';
import { createTokenVerifier } from '../identity/oauth/verifier.js';
import { makeIssuer } from '../identity/testkit.js';
import type { IdentityPort } from '../control-plane/identity-port.js';
import { startMcpHarness, type McpHarness } from './gateway-testing.js';

const ISS = 'http://idp.test';
const issuer = makeIssuer('idp.test');
const verifier = createTokenVerifier({
  issuer: ISS,
  keyFor: (kid) => (kid === issuer.kid ? issuer.publicKey : undefined),
  state: { isRevoked: () => false, agentDenial: () => undefined },
});
const identity: IdentityPort = {
  verifyPresentation: async () => ({ ok: false, reason: 'no VPs in these tests' }),
  checkDelegation: async () => ({ ok: false, reason: 'no approved delegation' }),
  tokens: () => verifier,
};
const token = (aud: string) => {
  const now = Math.floor(Date.now() / 1000);
  const c: AccessTokenClaims = {
    iss: ISS,
    sub: 'did:key:zTooler',
    aud,
    act: { sub: 'did:key:zTooler', name: 'tooler' },
    client_id: 'tooler',
    membership_jti: 'urn:uuid:membership-tooler',
    scope: '',
    jti: `urn:uuid:${aud}`,
    iat: now,
    exp: now + 300,
  };
  return mintAccessToken(issuer, c);
};

let h: McpHarness;
beforeAll(async () => {
  h = await startMcpHarness({ identity });
  await h.agent({ name: 'tooler', allowTools: ['everything/echo'] });
});
afterAll(async () => h?.close());

describe('MCP gateway with a Writ access token', () => {
  it('the SDK client calls through with the token; the server never sees it', async () => {
    const t = await token('everything');
    const c = await h.client('tooler', { authorization: `Bearer ${t}` });
    const r = (await c.callTool({ name: 'echo', arguments: { message: 'with a token' } })) as { content: { text: string }[] };
    expect(r.content[0]!.text).toBe('Echo: with a token');
    expect(h.everything.headers.length).toBeGreaterThan(0);
    for (const seen of h.everything.headers) {
      expect(seen.authorization).toBeUndefined();
      expect(JSON.stringify(seen)).not.toContain(t);
    }
  });

  it('a token for another entry, or altered, is refused before the server', async () => {
    const seen = h.everything.headers.length;
    const other = await token('search');
    await expect(h.client('tooler', { authorization: `Bearer ${other}` })).rejects.toThrow(/token audience \\"search\\" is not the target \\"everything\\"/);
    const [hd, p] = (await token('everything')).split('.');
    await expect(h.client('tooler', { authorization: `Bearer ${hd}.${p}.${'A'.repeat(86)}` })).rejects.toThrow(/token signature invalid/);
    expect(h.everything.headers.length).toBe(seen);
  });
});
