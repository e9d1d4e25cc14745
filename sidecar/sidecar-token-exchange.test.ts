/**
 * The sidecar's exchange path (`SIDECAR_CREDENTIAL=token` with `SIDECAR_TOKEN_SUBJECT_FILE`, issue
 * 43 item 8) against a real identity authority and a real enforcement point (the control plane's
 * forward proxy, following the authority over HTTP): the file holds a delegation alice approved;
 * the sidecar exchanges it (RFC 8693, its Membership VP the actor token) for a token that speaks
 * for alice and the agent, and calls carry that token (no VP). The delegation revoked: the proxy
 * refuses the held token and the next exchange is refused, so the call fails closed with the
 * reason; an unreadable delegation file fails closed too.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { close, listen } from '../runtime/lib/http.js';
import { setLogLevel } from '../runtime/lib/log.js';
import { loadConfig } from '../runtime/lib/settings.js';
import { agent, delegation, openBed, type OAuthBed } from '../runtime/identity/oauth/oauth-testing.js';
import type { RunningWithEgress } from '../runtime/control-plane/egress-gateway.js';
import { startFollowingPlane, type FollowingPlane } from '../runtime/control-plane/following-testing.js';
import { testBackends } from '../runtime/store/testing.js';
import { startSidecar, type RunningSidecar } from './server.js';

describe('sidecar exchanging a delegation for its access token', () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-sidecar-exchange-'));
  const identityFile = join(dir, 'identity.json');
  const subjectFile = join(dir, 'delegation.jwt');
  const seen: http.IncomingHttpHeaders[] = [];
  let bed: OAuthBed;
  let plane: FollowingPlane;
  let run: RunningWithEgress;
  let broker: http.Server;
  let brokerPort = 0;
  let granted: { id: string; vcJti: string };
  let did = '';
  const sidecars: RunningSidecar[] = [];

  const sidecar = async (subject: string) => {
    const s = await startSidecar({
      config: loadConfig({
        SIDECAR_CREDENTIAL: 'token',
        SIDECAR_TOKEN_URL: `http://127.0.0.1:${bed.port}/oauth/token`,
        SIDECAR_TOKEN_AUDIENCE: 'broker',
        SIDECAR_TOKEN_SUBJECT_FILE: subject,
      }),
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
    return { status: r.status, body: (await r.json()) as Record<string, any> };
  };

  beforeAll(async () => {
    setLogLevel('error');
    bed = await openBed(testBackends()[0]!);
    broker = http.createServer((req, res) => {
      seen.push(req.headers);
      req.resume().on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"object":"list","data":[]}'));
    });
    brokerPort = await listen(broker, '127.0.0.1:0');
    const entries = [
      { name: 'broker', upstream: `127.0.0.1:${brokerPort}`, kind: 'service' as const },
      // The upstream serves a model: it is Writ's broker, the next enforcement point, so the proxy passes it the token.
      { name: 'sx-model', upstream: `127.0.0.1:${brokerPort}`, kind: 'model' as const },
      { name: 'sx-bot', upstream: 'sx-bot.agents.svc:8080', kind: 'agent' as const, egressAllow: ['broker'] },
    ];
    const me = await agent(bed, 'sx-bot');
    did = me.did;
    for (const e of entries) bed.services.set(e.name, e);
    writeFileSync(identityFile, JSON.stringify(me));
    const d = await delegation(bed, 'sx-bot', { task: 'T-sx', action: 'models:list', resource: 'broker/*' });
    granted = { id: d.id, vcJti: d.vcJti! };
    writeFileSync(subjectFile, `${d.vc!}\n`);
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

  it("calls carry the exchanged token: alice's delegation, the agent as actor, no VP", async () => {
    const s = await sidecar(subjectFile);
    // Until the control plane has the issuer key and both feeds, the proxy refuses every token.
    await expect.poll(async () => (await call(s)).status, { timeout: 10_000, interval: 100 }).toBe(200);
    const h = seen.at(-1)!;
    const c = decodeJwt(String(h.authorization).replace(/^Bearer /, ''));
    expect({
      iss: c.iss,
      sub: c.sub,
      aud: c.aud,
      act: c.act,
      client_id: c.client_id,
      scope: c.scope,
      delegation: c.delegation,
      vp: h[H.agentVp] ?? null,
      actor: h[H.actor],
    }).toEqual({
      iss: 'http://idp.test',
      sub: 'alice',
      aud: 'broker',
      act: { sub: did, name: 'sx-bot' },
      client_id: 'sx-bot',
      scope: 'models:list',
      delegation: { id: granted.id, vc_jti: granted.vcJti, task: 'T-sx', action: 'models:list', resource: 'broker/*' },
      vp: null,
      actor: 'sx-bot',
    });
    const listed = (await bed.api.get(`/v1/tokens?delegation=${granted.id}`)).json.tokens as { grant: string; human: string }[];
    expect(listed.map((t) => [t.grant, t.human])).toEqual([['token-exchange', 'alice']]);
  });

  it('fails closed with the reason: an unreadable delegation file, then the delegation revoked', async () => {
    const missing = await sidecar(join(dir, 'absent.jwt'));
    const calls = seen.length;
    const r = await call(missing);
    expect([r.status, r.body.error.code]).toEqual([503, 'token_unavailable']);
    expect(r.body.error.message).toMatch(
      /^the sidecar has no access token for its agent: cannot read the delegation file .*absent\.jwt \(SIDECAR_TOKEN_SUBJECT_FILE\)/,
    );
    expect(seen.length).toBe(calls);

    const s = await sidecar(subjectFile);
    await expect.poll(async () => (await call(s)).status, { timeout: 10_000, interval: 100 }).toBe(200);
    expect((await bed.api.post('/v1/revoke', { vcJti: granted.vcJti })).status).toBe(200);
    // The proxy refuses the held token once its revocation feed has the delegation; the sidecar drops it.
    await expect.poll(async () => (await call(s)).status, { timeout: 2000, interval: 50 }).toBe(403);
    const before = seen.length;
    const refused = await call(s);
    expect([refused.status, refused.body.error.code]).toEqual([503, 'token_unavailable']);
    expect(refused.body.error.message).toBe(
      `the sidecar has no access token for its agent: token endpoint refused (invalid_grant: delegation ${granted.id} is revoked)`,
    );
    expect(seen.length).toBe(before);
  });
});
