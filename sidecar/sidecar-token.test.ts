/**
 * The sidecar with `SIDECAR_CREDENTIAL=token` (issue 43 item 8) against a real identity authority
 * (tokens of 8 s: IDP_TOKEN_TTL_SECONDS) and a real enforcement point (the control plane's forward
 * proxy, following the authority over HTTP): calls carry an access token fetched with a
 * private_key_jwt client assertion (no VP), one token serves many calls, it is renewed before it
 * expires, and when no token can be had the call fails closed with the reason: the agent
 * suspended (the proxy refuses the held token, the next fetch is refused) or the token endpoint
 * unreachable.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { close, listen } from '../runtime/lib/http.js';
import { setLogLevel } from '../runtime/lib/log.js';
import { loadConfig } from '../runtime/lib/settings.js';
import { seedAgent } from '../runtime/identity/enterprise/governance/testkit.js';
import { agent, openBed, type OAuthBed } from '../runtime/identity/oauth/oauth-testing.js';
import type { RunningWithEgress } from '../runtime/control-plane/egress-gateway.js';
import { startFollowingPlane, type FollowingPlane } from '../runtime/control-plane/following-testing.js';
import { testBackends } from '../runtime/store/testing.js';
import { startSidecar, type RunningSidecar } from './server.js';

// Long enough that the renewal at 80% lands well before the expiry on a loaded machine.
const TTL = 8;

describe('sidecar with an access token as the agent credential', () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-sidecar-token-'));
  const identityFile = join(dir, 'identity.json');
  const seen: http.IncomingHttpHeaders[] = [];
  let bed: OAuthBed;
  let plane: FollowingPlane;
  let run: RunningWithEgress;
  let broker: http.Server;
  let brokerPort = 0;
  const sidecars: RunningSidecar[] = [];

  const sidecar = async (tokenUrl: string) => {
    const s = await startSidecar({
      config: loadConfig({ SIDECAR_CREDENTIAL: 'token', SIDECAR_TOKEN_URL: tokenUrl, SIDECAR_TOKEN_AUDIENCE: 'broker' }),
      identityFile,
      brokerUrl: `http://127.0.0.1:${brokerPort}`,
      proxyUrl: `http://127.0.0.1:${run.gateway.port}`,
      addr: '127.0.0.1:0',
    });
    sidecars.push(s);
    return s;
  };
  const call = async (s: RunningSidecar) => {
    const r = await fetch(`http://127.0.0.1:${s.port}/v1/models`, { headers: { authorization: 'Bearer dummy' } });
    return { status: r.status, body: (await r.json()) as Record<string, any>, reason: r.headers.get(H.denyReason) };
  };
  const lastToken = () => String(seen.at(-1)?.authorization ?? '').replace(/^Bearer /, '');
  const issued = async () => ((await bed.api.get('/v1/tokens?agent=sc-bot&limit=500')).json.tokens as unknown[]).length;

  beforeAll(async () => {
    setLogLevel('error');
    bed = await openBed(testBackends()[0]!, { IDP_TOKEN_TTL_SECONDS: String(TTL) });
    broker = http.createServer((req, res) => {
      seen.push(req.headers);
      req.resume().on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"object":"list","data":[]}'));
    });
    brokerPort = await listen(broker, '127.0.0.1:0');
    const entries = [
      { name: 'broker', upstream: `127.0.0.1:${brokerPort}`, kind: 'service' as const },
      // The upstream serves a model: it is Writ's broker, the next enforcement point, so the proxy passes it the token.
      { name: 'sc-model', upstream: `127.0.0.1:${brokerPort}`, kind: 'model' as const },
      { name: 'sc-bot', upstream: 'sc-bot.agents.svc:8080', kind: 'agent' as const, egressAllow: ['broker'] },
    ];
    const me = await agent(bed, 'sc-bot');
    for (const e of entries) bed.services.set(e.name, e);
    writeFileSync(identityFile, JSON.stringify(me));
    plane = await startFollowingPlane(bed, entries);
    run = plane.run;
  }, 120_000);
  afterAll(async () => {
    for (const s of sidecars) await s.close();
    await plane?.close();
    if (broker) await close(broker);
    await bed?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('calls carry one access token (no VP), renewed before it expires', async () => {
    const s = await sidecar(`http://127.0.0.1:${bed.port}/oauth/token`);
    // Until the control plane has the issuer key and both feeds, the proxy refuses every token.
    await expect.poll(async () => (await call(s)).status, { timeout: 10_000, interval: 100 }).toBe(200);
    const token = lastToken();
    expect(decodeProtectedHeader(token)).toMatchObject({ typ: 'at+jwt', alg: 'EdDSA' });
    const claims = decodeJwt(token);
    expect(claims).toMatchObject({ iss: 'http://idp.test', aud: 'broker', client_id: 'sc-bot', act: { name: 'sc-bot' } });
    expect(claims.exp! - claims.iat!).toBe(TTL);
    expect(seen.at(-1)![H.agentVp]).toBeUndefined();
    expect(seen.at(-1)![H.actor]).toBe('sc-bot');

    // Many calls, one token: nothing is fetched or minted per request.
    const before = await issued();
    const burst = await Promise.all(Array.from({ length: 8 }, () => call(s)));
    expect(burst.map((r) => r.status)).toEqual(Array(8).fill(200));
    expect(new Set(seen.slice(-8).map((h) => h.authorization))).toEqual(new Set([`Bearer ${token}`]));
    expect(await issued()).toBe(before);

    // Renewed at 80% of its lifetime (a timer), before the old one expires.
    await expect.poll(async () => (await call(s), lastToken()), { timeout: TTL * 1000, interval: 200 }).not.toBe(token);
    const renewed = decodeJwt(lastToken());
    expect(renewed.iat!).toBeLessThan(claims.exp!);
    expect(renewed.jti).not.toBe(claims.jti);
  });

  it('fails closed with the reason when no token can be had', async () => {
    const s = await sidecar(`http://127.0.0.1:${bed.port}/oauth/token`);
    await expect.poll(async () => (await call(s)).status, { timeout: 10_000, interval: 100 }).toBe(200);

    // The agent suspended: the proxy refuses the held token; the next fetch is refused.
    const now = new Date().toISOString();
    await seedAgent(bed.store.db, 'default', { agentName: 'sc-bot', ownerRef: 'x', status: 'suspended', createdAt: now, updatedAt: now });
    await expect.poll(async () => (await call(s)).status, { timeout: 2000, interval: 50 }).toBe(403);
    const refused = await call(s);
    expect(refused.status).toBe(503);
    expect(refused.body.error).toMatchObject({ code: 'token_unavailable' });
    expect(refused.body.error.message).toMatch(/^the sidecar has no access token for its agent: token endpoint refused \(invalid_grant: .*suspended/);

    // An unreachable token endpoint: 503 with why, never a call without a credential.
    const calls = seen.length;
    const lost = await sidecar('http://127.0.0.1:1/oauth/token');
    const r = await call(lost);
    expect(r.status).toBe(503);
    expect(r.body.error.message).toMatch(/^the sidecar has no access token for its agent: token endpoint unreachable/);
    expect(seen.length).toBe(calls);
  });
});
