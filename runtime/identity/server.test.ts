import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { VP_AUDIENCE } from '../lib/brand.js';
import { rowsOf, type Store } from '../store/factory.js';
import { testBackends } from '../store/testing.js';
import { presentationFor } from './client.js';
import { publicKeyFromDidKey } from './did.js';
import { createIdentityAuthority, type IdentityAuthority } from './server.js';
import { makeAgent, makeIssuer } from './testkit.js';

type Json = any;

function client(a: IdentityAuthority) {
  const call = async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const init: RequestInit = { method, headers: { ...headers } };
    if (body !== undefined) {
      init.body = typeof body === 'string' ? body : JSON.stringify(body);
      (init.headers as Record<string, string>)['content-type'] = 'application/json';
    }
    const res = await a.app.request(path, init);
    const text = await res.text();
    let json: Json = undefined;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {}
    return { status: res.status, json, headers: res.headers, text };
  };
  return {
    get: (p: string, h?: Record<string, string>) => call('GET', p, undefined, h),
    post: (p: string, b?: unknown) => call('POST', p, b),
  };
}

const expectEnvelope = (r: { json: Json }, code?: string) => {
  expect(typeof r.json.error.code).toBe('string');
  expect(typeof r.json.error.message).toBe('string');
  if (code) expect(r.json.error.code).toBe(code);
};
const expectDetail = (r: { status: number; json: Json }) => {
  expect(r.status).toBe(422);
  expect(Array.isArray(r.json.detail)).toBe(true);
  expect(r.json.detail.length).toBeGreaterThan(0);
  for (const d of r.json.detail) {
    expect(Array.isArray(d.loc)).toBe(true);
    expect(typeof d.msg).toBe('string');
    expect(typeof d.type).toBe('string');
  }
};

