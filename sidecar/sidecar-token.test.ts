/**
 * The sidecar with `SIDECAR_CREDENTIAL=token` (issue 43 item 8) against a real identity authority
 * (tokens of 8 s: IDP_TOKEN_TTL_SECONDS) and a real enforcement point (the control plane's forward
 * proxy, following the authority over HTTP): calls carry an access token fetched with a
 * private_key_jwt client assertion (no VP), one token serves many calls, it is renewed before it
 * expires, and when no token can be had the call fails closed with the reason: the agent
 * suspended (the proxy refuses the held token, the next fetch is refused) or the token endpoint
 * unreachable.
 */
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { setLogLevel } from '../runtime/lib/log.js';
import { seedAgent } from '../runtime/identity/enterprise/governance/testkit.js';
import { openTokenBed, type TokenBed } from './token-testing.js';

// Long enough that the renewal at 80% lands well before the expiry on a loaded machine.
const TTL = 8;

describe('sidecar with an access token as the agent credential', () => {
  let t: TokenBed;
  const lastToken = () => String(t.seen.at(-1)?.authorization ?? '').replace(/^Bearer /, '');
  const issued = async () => ((await t.bed.api.get('/v1/tokens?agent=sc-bot&limit=500')).json.tokens as unknown[]).length;
  const sidecar = (tokenUrl: string) => t.sidecar(tokenUrl);
  const call: TokenBed['call'] = (s) => t.call(s);

  beforeAll(async () => {
    setLogLevel('error');
    t = await openTokenBed('sc-bot', { IDP_TOKEN_TTL_SECONDS: String(TTL) });
  }, 120_000);
  afterAll(async () => t?.close());

  it('calls carry one access token (no VP), renewed before it expires', async () => {
    const s = await sidecar(`http://127.0.0.1:${t.bed.port}/oauth/token`);
    // Until the control plane has the issuer key and both feeds, the proxy refuses every token.
    await expect.poll(async () => (await call(s)).status, { timeout: 10_000, interval: 100 }).toBe(200);
    const token = lastToken();
    expect(decodeProtectedHeader(token)).toMatchObject({ typ: 'at+jwt', alg: 'EdDSA' });
    const claims = decodeJwt(token);
    expect(claims).toMatchObject({ iss: 'http://idp.test', aud: 'broker', client_id: 'sc-bot', act: { name: 'sc-bot' } });
    expect(claims.exp! - claims.iat!).toBe(TTL);
    expect(t.seen.at(-1)![H.agentVp]).toBeUndefined();
    expect(t.seen.at(-1)![H.actor]).toBe('sc-bot');

    // Many calls, one token: nothing is fetched or minted per request.
    const before = await issued();
    const burst = await Promise.all(Array.from({ length: 8 }, () => call(s)));
    expect(burst.map((r) => r.status)).toEqual(Array(8).fill(200));
    expect(new Set(t.seen.slice(-8).map((h) => h.authorization))).toEqual(new Set([`Bearer ${token}`]));
    expect(await issued()).toBe(before);

    // Renewed at 80% of its lifetime (a timer), before the old one expires.
    await expect.poll(async () => (await call(s), lastToken()), { timeout: TTL * 1000, interval: 200 }).not.toBe(token);
    const renewed = decodeJwt(lastToken());
    expect(renewed.iat!).toBeLessThan(claims.exp!);
    expect(renewed.jti).not.toBe(claims.jti);
  });

  it('fails closed with the reason when no token can be had', async () => {
    const s = await sidecar(`http://127.0.0.1:${t.bed.port}/oauth/token`);
    await expect.poll(async () => (await call(s)).status, { timeout: 10_000, interval: 100 }).toBe(200);

    // The agent suspended: the proxy refuses the held token; the next fetch is refused.
    const now = new Date().toISOString();
    await seedAgent(t.bed.store.db, 'default', { agentName: 'sc-bot', ownerRef: 'x', status: 'suspended', createdAt: now, updatedAt: now });
    await expect.poll(async () => (await call(s)).status, { timeout: 2000, interval: 50 }).toBe(403);
    const refused = await call(s);
    expect(refused.status).toBe(503);
    expect(refused.body.error).toMatchObject({ code: 'token_unavailable' });
    expect(refused.body.error.message).toMatch(/^the sidecar has no access token for its agent: token endpoint refused \(invalid_grant: .*suspended/);

    // An unreachable token endpoint: 503 with why, never a call without a credential.
    const calls = t.seen.length;
    const lost = await sidecar('http://127.0.0.1:1/oauth/token');
    const r = await call(lost);
    expect(r.status).toBe(503);
    expect(r.body.error.message).toMatch(/^the sidecar has no access token for its agent: token endpoint unreachable/);
    expect(t.seen.length).toBe(calls);
  });
});
