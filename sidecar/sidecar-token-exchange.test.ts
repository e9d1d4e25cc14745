/**
 * The sidecar's exchange path (`SIDECAR_CREDENTIAL=token` with `SIDECAR_TOKEN_SUBJECT_FILE`, issue
 * 43 item 8) against a real identity authority and a real enforcement point (the control plane's
 * forward proxy, following the authority over HTTP): the file holds a delegation alice approved;
 * the sidecar exchanges it (RFC 8693, its Membership VP the actor token) for a token that speaks
 * for alice and the agent, and calls carry that token (no VP). The delegation revoked: the proxy
 * refuses the held token and the next exchange is refused, so the call fails closed with the
 * reason; an unreadable delegation file fails closed too.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { setLogLevel } from '../runtime/lib/log.js';
import { delegation } from '../runtime/identity/oauth/oauth-testing.js';
import { openTokenBed, type TokenBed } from './token-testing.js';

describe('sidecar exchanging a delegation for its access token', () => {
  let t: TokenBed;
  let subjectFile = '';
  let granted: { id: string; vcJti: string };
  const sidecar = (subject: string) => t.sidecar(`http://127.0.0.1:${t.bed.port}/oauth/token`, { SIDECAR_TOKEN_SUBJECT_FILE: subject });
  const call: TokenBed['call'] = (s) => t.call(s);

  beforeAll(async () => {
    setLogLevel('error');
    t = await openTokenBed('sx-bot');
    const d = await delegation(t.bed, 'sx-bot', { task: 'T-sx', action: 'models:list', resource: 'broker/*' });
    granted = { id: d.id, vcJti: d.vcJti! };
    subjectFile = join(t.dir, 'delegation.jwt');
    writeFileSync(subjectFile, `${d.vc!}\n`);
  }, 120_000);
  afterAll(async () => t?.close());

  it("calls carry the exchanged token: alice's delegation, the agent as actor, no VP", async () => {
    const s = await sidecar(subjectFile);
    // Until the control plane has the issuer key and both feeds, the proxy refuses every token.
    await expect.poll(async () => (await call(s)).status, { timeout: 10_000, interval: 100 }).toBe(200);
    const h = t.seen.at(-1)!;
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
      act: { sub: t.me.did, name: 'sx-bot' },
      client_id: 'sx-bot',
      scope: 'models:list',
      delegation: { id: granted.id, vc_jti: granted.vcJti, task: 'T-sx', action: 'models:list', resource: 'broker/*' },
      vp: null,
      actor: 'sx-bot',
    });
    const listed = (await t.bed.api.get(`/v1/tokens?delegation=${granted.id}`)).json.tokens as { grant: string; human: string }[];
    expect(listed.map((t) => [t.grant, t.human])).toEqual([['token-exchange', 'alice']]);
  });

  it('fails closed with the reason: an unreadable delegation file, then the delegation revoked', async () => {
    const missing = await sidecar(join(t.dir, 'absent.jwt'));
    const calls = t.seen.length;
    const r = await call(missing);
    expect([r.status, r.body.error.code]).toEqual([503, 'token_unavailable']);
    expect(r.body.error.message).toMatch(
      /^the sidecar has no access token for its agent: cannot read the delegation file .*absent\.jwt \(SIDECAR_TOKEN_SUBJECT_FILE\)/,
    );
    expect(t.seen.length).toBe(calls);

    const s = await sidecar(subjectFile);
    await expect.poll(async () => (await call(s)).status, { timeout: 10_000, interval: 100 }).toBe(200);
    expect((await t.bed.api.post('/v1/revoke', { vcJti: granted.vcJti })).status).toBe(200);
    // The proxy refuses the held token once its revocation feed has the delegation; the sidecar drops it.
    await expect.poll(async () => (await call(s)).status, { timeout: 2000, interval: 50 }).toBe(403);
    const before = t.seen.length;
    const refused = await call(s);
    expect([refused.status, refused.body.error.code]).toEqual([503, 'token_unavailable']);
    expect(refused.body.error.message).toBe(
      `the sidecar has no access token for its agent: token endpoint refused (invalid_grant: delegation ${granted.id} is revoked)`,
    );
    expect(t.seen.length).toBe(before);
  });
});