describe.each(testBackends())('identity authority on $name', (b) => {
  let store: Store;
  let auth: IdentityAuthority;
  let api: ReturnType<typeof client>;
  let clock = Date.now();
  const now = () => clock;

  beforeAll(async () => {
    // From the real time this block starts (collection ran long before on a slow machine, and
    // VPs minted at the real time would be "not yet valid" beyond the 30 s skew).
    clock = Date.now();
    store = await b.open();
    auth = createIdentityAuthority({ store, env: { IDP_ISSUER_HOST: 'idp.example.com:8443' }, now });
    await auth.whenReady();
    api = client(auth);
  });
  afterAll(async () => {
    await auth.close();
    await store.close();
  });

  async function provisioned(name: string, caps = [{ action: 'db:read', resource: 'db/*' }]) {
    expect((await api.post('/v1/agents', { name, role: 'worker', capabilities: caps })).status).toBe(201);
    const p = await api.post(`/v1/agents/${name}/provision`);
    expect(p.status).toBe(200);
    return p.json;
  }

  describe('discovery', () => {
    it('healthz, readyz, did.json, issuer, openapi, docs', async () => {
      expect(await api.get('/healthz')).toMatchObject({ status: 200, json: { status: 'ok' } });
      expect(await api.get('/readyz')).toMatchObject({ status: 200, json: { status: 'ready' } });
      expect(auth.issuerDid).toBe('did:web:idp.example.com%3A8443');
      const iss = await api.get('/v1/issuer');
      expect(iss.json.issuerDid).toBe(auth.issuerDid);
      expect(iss.json.issuerPubMultibase).toMatch(/^z6Mk/);
      const doc = (await api.get('/.well-known/did.json')).json;
      expect(doc.id).toBe(auth.issuerDid);
      expect(doc['@context'][0]).toBe('https://www.w3.org/ns/did/v1');
      expect(doc.verificationMethod[0]).toEqual({
        id: `${auth.issuerDid}#key-1`,
        type: 'Ed25519VerificationKey2020',
        controller: auth.issuerDid,
        publicKeyMultibase: iss.json.issuerPubMultibase,
      });
      expect(doc.assertionMethod).toEqual([`${auth.issuerDid}#key-1`]);
      const oa = await api.get('/openapi.json');
      expect(oa.json.openapi).toBe('3.1.0');
      for (const p of [
        '/healthz',
        '/readyz',
        '/.well-known/did.json',
        '/v1/issuer',
        '/v1/agents',
        '/v1/agents/{name}',
        '/v1/agents/{name}/provision',
        '/v1/agents/verify-presentation',
        '/v1/delegations/request',
        '/v1/delegations',
        '/v1/delegations/{id}',
        '/v1/delegations/{id}/approve',
        '/v1/delegations/{id}/deny',
        '/v1/delegations/{id}/vc',
        '/v1/delegations/check',
        '/v1/revoke',
        '/v1/revocations',
        '/status/{list}',
      ]) {
        expect(oa.json.paths[p], p).toBeDefined();
      }
      expect(oa.json.paths['/v1/agents'].post.requestBody.required).toBe(true);
      const docs = await api.get('/docs');
      expect(docs.status).toBe(200);
      expect(docs.text).toMatch(/swagger/i);
    });

    it('unknown route and malformed JSON use the error shapes', async () => {
      const nf = await api.get('/v1/nope');
      expect(nf.status).toBe(404);
      expectEnvelope(nf, 'not_found');
      const bad = await api.post('/v1/agents', '{not json');
      expectDetail(bad);
      expect(bad.json.detail[0].type).toBe('json_invalid');
    });

    it('bodies over 1 MiB are 413, except a SCIM snapshot, which may be larger', async () => {
      const big = JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) });
      const tooBig = await api.post('/v1/agents', big);
      expect(tooBig.status).toBe(413);
      expectEnvelope(tooBig, 'payload_too_large');
      const sync = await api.post('/v1/directory/sync', JSON.stringify({ pad: 'x'.repeat(2 * 1024 * 1024) }));
      expect(sync.status).not.toBe(413);
      expect(sync.status).toBeLessThan(500);
    });
  });

  describe('agents', () => {
    it('registers idempotently, lists and gets without keys, 404s unknown', async () => {
      const body = { name: 'ag-1', role: 'analyst', capabilities: [{ action: 'crm:read', resource: 'crm/*', constraints: { max: 3 } }] };
      expect(await api.post('/v1/agents', body)).toMatchObject({ status: 201, json: { name: 'ag-1', status: 'registered' } });
      expect(await api.post('/v1/agents', body)).toMatchObject({ status: 201, json: { name: 'ag-1', status: 'registered' } });
      const one = await api.get('/v1/agents/ag-1');
      expect(one.json).toEqual({ name: 'ag-1', role: 'analyst', did: null, capabilities: body.capabilities, provisioned: false });
      const list = await api.get('/v1/agents');
      expect(list.json.filter((a: Json) => a.name === 'ag-1')).toHaveLength(1);
      const nf = await api.get('/v1/agents/nobody');
      expect(nf.status).toBe(404);
      expectEnvelope(nf, 'not_found');
      const pnf = await api.post('/v1/agents/nobody/provision');
      expect(pnf.status).toBe(404);
      expectEnvelope(pnf);
    });

    it('rejects bad bodies with 422 and writes nothing', async () => {
      for (const bad of [
        {},
        { name: 'x', role: 'r' },
        { name: '', role: 'r', capabilities: [] },
        { name: 'bad name', role: 'r', capabilities: [] },
        { name: 'y', role: 'r', capabilities: [{ action: 'a' }] },
        { name: 'z', role: 5, capabilities: [] },
        [],
        'null',
      ]) {
        expectDetail(await api.post('/v1/agents', bad));
      }
      const names = (await api.get('/v1/agents')).json.map((a: Json) => a.name);
      for (const n of ['x', 'y', 'z', 'bad name']) expect(names).not.toContain(n);
    });

    it('provisions a did:key with Membership and capability VC-JWTs; the private key is not stored', async () => {
      const p = await provisioned('ag-2', [
        { action: 'a:1', resource: 'r/1' },
        { action: 'a:2', resource: 'r/*' },
      ]);
      expect(p.did).toMatch(/^did:key:z6Mk[1-9A-HJ-NP-Za-km-z]+$/);
      expect(publicKeyFromDidKey(p.did)).toHaveLength(32);
      expect(Buffer.from(p.privateKeyB64, 'base64')).toHaveLength(32);
      expect(p.issuerDid).toBe(auth.issuerDid);
      expect(p.capabilityVcs).toHaveLength(2);
      const h = decodeProtectedHeader(p.membershipVc);
      expect(h).toMatchObject({ alg: 'EdDSA', kid: `${auth.issuerDid}#key-1` });
      const m = decodeJwt(p.membershipVc) as Json;
      expect(m).toMatchObject({ iss: auth.issuerDid, sub: p.did, jti: p.membershipJti });
      expect(m.exp).toBeGreaterThan(m.nbf);
      expect(m.vc.type).toEqual(['VerifiableCredential', 'AgentMembershipCredential']);
      expect(m.vc.credentialSubject.id).toBe(p.did);
      const c = decodeJwt(p.capabilityVcs[1]) as Json;
      expect(c.vc.credentialSubject).toMatchObject({ id: p.did, action: 'a:2', resource: 'r/*' });
      const rec = (await api.get('/v1/agents/ag-2')).json;
      expect(rec).toMatchObject({ did: p.did, provisioned: true });
      expect(JSON.stringify(rec)).not.toContain(p.privateKeyB64);
      const dump =
        JSON.stringify(await rowsOf(store.db, sql`select * from identity_agents`)) +
        JSON.stringify(await rowsOf(store.db, sql`select * from identity_credentials`));
      expect(dump).not.toContain(p.privateKeyB64);
      expect(dump).not.toContain(Buffer.from(p.privateKeyB64, 'base64').toString('base64url'));
    });

    it('re-provisioning rotates the key and revokes the previous credentials', async () => {
      const first = await provisioned('ag-3');
      const vpOld = await presentationFor(first);
      expect((await api.post('/v1/agents/verify-presentation', { vp: vpOld })).json.ok).toBe(true);
      const second = (await api.post('/v1/agents/ag-3/provision')).json;
      expect(second.did).not.toBe(first.did);
      const old = (await api.post('/v1/agents/verify-presentation', { vp: vpOld })).json;
      expect(old).toMatchObject({ ok: false, reason: 'membership credential revoked' });
      const revoked = (await api.get('/v1/revocations')).json.revoked;
      expect(revoked).toContain(first.membershipJti);
      expect((await api.post('/v1/agents/verify-presentation', { vp: await presentationFor(second) })).json).toMatchObject({
        ok: true,
        agentName: 'ag-3',
        agentDid: second.did,
      });
    });
  });

  describe('verify-presentation', () => {
    it('accepts a good VP and reports name, DID, membership jti and expiry', async () => {
      const p = await provisioned('vp-ok');
      const vp = await presentationFor(p, { ttlSeconds: 60, now: clock });
      const r = await api.post('/v1/agents/verify-presentation', { vp });
      expect(r.status).toBe(200);
      expect(r.json).toMatchObject({ ok: true, agentName: 'vp-ok', agentDid: p.did, reason: 'verified', membershipJti: p.membershipJti });
      expect(r.json.exp).toBe(Math.floor(clock / 1000) + 60);
      const custom = await presentationFor(p, { audience: 'other-aud' });
      expect((await api.post('/v1/agents/verify-presentation', { vp: custom, audience: 'other-aud' })).json.ok).toBe(true);
      const withNonce = await presentationFor(p, { nonce: 'n-42' });
      expect((await api.post('/v1/agents/verify-presentation', { vp: withNonce, nonce: 'n-42' })).json.ok).toBe(true);
    });

    it('rejects every bad presentation with a specific reason', async () => {
      const p = await provisioned('vp-bad');
      const other = await provisioned('vp-other');
      const foreign = makeIssuer('evil.example');
      const foreignAgent = await makeAgent(foreign);
      const verify = async (vp: string, extra: Record<string, string> = {}) => (await api.post('/v1/agents/verify-presentation', { vp, ...extra })).json;
      const good = await presentationFor(p);
      const [h, pl, s] = good.split('.') as [string, string, string];
      const tamperedPayload = { ...decodeJwt(good), aud: VP_AUDIENCE, nonce: 'changed' };
      const cases: [string, Promise<Json>, RegExp][] = [
        ['wrong audience', verify(await presentationFor(p, { audience: 'elsewhere' })), /audience/],
        ['explicit audience mismatch', verify(good, { audience: 'elsewhere' }), /audience/],
        ['wrong nonce', verify(await presentationFor(p, { nonce: 'a' }), { nonce: 'b' }), /nonce mismatch/],
        ['expired', verify(await presentationFor(p, { ttlSeconds: 10, now: clock - 3600_000 })), /presentation expired/],
        ['tampered payload', verify(`${h}.${Buffer.from(JSON.stringify(tamperedPayload)).toString('base64url')}.${s}`), /signature invalid/],
        ['tampered signature', verify(`${h}.${pl}.${s.slice(0, -4)}AAAA`), /signature invalid/],
        ['vc from another issuer', verify(await presentationFor(foreignAgent)), /not issued by this issuer/],
        ['vc for another holder', verify(await presentationFor({ ...other, membershipVc: p.membershipVc })), /not issued to the presentation holder/],
        ['garbage', verify('garbage'), /not a compact JWT/],
        ['three dots of garbage', verify('a.b.c'), /not a compact JWT/],
      ];
      for (const [name, got, reason] of cases) {
        const r = await got;
        expect(r.ok, name).toBe(false);
        expect(r.reason, name).toMatch(reason);
        expect(r.agentName, name).toBeNull();
      }
      // Forged membership VC: right issuer DID, wrong key.
      const forger = { ...makeIssuer('x'), did: auth.issuerDid };
      const forged = await makeAgent(forger);
      expect((await verify(await presentationFor(forged))).reason).toMatch(/membership credential signature invalid/);
      // A valid VC for an unregistered holder (issued by us, agent never registered): signature ok, unknown agent.
      expectDetail(await api.post('/v1/agents/verify-presentation', {}));
      expectDetail(await api.post('/v1/agents/verify-presentation', { vp: 5 }));
    });

    it('a revoked Membership VC fails verification', async () => {
      const p = await provisioned('vp-rev');
      const vp = await presentationFor(p);
      expect((await api.post('/v1/agents/verify-presentation', { vp })).json.ok).toBe(true);
      expect(await api.post('/v1/revoke', { vcJti: p.membershipJti })).toMatchObject({ status: 200, json: { revoked: true, vcJti: p.membershipJti } });
      expect((await api.post('/v1/agents/verify-presentation', { vp })).json).toMatchObject({
        ok: false,
        reason: 'membership credential revoked',
        agentDid: p.did,
      });
    });
  });

  describe('delegations', () => {
    it('request: 201 pending, 404 unknown or unprovisioned agent, 422 bad input', async () => {
      await provisioned('dl-1');
      const r = await api.post('/v1/delegations/request', {
        actorName: 'dl-1',
        task: 'T-1',
        action: 'crm:read',
        resource: 'crm/acme/*',
        reason: 'quarterly report',
      });
      expect(r.status).toBe(201);
      expect(r.json).toMatchObject({
        status: 'pending',
        actorName: 'dl-1',
        task: 'T-1',
        action: 'crm:read',
        resource: 'crm/acme/*',
        reason: 'quarterly report',
        approver: null,
        approvedAt: null,
        deniedAt: null,
        denyReason: null,
        vcJti: null,
        notAfter: null,
        ttlSeconds: 3600,
      });
      expect(r.json.actorDid).toMatch(/^did:key:/);
      expect(typeof r.json.requestedAt).toBe('string');
      const unknown = await api.post('/v1/delegations/request', { actorName: 'ghost', task: 't', action: 'a', resource: 'r', reason: 'x' });
      expect(unknown.status).toBe(404);
      expectEnvelope(unknown);
      await api.post('/v1/agents', { name: 'dl-unprov', role: 'r', capabilities: [] });
      const unprov = await api.post('/v1/delegations/request', { actorName: 'dl-unprov', task: 't', action: 'a', resource: 'r', reason: 'x' });
      expect(unprov.status).toBe(404);
      expectEnvelope(unprov, 'agent_not_provisioned');
      const before = (await api.get('/v1/delegations')).json.length;
      for (const bad of [
        {},
        { actorName: 'dl-1', task: 't', action: 'a', resource: 'r' },
        { actorName: 'dl-1', task: 't', action: 'a', resource: 'r', reason: 'x', ttlSeconds: 0 },
        { actorName: 'dl-1', task: 't', action: 'a', resource: 'r', reason: 'x', ttlSeconds: 10 ** 9 },
        { actorName: 'dl-1', task: 't', action: 'a', resource: 'r', reason: 'x', ttlSeconds: 1.5 },
      ]) {
        expectDetail(await api.post('/v1/delegations/request', bad));
      }
      expect((await api.get('/v1/delegations')).json.length).toBe(before);
    });

    it('list newest first, get, approve, deny, vc and every 404/409', async () => {
      await provisioned('dl-2');
      const req = async (task: string) =>
        (await api.post('/v1/delegations/request', { actorName: 'dl-2', task, action: 'db:read', resource: 'db/orders', reason: 'r', ttlSeconds: 120 })).json;
      const a = await req('A');
      const d = await req('D');
      const list = (await api.get('/v1/delegations')).json.map((x: Json) => x.id);
      expect(list.indexOf(d.id)).toBeLessThan(list.indexOf(a.id));
      expect((await api.get(`/v1/delegations/${a.id}`)).json).toMatchObject({ id: a.id, status: 'pending' });
      const nf = await api.get('/v1/delegations/00000000-0000-0000-0000-000000000000');
      expect(nf.status).toBe(404);
      expectEnvelope(nf);
      const vcPending = await api.get(`/v1/delegations/${a.id}/vc`);
      expect(vcPending.status).toBe(409);
      expectEnvelope(vcPending, 'not_approved');
      expect((await api.get('/v1/delegations/nope/vc')).status).toBe(404);

      expectDetail(await api.post(`/v1/delegations/${a.id}/approve`, {}));
      const ok = await api.post(`/v1/delegations/${a.id}/approve`, { approver: 'alice' });
      expect(ok.status).toBe(200);
      expect(Object.keys(ok.json).sort()).toEqual(['id', 'notAfter', 'status', 'vc', 'vcJti']);
      expect(ok.json).toMatchObject({ id: a.id, status: 'approved', notAfter: Math.floor(clock / 1000) + 120 });
      const vcp = decodeJwt(ok.json.vc) as Json;
      expect(vcp).toMatchObject({ iss: auth.issuerDid, sub: a.actorDid, jti: ok.json.vcJti, exp: ok.json.notAfter });
      expect(vcp.vc.type).toContain('TaskDelegationCredential');
      expect(vcp.vc.credentialSubject).toMatchObject({
        id: a.actorDid,
        task: 'A',
        action: 'db:read',
        resource: 'db/orders',
        delegationId: a.id,
        approver: 'alice',
      });
      expect((await api.get(`/v1/delegations/${a.id}/vc`)).json).toEqual({ vc: ok.json.vc });
      expect((await api.get(`/v1/delegations/${a.id}`)).json).toMatchObject({
        status: 'approved',
        approver: 'alice',
        vcJti: ok.json.vcJti,
        notAfter: ok.json.notAfter,
      });
      const again = await api.post(`/v1/delegations/${a.id}/approve`, { approver: 'bob' });
      expect(again.status).toBe(409);
      expectEnvelope(again, 'not_pending');
      expect((await api.post(`/v1/delegations/${a.id}/deny`, { approver: 'bob', reason: 'no' })).status).toBe(409);
      expect((await api.post('/v1/delegations/nope/approve', { approver: 'x' })).status).toBe(404);
      expect((await api.post('/v1/delegations/nope/deny', { approver: 'x', reason: 'y' })).status).toBe(404);

      expectDetail(await api.post(`/v1/delegations/${d.id}/deny`, { approver: 'bob' }));
      expectDetail(await api.post(`/v1/delegations/${d.id}/deny`, { reason: 'x' }));
      const den = await api.post(`/v1/delegations/${d.id}/deny`, { approver: 'bob', reason: 'not needed' });
      expect(den.status).toBe(200);
      expect(den.json).toMatchObject({ id: d.id, status: 'denied', approver: 'bob', denyReason: 'not needed', vcJti: null });
      expect(typeof den.json.deniedAt).toBe('string');
      expect((await api.post(`/v1/delegations/${d.id}/approve`, { approver: 'a' })).status).toBe(409);
      expect((await api.get(`/v1/delegations/${d.id}/vc`)).status).toBe(409);
    });

    it('check: glob, task/action/actor match, expiry against the clock, revocation, 422', async () => {
      const ag = await provisioned('dl-3');
      const id = (
        await api.post('/v1/delegations/request', { actorName: 'dl-3', task: 'T', action: 'files:read', resource: 'files/acme/*', reason: 'r', ttlSeconds: 60 })
      ).json.id;
      const q = (o: Record<string, string>) =>
        api.get(`/v1/delegations/check?${new URLSearchParams({ actor: 'dl-3', task: 'T', action: 'files:read', resource: 'files/acme/q3.pdf', ...o })}`);
      expect((await q({})).json).toEqual({ ok: false, reason: 'no approved delegation', vcJti: null, notAfter: null, delegationId: null });
      const appr = (await api.post(`/v1/delegations/${id}/approve`, { approver: 'al' })).json;
      expect((await q({})).json).toEqual({ ok: true, reason: 'delegation approved', vcJti: appr.vcJti, notAfter: appr.notAfter, delegationId: id });
      expect((await q({ actor: ag.did })).json.ok).toBe(true);
      expect((await q({ resource: 'files/acme/deep/x' })).json.ok).toBe(true);
      expect((await q({ resource: 'files/other/x' })).json.reason).toBe('no approved delegation');
      expect((await q({ resource: 'files/acmeX' })).json.ok).toBe(false);
      expect((await q({ task: 'T2' })).json.ok).toBe(false);
      expect((await q({ action: 'files:write' })).json.ok).toBe(false);
      expect((await q({ actor: 'dl-1' })).json.ok).toBe(false);
      clock += 61_000;
      try {
        expect((await q({})).json).toMatchObject({ ok: false, reason: 'delegation expired', delegationId: id });
      } finally {
        clock -= 61_000;
      }
      await api.post('/v1/revoke', { vcJti: appr.vcJti });
      expect((await q({})).json).toMatchObject({ ok: false, reason: 'delegation revoked', vcJti: appr.vcJti });
      expectDetail(await api.get('/v1/delegations/check?actor=dl-3&task=T'));
      expectDetail(await api.get('/v1/delegations/check'));
    });

    it('concurrent approve and deny: exactly one wins', async () => {
      await provisioned('dl-4');
      for (let i = 0; i < 3; i++) {
        const id = (await api.post('/v1/delegations/request', { actorName: 'dl-4', task: `C${i}`, action: 'a', resource: 'r', reason: 'r' })).json.id;
        const results = await Promise.all([
          api.post(`/v1/delegations/${id}/approve`, { approver: 'a1' }),
          api.post(`/v1/delegations/${id}/approve`, { approver: 'a2' }),
          api.post(`/v1/delegations/${id}/deny`, { approver: 'd1', reason: 'no' }),
          api.post(`/v1/delegations/${id}/deny`, { approver: 'd2', reason: 'no' }),
        ]);
        const codes = results.map((r) => r.status).sort();
        expect(codes).toEqual([200, 409, 409, 409]);
        const final = (await api.get(`/v1/delegations/${id}`)).json;
        const winner = results.find((r) => r.status === 200)!;
        expect(final.status).toBe(winner.json.status);
        const creds = await rowsOf<{ n: number | string }>(store.db, sql`select count(*) as n from identity_credentials where delegation_id = ${id}`);
        expect(Number(creds[0]!.n)).toBe(final.status === 'approved' ? 1 : 0);
      }
    });
  });

  describe('revocation', () => {
    it('revoke is idempotent, 404s unknown jtis, 422s bad bodies; lists and status list with ETag', async () => {
      const p = await provisioned('rv-1');
      const capJti = (decodeJwt(p.capabilityVcs[0]) as Json).jti;
      const e1 = (await api.get('/status/default')).headers.get('etag')!;
      expect(await api.post('/v1/revoke', { vcJti: capJti })).toMatchObject({ status: 200, json: { revoked: true, vcJti: capJti } });
      expect(await api.post('/v1/revoke', { vcJti: capJti })).toMatchObject({ status: 200, json: { revoked: true, vcJti: capJti } });
      const unk = await api.post('/v1/revoke', { vcJti: 'urn:uuid:never-issued' });
      expect(unk.status).toBe(404);
      expectEnvelope(unk, 'unknown_credential');
      expectDetail(await api.post('/v1/revoke', {}));
      expectDetail(await api.post('/v1/revoke', { vcJti: '' }));
      const all = (await api.get('/v1/revocations')).json.revoked;
      expect(all.filter((j: string) => j === capJti)).toHaveLength(1);
      expect(all).not.toContain('urn:uuid:never-issued');
      const st = await api.get('/status/default');
      expect(st.json.revoked).toContain(capJti);
      const e2 = st.headers.get('etag')!;
      expect(e2).not.toBe(e1);
      expect((await api.get('/status/default', { 'if-none-match': e2 })).status).toBe(304);
      expect((await api.get('/status', { 'if-none-match': e2 })).status).toBe(304);
      expect((await api.get('/status/default', { 'if-none-match': e1 })).status).toBe(200);
      const re = (await api.get('/v1/revocations')).headers.get('etag')!;
      expect((await api.get('/v1/revocations', { 'if-none-match': re })).status).toBe(304);
      expect((await api.get('/status/other')).json).toEqual({ revoked: [] });
      expectDetail(await api.get('/status/bad%20list'));
    });
  });
});

