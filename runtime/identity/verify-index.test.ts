/**
 * Verify-presentation answers step 3 from memory (verify-index.ts) and stays exactly as strict as
 * the store: a revocation is refused at once on the replica that took it and, by the time it
 * answers, on another replica on the same PostgreSQL schema (the feed's `settled()`), and while
 * change notifications are lost the replicas fall back to the store. Membership VCs are cached but
 * never past their exp.
 * Over real sockets; PGlite always, PostgreSQL when TEST_DATABASE_URL is set.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { VP_AUDIENCE } from '../lib/brand.js';
import { setLogLevel } from '../lib/log.js';
import type { Store } from '../store/factory.js';
import { TEST_DATABASE_URL, testBackends } from '../store/testing.js';
import { presentationFor, type AgentIdentity } from './client.js';
import { authorityPair, withListenersKilled, type Authority, type AuthorityPair } from './replicas-testing.js';
import { startIdentityAuthority } from './server.js';
import { makeAgent, makeIssuer } from './testkit.js';
import { checkPresentation } from './vc.js';
import { eventually } from '../lib/poll-testing.js';
import { loadConfig } from '../lib/settings.js';

function api(a: Authority) {
  const base = `http://127.0.0.1:${a.port}`;
  const post = async (path: string, body?: unknown) => {
    const r = await fetch(base + path, {
      method: 'POST',
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, json: (await r.json()) as any };
  };
  return {
    post,
    verify: async (vp: string) => (await post('/v1/agents/verify-presentation', { vp })).json as { ok: boolean; reason: string; agentName: string | null },
    provision: async (name: string): Promise<AgentIdentity & { membershipJti: string }> => {
      expect((await post('/v1/agents', { name, role: 'worker', capabilities: [{ action: 'chat', resource: 'gpt' }] })).status).toBe(201);
      const p = await post(`/v1/agents/${name}/provision`);
      expect(p.status).toBe(200);
      return p.json;
    },
  };
}

const current = (a: Authority) => a.authority.context.verifyIndex!.size().current;

beforeAll(() => setLogLevel('error'));

describe.each(testBackends())('verify index on $name', (b) => {
  let store: Store;
  let idp: Authority;
  let clock = Date.now();
  beforeAll(async () => {
    store = await b.open();
    idp = await startIdentityAuthority({
      store,
      config: loadConfig({ IDP_ISSUER_HOST: 'idp.index.test', IDP_MEMBERSHIP_TTL_SECONDS: '60', IDP_CLOCK_SKEW_SECONDS: '5' }),
      addr: '127.0.0.1:0',
      now: () => clock,
    });
    await idp.authority.whenReady();
    await eventually(() => current(idp), 'the verify index to be current', 5000);
  });
  afterAll(async () => {
    await idp?.close();
    await store?.close();
  });

  it('answers from memory and refuses a revoked Membership VC at once on this replica', async () => {
    const c = api(idp);
    const id = await c.provision('idx-a');
    const vp = await presentationFor(id, { now: clock });
    expect(await c.verify(vp)).toMatchObject({ ok: true, agentName: 'idx-a' });
    expect(current(idp)).toBe(true);
    expect(idp.authority.context.verifyIndex!.size()).toMatchObject({ agents: expect.any(Number), current: true });
    expect((await c.post('/v1/revoke', { vcJti: id.membershipJti })).status).toBe(200);
    expect(await c.verify(vp)).toMatchObject({ ok: false, reason: 'membership credential revoked' });
  });

  it('a revocation written by any other path (plain SQL) reaches the in-memory view', async () => {
    const c = api(idp);
    const id = await c.provision('idx-sql');
    const vp = await presentationFor(id, { now: clock });
    expect((await c.verify(vp)).ok).toBe(true);
    await store.db.execute(sql`insert into identity_revocations (jti, tenant_id, list, revoked_at) values (${id.membershipJti}, 'default', 'default', now())`);
    await eventually(async () => (await c.verify(vp)).reason === 'membership credential revoked', 'the revocation written to the store', 1500);
  });

  it('re-provisioning refuses the old key at once', async () => {
    const c = api(idp);
    const old = await c.provision('idx-rot');
    const vp = await presentationFor(old, { now: clock });
    expect((await c.verify(vp)).ok).toBe(true);
    const fresh = await c.provision('idx-rot');
    expect((await c.verify(vp)).ok).toBe(false);
    expect(await c.verify(await presentationFor(fresh, { now: clock }))).toMatchObject({ ok: true, agentName: 'idx-rot' });
  });

  it('a cached Membership VC is never accepted past its exp', async () => {
    const c = api(idp);
    const id = await c.provision('idx-exp');
    const vp = await presentationFor(id, { now: clock, ttlSeconds: 3600 });
    expect((await c.verify(vp)).ok).toBe(true);
    expect((await c.verify(vp)).ok).toBe(true); // second use: from the cache
    clock += 64_000; // exp (60 s) + skew (5 s) not yet passed
    expect((await c.verify(vp)).ok).toBe(true);
    clock += 2_000;
    expect(await c.verify(vp)).toMatchObject({ ok: false, reason: 'membership credential expired' });
    clock = Date.now();
  });
});

describe('Membership VC cache (pure)', () => {
  it('verifies each exact token once, rechecks claims on every use, and drops it past exp', async () => {
    const issuer = makeIssuer('cache.test');
    const now = Math.floor(Date.now() / 1000);
    const agent = await makeAgent(issuer, { nowSec: now, ttlSeconds: 100 });
    const o = (nowSec: number) => ({ issuerDid: issuer.did, issuerKey: issuer.publicKey, audience: VP_AUDIENCE, nowSec, skewSec: 0 });
    const vp = await presentationFor(agent, { ttlSeconds: 1000, now: now * 1000 });
    expect((await checkPresentation(vp, o(now))).ok).toBe(true);
    expect((await checkPresentation(vp, o(now + 50))).ok).toBe(true);
    await expect(checkPresentation(vp, o(now + 100))).resolves.toMatchObject({ ok: false, reason: 'membership credential expired' });
    // A token differing from the cached one only in its signature is verified afresh, and fails.
    const [h, p, s] = agent.membershipVc.split('.') as [string, string, string];
    const forged = `${h}.${p}.${s.slice(0, -2)}${s.endsWith('AA') ? 'BA' : 'AA'}`;
    const vp2 = await presentationFor({ ...agent, membershipVc: forged }, { ttlSeconds: 1000, now: now * 1000 });
    await expect(checkPresentation(vp2, o(now))).resolves.toMatchObject({ ok: false, reason: 'membership credential signature invalid' });
    // Another issuer with the same DID but another key does not see the first one's cache.
    const other = { ...makeIssuer('cache.test') };
    await expect(checkPresentation(vp, { ...o(now), issuerKey: other.publicKey })).resolves.toMatchObject({
      ok: false,
      reason: 'membership credential signature invalid',
    });
  });
});

describe.skipIf(!TEST_DATABASE_URL)('two identity authorities on one PostgreSQL schema', () => {
  let pair: AuthorityPair;
  beforeAll(async () => {
    pair = await authorityPair({ IDP_ISSUER_HOST: 'idp.replicas.test' }, current, 'both verify indexes to be current');
  }, 30_000);
  afterAll(async () => pair?.close());

  it('a provision, revoke or re-provision on one replica holds on the other when it answers', async () => {
    const ca = api(pair.a);
    const cb = api(pair.b);
    const id = await ca.provision('rep-1');
    const vp = await presentationFor(id);
    expect((await cb.verify(vp)).ok).toBe(true);
    expect(current(pair.b)).toBe(true);
    expect((await ca.post('/v1/revoke', { vcJti: id.membershipJti })).status).toBe(200);
    expect((await ca.verify(vp)).ok).toBe(false);
    expect((await cb.verify(vp)).ok).toBe(false);

    const id2 = await ca.provision('rep-2');
    const vp2 = await presentationFor(id2);
    expect((await cb.verify(vp2)).ok).toBe(true);
    await ca.provision('rep-2');
    expect((await cb.verify(vp2)).ok).toBe(false);
  });

  it('with the LISTEN connections killed, both fall back to the store (fail closed), then recover', async () => {
    const ca = api(pair.a);
    const cb = api(pair.b);
    const id = await ca.provision('rep-loss');
    const vp = await presentationFor(id);
    await eventually(async () => (await cb.verify(vp)).ok && current(pair.b), 'replica b to accept the VP, current', 1500);
    // Written while nobody listens: no notification reaches either replica.
    const killed = await withListenersKilled(pair.schema, (admin) =>
      admin.unsafe(`insert into "${pair.schema}".identity_revocations (jti, tenant_id, list, revoked_at) values ($1, 'default', 'default', now())`, [
        id.membershipJti,
      ]),
    );
    expect(killed).toBeGreaterThanOrEqual(1);
    await eventually(async () => !(await cb.verify(vp)).ok && !(await ca.verify(vp)).ok, 'both replicas to refuse the VP', 2000);
    expect(await cb.verify(vp)).toMatchObject({ ok: false, reason: 'membership credential revoked' });
    // LISTEN comes back (reconnected or re-subscribed), the views reload and are current again.
    await eventually(() => current(pair.a) && current(pair.b), 'both verify indexes current again', 15_000);
    expect((await cb.verify(vp)).ok).toBe(false);
  }, 30_000);
});
