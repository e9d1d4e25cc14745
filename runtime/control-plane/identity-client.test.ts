/**
 * The HTTP identity client against a real identity authority served on a loopback socket (PGlite
 * in memory): answers, the VP cache and its revalidation, single flight, revocation cutting a
 * cached verification, delegation checks with their id and expiry, and failing closed when the
 * authority is slow, down or answers nonsense.
 */
import http from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { close, listen } from '../lib/http.js';
import { openStore, type Store } from '../store/factory.js';
import { createIdentityAuthority, type IdentityAuthority } from '../identity/server.js';
import { presentationFor } from '../identity/client.js';
import { notReady } from '../identity/context.js';
import { inProcessIdentity } from '../identity/in-process.js';
import { provisionAgent, jtiOf } from './proxy/testkit.js';
import { createIdentityClient, type IdentityClient } from './identity-client.js';
import { loadConfig } from '../lib/settings.js';

describe('identity client over HTTP', () => {
  let store: Store;
  let authority: IdentityAuthority;
  let server: http.Server;
  let base: string;
  const hits: string[] = [];
  const clients: IdentityClient[] = [];
  const client = (o: Partial<Parameters<typeof createIdentityClient>[0]> = {}) => {
    const c = createIdentityClient({ baseUrl: base, pollMs: 50, ...o });
    clients.push(c);
    return c;
  };
  const count = (path: string) => hits.filter((h) => h === path).length;
  /** Revokes the identity's Membership VC; resolves with `c`'s first refusal of `vp` (at most 2 s) and how long it took. */
  const revokeAndAsk = async (c: IdentityClient, identity: { membershipVc: string }, vp: string) => {
    const r = await fetch(`${base}/v1/revoke`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ vcJti: jtiOf(identity.membershipVc) }),
    });
    expect(r.status).toBe(200);
    const t0 = Date.now();
    let answer = await c.verifyPresentation(vp);
    while (answer.ok && Date.now() - t0 < 2000) {
      await new Promise((res) => setTimeout(res, 20));
      answer = await c.verifyPresentation(vp);
    }
    return { answer, ms: Date.now() - t0 };
  };

  beforeAll(async () => {
    store = await openStore({ backend: 'memory' });
    authority = createIdentityAuthority({ store, config: loadConfig({ IDP_ISSUER_HOST: 'idp.test' }) });
    await authority.whenReady();
    server = createAdaptorServer({
      fetch: (req: Request) => {
        hits.push(new URL(req.url).pathname);
        return authority.app.fetch(req);
      },
    }) as http.Server;
    base = `http://127.0.0.1:${await listen(server, '127.0.0.1:0')}`;
  });
  afterAll(async () => {
    for (const c of clients) await c.close();
    await close(server);
    await authority.close();
    await store.close();
  });

  it('verifies a VP, caches it by token, shares concurrent calls, keeps failures uncached', async () => {
    const { identity } = await provisionAgent(authority, 'cache-bot');
    const c = client();
    expect(await c.pollRevocations()).toBe(true);
    const vp = await presentationFor(identity, { ttlSeconds: 600 });
    const before = count('/v1/agents/verify-presentation');
    const answers = await Promise.all(Array.from({ length: 10 }, () => c.verifyPresentation(vp)));
    for (const a of answers) expect(a).toMatchObject({ ok: true, agentName: 'cache-bot', agentDid: identity.did });
    expect(count('/v1/agents/verify-presentation') - before).toBe(1);
    expect(await c.verifyPresentation(vp)).toMatchObject({ ok: true });
    expect(count('/v1/agents/verify-presentation') - before).toBe(1);
    expect(c.cacheSize()).toBe(1);
    // The same answer is available without I/O; nothing for a token never verified.
    expect(c.cachedPresentation?.(vp)).toMatchObject({ ok: true, agentName: 'cache-bot' });
    expect(c.cachedPresentation?.(vp, 'some-other-audience')).toBeUndefined();
    // Another audience is another question.
    expect(await c.verifyPresentation(vp, 'some-other-audience')).toMatchObject({ ok: false });
    expect(count('/v1/agents/verify-presentation') - before).toBe(2);
    // Garbage is answered with a reason and never cached.
    const bad = await c.verifyPresentation('not.a.jwt');
    expect(bad.ok).toBe(false);
    expect(bad.reason).toMatch(/\S/);
    await c.verifyPresentation('not.a.jwt');
    expect(count('/v1/agents/verify-presentation') - before).toBe(4);
    expect(c.cacheSize()).toBe(1);
  });

  it("answers each VP for its own agent when VPs of the same length are asked in turn (the cache key is never another VP's)", async () => {
    const a = await provisionAgent(authority, 'turn-bot-a');
    const b = await provisionAgent(authority, 'turn-bot-b');
    const c = client();
    await c.pollRevocations();
    const vpA = await presentationFor(a.identity, { ttlSeconds: 600 });
    const vpB = await presentationFor(b.identity, { ttlSeconds: 600 });
    expect(vpA.length).toBe(vpB.length);
    // The decision's order: a synchronous look (a miss), then the verification of the same VP.
    expect(c.cachedPresentation?.(vpA)).toBeUndefined();
    expect(c.cachedPresentation?.(vpB)).toBeUndefined();
    expect(await c.verifyPresentation(vpA)).toMatchObject({ ok: true, agentName: 'turn-bot-a' });
    expect(c.cachedPresentation?.(vpB)).toBeUndefined();
    expect(await c.verifyPresentation(vpB)).toMatchObject({ ok: true, agentName: 'turn-bot-b' });
    for (let i = 0; i < 3; i++) {
      expect(c.cachedPresentation?.(vpA)).toMatchObject({ agentName: 'turn-bot-a' });
      expect(c.cachedPresentation?.(vpB)).toMatchObject({ agentName: 'turn-bot-b' });
      expect(c.cachedPresentation?.(vpA, 'some-other-audience')).toBeUndefined();
      expect(await c.verifyPresentation(vpA)).toMatchObject({ agentName: 'turn-bot-a' });
    }
    expect(c.cacheSize()).toBe(2);
  });

  it('revalidates after the revalidation interval', async () => {
    const { identity } = await provisionAgent(authority, 'reval-bot');
    const c = client({ revalidateMs: 100 });
    await c.pollRevocations();
    const vp = await presentationFor(identity, { ttlSeconds: 600 });
    const before = count('/v1/agents/verify-presentation');
    await c.verifyPresentation(vp);
    await c.verifyPresentation(vp);
    expect(count('/v1/agents/verify-presentation') - before).toBe(1);
    await new Promise((r) => setTimeout(r, 150));
    expect(await c.verifyPresentation(vp)).toMatchObject({ ok: true });
    expect(count('/v1/agents/verify-presentation') - before).toBe(2);
  });

  it('revoking the Membership VC cuts a cached verification within a second', async () => {
    const { identity } = await provisionAgent(authority, 'revoke-bot');
    const c = client({ pollMs: 200 });
    await c.pollRevocations();
    const vp = await presentationFor(identity, { ttlSeconds: 600 });
    expect(await c.verifyPresentation(vp)).toMatchObject({ ok: true });
    expect(c.cacheSize()).toBeGreaterThan(0);
    const { answer, ms } = await revokeAndAsk(c, identity, vp);
    expect(answer.ok).toBe(false);
    expect(answer.reason).toMatch(/revoked/i);
    expect(c.cachedPresentation?.(vp)).toBeUndefined();
    expect(ms).toBeLessThan(1000);
  });

  it('in process (the all-in-one): the presentation answers HTTP gives, no request, cached and cut by revocation alike', async () => {
    const { identity } = await provisionAgent(authority, 'local-bot');
    const observed: string[] = [];
    const local = client({ local: inProcessIdentity(authority), onCall: (op, _s, outcome) => observed.push(`${op}:${outcome}`) });
    const remote = client();
    await Promise.all([local.pollRevocations(), remote.pollRevocations()]);
    const vp = await presentationFor(identity, { ttlSeconds: 600 });
    const before = count('/v1/agents/verify-presentation');
    const answer = await local.verifyPresentation(vp);
    expect(answer).toMatchObject({ ok: true, agentName: 'local-bot', agentDid: identity.did });
    expect(count('/v1/agents/verify-presentation')).toBe(before);
    expect(observed).toContain('verify_presentation:ok');
    expect(await remote.verifyPresentation(vp)).toEqual(answer);
    expect(count('/v1/agents/verify-presentation')).toBe(before + 1);
    expect(local.cachedPresentation?.(vp)).toEqual(answer);
    // Refused alike: another audience, garbage, a VP past the route's size limit (its 422).
    for (const [v, aud] of [
      [vp, 'some-other-audience'],
      ['not.a.jwt', undefined],
      [`${vp}${'A'.repeat(70_000)}`, undefined],
    ] as const) {
      const [a, b] = [await local.verifyPresentation(v, aud), await remote.verifyPresentation(v, aud)];
      expect(a).toEqual(b);
      expect(a.ok).toBe(false);
    }
    expect((await local.verifyPresentation(`${vp}${'A'.repeat(70_000)}`)).reason).toMatch(/^identity authority answered 422/);
    expect(count('/v1/agents/verify-presentation')).toBe(before + 4);
    expect(local.cacheSize()).toBe(1);
    // A revocation cuts the cached answer (the watcher still polls over HTTP).
    const { answer: after } = await revokeAndAsk(local, identity, vp);
    expect(after).toMatchObject({ ok: false, reason: expect.stringMatching(/revoked/i) });
  });

  it('checks delegations live, with id, credential and expiry; in process, the same answers without a request', async () => {
    await provisionAgent(authority, 'deleg-bot');
    const c = client();
    const local = client({ local: inProcessIdentity(authority) });
    const q = { actor: 'deleg-bot', task: 'T-1', action: 'ledger:read', resource: 'acct/7' };
    const before = count('/v1/delegations/check');
    const both = async (query = q) => {
      const [http, inProcess] = [await c.checkDelegation(query), await local.checkDelegation(query)];
      expect(inProcess).toEqual(http);
      return http;
    };
    expect(await both()).toMatchObject({ ok: false });
    const req = await fetch(`${base}/v1/delegations/request`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ actorName: 'deleg-bot', task: 'T-1', action: 'ledger:read', resource: 'acct/*', reason: 'month end', ttlSeconds: 600 }),
    });
    expect(req.status).toBe(201);
    const { id } = (await req.json()) as { id: string };
    const ok = await fetch(`${base}/v1/delegations/${id}/approve`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ approver: 'alice@example.com' }),
    });
    expect(ok.status).toBe(200);
    const yes = await both();
    expect(yes).toMatchObject({ ok: true, delegationId: id });
    expect(typeof yes.vcJti).toBe('string');
    expect(yes.notAfter! - Date.now() / 1000).toBeGreaterThan(500);
    // A query the route refuses (a task past its 512 characters): an answer not had, both ways.
    expect(await both({ ...q, task: 'T'.repeat(513) })).toMatchObject({ ok: false, unavailable: true, reason: 'identity authority answered 422' });
    // One that passes the schema but holds a NUL: the route's input check refuses it too.
    expect(await both({ ...q, task: 'T-1\u0000' })).toMatchObject({ ok: false, unavailable: true, reason: 'identity authority answered 422' });
    await fetch(`${base}/v1/revoke`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ vcJti: yes.vcJti }) });
    expect(await both()).toMatchObject({ ok: false });
    expect(count('/v1/delegations/check') - before).toBe(5);
  });

  it('in process, an authority that is not ready (its issuer key still loading) answers as its 503', async () => {
    const { identity } = await provisionAgent(authority, 'cold-bot');
    const vp = await presentationFor(identity, { ttlSeconds: 600 });
    const c = client({ local: inProcessIdentity({ ...authority, ready: () => false }) });
    await c.pollRevocations();
    expect(await c.verifyPresentation(vp)).toEqual({ ok: false, reason: `identity authority answered 503: ${notReady().message}` });
    expect(c.cacheSize()).toBe(0);
    expect(await c.checkDelegation({ actor: 'cold-bot', task: 't', action: 'a', resource: 'r' })).toMatchObject({ ok: false, unavailable: true });
  });

  it('in process, a store that fails reads as the route 503 both ways, naming no SQL', async () => {
    const s = await openStore({ backend: 'memory' });
    const broken = createIdentityAuthority({ store: s, config: loadConfig({ IDP_ISSUER_HOST: 'idp.test' }) });
    await broken.whenReady();
    const { identity } = await provisionAgent(broken, 'store-bot');
    const vp = await presentationFor(identity, { ttlSeconds: 600 });
    const srv = createAdaptorServer({ fetch: broken.app.fetch }) as http.Server;
    const url = `http://127.0.0.1:${await listen(srv, '127.0.0.1:0')}`;
    try {
      const remote = client({ baseUrl: url, pollMs: 0 });
      const local = client({ baseUrl: url, pollMs: 0, local: inProcessIdentity(broken) });
      // verify-presentation reads its index from memory: shut the store, then a step-3 miss reads it.
      await broken.close();
      await s.close();
      const q = { actor: 'store-bot', task: 't', action: 'a', resource: 'r' };
      const [a, b] = [await local.checkDelegation(q), await remote.checkDelegation(q)];
      expect(a).toEqual(b);
      expect(a).toMatchObject({ ok: false, unavailable: true });
      const [v, w] = [await local.verifyPresentation(vp), await remote.verifyPresentation(vp)];
      expect(v).toEqual(w);
      expect(v.ok).toBe(false);
      for (const r of [a.reason, v.reason]) expect(r).not.toMatch(/select|insert|from /i);
    } finally {
      srv.closeAllConnections();
      await close(srv);
    }
  });

  it('fails closed: a hanging authority times out, a dead one is unreachable, a stale watcher bypasses the cache', async () => {
    const hang = http.createServer(() => {});
    const hangPort = await listen(hang, '127.0.0.1:0');
    try {
      const slow = client({ baseUrl: `http://127.0.0.1:${hangPort}`, timeoutMs: 200, pollMs: 0 });
      const t0 = Date.now();
      const [v, d] = await Promise.all([slow.verifyPresentation('x.y.z'), slow.checkDelegation({ actor: 'a', task: 't', action: 'x', resource: 'r' })]);
      expect(Date.now() - t0).toBeLessThan(1500);
      expect(v).toMatchObject({ ok: false });
      expect(v.reason).toMatch(/timeout/);
      expect(d).toMatchObject({ ok: false });
    } finally {
      hang.closeAllConnections();
      await close(hang);
    }

    // A 500-answering authority is a deny, not a crash.
    const broken = http.createServer((_q, res) => res.writeHead(500).end('oops'));
    const brokenPort = await listen(broken, '127.0.0.1:0');
    try {
      const b = client({ baseUrl: `http://127.0.0.1:${brokenPort}`, pollMs: 0 });
      expect(await b.verifyPresentation('x.y.z')).toMatchObject({ ok: false, reason: expect.stringMatching(/500/) });
      expect(await b.checkDelegation({ actor: 'a', task: 't', action: 'x', resource: 'r' })).toMatchObject({ ok: false });
    } finally {
      await close(broken);
    }

    // A cached allow is not served once the revocation watcher has lost the authority.
    const { identity } = await provisionAgent(authority, 'stale-bot');
    const vp = await presentationFor(identity, { ttlSeconds: 600 });
    let up = true;
    const gate = createAdaptorServer({ fetch: (req: Request) => (up ? authority.app.fetch(req) : new Response('down', { status: 503 })) }) as http.Server;
    const gatePort = await listen(gate, '127.0.0.1:0');
    try {
      const g = client({ baseUrl: `http://127.0.0.1:${gatePort}`, pollMs: 30, staleMs: 150 });
      await g.pollRevocations();
      expect(await g.verifyPresentation(vp)).toMatchObject({ ok: true });
      expect(g.cacheSize()).toBe(1);
      up = false;
      await new Promise((r) => setTimeout(r, 300));
      expect(await g.verifyPresentation(vp)).toMatchObject({ ok: false, reason: expect.stringMatching(/503/) });
      up = true;
      await new Promise((r) => setTimeout(r, 100));
      expect(await g.verifyPresentation(vp)).toMatchObject({ ok: true });
    } finally {
      await close(gate);
    }
  });
});