describe.each(testBackends())('issuer key persistence on $name', (b) => {
  it('restart keeps the DID and key; sealed with IDP_KEY_ENCRYPTION_KEY; wrong or missing secret is not ready', async () => {
    const store = await b.open();
    try {
      const env = { IDP_ISSUER_HOST: 'localhost:8090' };
      const a1 = createIdentityAuthority({ store, env });
      await a1.whenReady();
      const api1 = client(a1);
      const pub1 = (await api1.get('/v1/issuer')).json.issuerPubMultibase;
      await api1.post('/v1/agents', { name: 'k1', role: 'r', capabilities: [] });
      const prov = (await api1.post('/v1/agents/k1/provision')).json;
      await a1.close();
      expect(a1.issuerDid).toBe('did:web:localhost%3A8090');
      const plain = (await rowsOf<{ enc: string; private_key: string }>(store.db, sql`select enc, private_key from identity_issuer_keys`))[0]!;
      expect(plain.enc).toBe('none');

      // Restart with a secret: same key, now sealed in place; old credentials still verify.
      const sealedEnv = { ...env, IDP_KEY_ENCRYPTION_KEY: 'correct horse battery staple' };
      const a2 = createIdentityAuthority({ store, env: sealedEnv });
      await a2.whenReady();
      const api2 = client(a2);
      expect((await api2.get('/v1/issuer')).json.issuerPubMultibase).toBe(pub1);
      expect((await api2.post('/v1/agents/verify-presentation', { vp: await presentationFor(prov) })).json).toMatchObject({ ok: true, agentName: 'k1' });
      await a2.close();
      const sealed = (await rowsOf<{ enc: string; private_key: string }>(store.db, sql`select enc, private_key from identity_issuer_keys`))[0]!;
      expect(sealed.enc).toBe('aes-256-gcm');
      expect(sealed.private_key).not.toBe(plain.private_key);
      expect(sealed.private_key).not.toContain(plain.private_key);

      for (const bad of [env, { ...env, IDP_KEY_ENCRYPTION_KEY: 'wrong' }]) {
        const a3 = createIdentityAuthority({ store, env: bad });
        const api3 = client(a3);
        // Give the load attempt time to fail; readiness must stay false.
        await new Promise((r) => setTimeout(r, 300));
        expect(a3.ready()).toBe(false);
        expect((await api3.get('/readyz')).status).toBe(503);
        const iss = await api3.get('/v1/issuer');
        expect(iss.status).toBe(503);
        expectEnvelope(iss, 'not_ready');
        expect((await api3.get('/healthz')).status).toBe(200);
        await a3.close();
      }
      const a4 = createIdentityAuthority({ store, env: sealedEnv });
      await a4.whenReady();
      expect((await client(a4).get('/v1/issuer')).json.issuerPubMultibase).toBe(pub1);
      await a4.close();
    } finally {
      await store.close();
    }
  });
});
