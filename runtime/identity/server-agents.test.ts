import { describe, expect, it } from 'vitest';
import { eq, sql } from 'drizzle-orm';
import { CompactSign, decodeJwt, decodeProtectedHeader } from 'jose';
import { VP_AUDIENCE } from '../lib/brand.js';
import { rowsOf } from '../store/factory.js';
import { testBackends } from '../store/testing.js';
import { loadIdentity, presentationFor, W3C_VC_CONTEXT } from './client.js';
import { publicKeyFromDidKey } from './did.js';
import { expectDetail, expectEnvelope, provisioner, type Json, useAuthority } from './server-testing.js';
import { makeAgent, makeIssuer } from './testkit.js';
import { seedAgent } from './enterprise/governance/testkit.js';
import { governedAgents } from '../store/schema/governance.js';

const B64U = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/** A VP of `identity` with `claims` set over its payload, signed by its own key. */
function resigned(identity: Json, claims: Record<string, unknown>, now: number): Promise<string> {
  const id = loadIdentity(identity);
  const payload = {
    iss: id.did,
    sub: id.did,
    aud: VP_AUDIENCE,
    nonce: 'n',
    exp: Math.floor(now / 1000) + 300,
    vp: { '@context': [W3C_VC_CONTEXT], type: ['VerifiablePresentation'], holder: id.did, verifiableCredential: [id.membershipVc] },
    ...claims,
  };
  return new CompactSign(new TextEncoder().encode(JSON.stringify(payload))).setProtectedHeader({ alg: 'EdDSA', typ: 'JWT', kid: id.kid }).sign(id.key);
}

describe.each(testBackends())('identity authority on $name', (b) => {
  const t = useAuthority(b);

  const provisioned = provisioner(() => t.api);

  describe('agents', () => {
    it('registers idempotently, lists and gets without keys, 404s unknown', async () => {
      const body = { name: 'ag-1', role: 'analyst', capabilities: [{ action: 'crm:read', resource: 'crm/*', constraints: { max: 3 } }] };
      expect(await t.api.post('/v1/agents', body)).toMatchObject({ status: 201, json: { name: 'ag-1', status: 'registered' } });
      expect(await t.api.post('/v1/agents', body)).toMatchObject({ status: 201, json: { name: 'ag-1', status: 'registered' } });
      const one = await t.api.get('/v1/agents/ag-1');
      expect(one.json).toEqual({ name: 'ag-1', role: 'analyst', did: null, capabilities: body.capabilities, provisioned: false });
      const list = await t.api.get('/v1/agents');
      expect(list.json.filter((a: Json) => a.name === 'ag-1')).toHaveLength(1);
      const nf = await t.api.get('/v1/agents/nobody');
      expect(nf.status).toBe(404);
      expectEnvelope(nf, 'not_found');
      const pnf = await t.api.post('/v1/agents/nobody/provision');
      expect(pnf.status).toBe(404);
      expectEnvelope(pnf);
    });

    it('a web page cannot make a browser re-provision an agent or start a cascade: cross-origin writes are refused', async () => {
      await provisioned('csrf-1');
      const did = (await t.api.get('/v1/agents/csrf-1')).json.did;
      const send = async (path: string, headers: Record<string, string>, body?: string) => {
        const r = await t.auth.app.request(path, { method: 'POST', headers, body });
        return { status: r.status, json: (await r.json()) as Json };
      };
      for (const headers of <Record<string, string>[]>[
        { 'sec-fetch-site': 'cross-site' },
        { 'sec-fetch-site': 'same-site' },
        { origin: 'http://evil.example' },
      ]) {
        for (const path of ['/v1/agents/csrf-1/provision', '/v1/revocation/cascade']) {
          const r = await send(path, headers);
          expect(r.status, `${path} ${JSON.stringify(headers)}`).toBe(403);
          expectEnvelope(r, 'cross_origin');
        }
      }
      // A body a cross-site form or text/plain post carries (in process: its length said as a socket would).
      const form = await send('/v1/agents/csrf-1/provision', { 'content-type': 'text/plain', 'content-length': '2' }, '{}');
      expect(form.status).toBe(415);
      expectEnvelope(form, 'unsupported_media_type');
      const utf16 = await send('/v1/agents/csrf-1/provision', { 'content-type': 'application/json; charset=utf-16', 'content-length': '2' }, '{}');
      expect(utf16.status).toBe(415);
      expectEnvelope(utf16, 'unsupported_media_type');
      expect((await t.api.get('/v1/agents/csrf-1')).json.did).toBe(did);
      // What is no browser (curl -X POST, an SDK) sends neither header: it works as before.
      expect((await send('/v1/agents/csrf-1/provision', {})).status).toBe(200);
      expect((await t.api.get('/v1/agents/csrf-1')).json.did).not.toBe(did);
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
        expectDetail(await t.api.post('/v1/agents', bad));
      }
      const names = (await t.api.get('/v1/agents')).json.map((a: Json) => a.name);
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
      expect(p.issuerDid).toBe(t.auth.issuerDid);
      expect(p.capabilityVcs).toHaveLength(2);
      const h = decodeProtectedHeader(p.membershipVc);
      expect(h).toMatchObject({ alg: 'EdDSA', kid: `${t.auth.issuerDid}#key-1` });
      const m = decodeJwt(p.membershipVc) as Json;
      expect(m).toMatchObject({ iss: t.auth.issuerDid, sub: p.did, jti: p.membershipJti });
      expect(m.exp).toBeGreaterThan(m.nbf);
      expect(m.vc.type).toEqual(['VerifiableCredential', 'AgentMembershipCredential']);
      expect(m.vc.credentialSubject.id).toBe(p.did);
      const c = decodeJwt(p.capabilityVcs[1]) as Json;
      expect(c.vc.credentialSubject).toMatchObject({ id: p.did, action: 'a:2', resource: 'r/*' });
      const rec = (await t.api.get('/v1/agents/ag-2')).json;
      expect(rec).toMatchObject({ did: p.did, provisioned: true });
      expect(JSON.stringify(rec)).not.toContain(p.privateKeyB64);
      const dump =
        JSON.stringify(await rowsOf(t.store.db, sql`select * from identity_agents`)) +
        JSON.stringify(await rowsOf(t.store.db, sql`select * from identity_credentials`));
      expect(dump).not.toContain(p.privateKeyB64);
      expect(dump).not.toContain(Buffer.from(p.privateKeyB64, 'base64').toString('base64url'));
    });

    it('re-provisioning rotates the key and revokes the previous credentials', async () => {
      const first = await provisioned('ag-3');
      const vpOld = await presentationFor(first, { now: t.clock });
      expect((await t.api.post('/v1/agents/verify-presentation', { vp: vpOld })).json.ok).toBe(true);
      const second = (await t.api.post('/v1/agents/ag-3/provision')).json;
      expect(second.did).not.toBe(first.did);
      const old = (await t.api.post('/v1/agents/verify-presentation', { vp: vpOld })).json;
      expect(old).toMatchObject({ ok: false, reason: 'membership credential revoked' });
      const revoked = (await t.api.get('/v1/revocations')).json.revoked;
      expect(revoked).toContain(first.membershipJti);
      expect((await t.api.post('/v1/agents/verify-presentation', { vp: await presentationFor(second, { now: t.clock }) })).json).toMatchObject({
        ok: true,
        agentName: 'ag-3',
        agentDid: second.did,
      });
    });
  });

  describe('governance standing and concurrency', () => {
    it('a suspended, quarantined or retired governed agent gets no new identity and no task delegation (409)', async () => {
      const first = await provisioned('gov-susp');
      await seedAgent(t.store.db, 'example', { agentName: 'gov-susp', ownerRef: 'idp_a:example:o', status: 'active' });
      const req = { actorName: 'gov-susp', task: 't', action: 'read', resource: 'r', reason: 'why' };
      const pending = await t.api.post('/v1/delegations/request', req);
      expect(pending.status).toBe(201);
      for (const status of ['suspended', 'quarantined', 'retired'] as const) {
        await t.store.db.update(governedAgents).set({ status }).where(eq(governedAgents.agentName, 'gov-susp'));
        const again = await t.api.post('/v1/agents/gov-susp/provision');
        expect(again.status, status).toBe(409);
        expectEnvelope(again, 'agent_not_in_standing');
        expect((await t.api.post('/v1/delegations/request', req)).status, status).toBe(409);
        expect((await t.api.post(`/v1/delegations/${pending.json.id}/approve`, { approver: 'alice' })).status, status).toBe(409);
      }
      // The identity it had is untouched, and the request is still pending.
      expect((await t.api.get('/v1/agents/gov-susp')).json.did).toBe(first.did);
      expect((await t.api.get(`/v1/delegations/${pending.json.id}`)).json.status).toBe('pending');
    });

    it('concurrent re-provisions each revoke the identity they replaced, and name it', async () => {
      const first = await provisioned('race-1');
      const answers = (await Promise.all([0, 1, 2, 3].map(() => t.api.post('/v1/agents/race-1/provision')))).map((r) => r.json);
      const replaced = answers.map((a: Json) => a.revokedMembershipJti);
      // Each call replaced exactly one identity: the first one, or one of the others.
      expect(new Set(replaced).size).toBe(4);
      expect(replaced).toContain(first.membershipJti);
      const revoked = (await t.api.get('/v1/revocations')).json.revoked;
      for (const j of replaced) expect(revoked).toContain(j);
      const current = (await t.api.get('/v1/agents/race-1')).json.did;
      expect(answers.filter((a: Json) => a.did === current)).toHaveLength(1);
    });
  });

  describe('verify-presentation', () => {
    it('accepts a good VP and reports name, DID, membership jti and expiry', async () => {
      const p = await provisioned('vp-ok');
      const vp = await presentationFor(p, { ttlSeconds: 60, now: t.clock });
      const r = await t.api.post('/v1/agents/verify-presentation', { vp });
      expect(r.status).toBe(200);
      expect(r.json).toMatchObject({ ok: true, agentName: 'vp-ok', agentDid: p.did, reason: 'verified', membershipJti: p.membershipJti });
      expect(r.json.exp).toBe(Math.floor(t.clock / 1000) + 60);
      const custom = await presentationFor(p, { now: t.clock, audience: 'other-aud' });
      expect((await t.api.post('/v1/agents/verify-presentation', { vp: custom, audience: 'other-aud' })).json.ok).toBe(true);
      const withNonce = await presentationFor(p, { now: t.clock, nonce: 'n-42' });
      expect((await t.api.post('/v1/agents/verify-presentation', { vp: withNonce, nonce: 'n-42' })).json.ok).toBe(true);
    });

    it('rejects every bad presentation with a specific reason', async () => {
      const p = await provisioned('vp-bad');
      const other = await provisioned('vp-other');
      const foreign = makeIssuer('evil.example');
      const foreignAgent = await makeAgent(foreign);
      const verify = async (vp: string, extra: Record<string, string> = {}) => (await t.api.post('/v1/agents/verify-presentation', { vp, ...extra })).json;
      const good = await presentationFor(p, { now: t.clock });
      const [h, pl, s] = good.split('.') as [string, string, string];
      const tamperedPayload = { ...decodeJwt(good), aud: VP_AUDIENCE, nonce: 'changed' };
      const cases: [string, Promise<Json>, RegExp][] = [
        ['wrong audience', verify(await presentationFor(p, { now: t.clock, audience: 'elsewhere' })), /audience/],
        ['explicit audience mismatch', verify(good, { audience: 'elsewhere' }), /audience/],
        ['wrong nonce', verify(await presentationFor(p, { now: t.clock, nonce: 'a' }), { nonce: 'b' }), /nonce mismatch/],
        ['expired', verify(await presentationFor(p, { ttlSeconds: 10, now: t.clock - 3600_000 })), /presentation expired/],
        ['tampered payload', verify(`${h}.${Buffer.from(JSON.stringify(tamperedPayload)).toString('base64url')}.${s}`), /signature invalid/],
        ['tampered signature', verify(`${h}.${pl}.${s.slice(0, -4)}AAAA`), /signature invalid/],
        ['vc from another issuer', verify(await presentationFor(foreignAgent, { now: t.clock })), /not issued by this issuer/],
        [
          'vc for another holder',
          verify(await presentationFor({ ...other, membershipVc: p.membershipVc }, { now: t.clock })),
          /not issued to the presentation holder/,
        ],
        ['garbage', verify('garbage'), /not a compact JWT/],
        ['three dots of garbage', verify('a.b.c'), /not a compact JWT/],
        [
          'valid for longer than a day',
          resigned(p, { exp: Math.floor(t.clock / 1000) + 30 * 3600 }, t.clock).then((vp) => verify(vp)),
          /lifetime exceeds 24 h/,
        ],
        // The same signature bytes with the unused low bits of the last character set.
        ['a signature spelled another way', verify(`${h}.${pl}.${s.slice(0, -1)}${B64U[B64U.indexOf(s.at(-1)!) | 1]}`), /not a compact JWT/],
        ...(['nbf', 'iat'] as const).flatMap((k) =>
          ['9999999999', true, null].map((v): [string, Promise<Json>, RegExp] => [
            `${k} ${JSON.stringify(v)}`,
            resigned(p, { [k]: v }, t.clock).then((vp) => verify(vp)),
            /NumericDate/,
          ]),
        ),
      ];
      // The re-signed VP stands on its own: only the claim under test is wrong in each case.
      expect((await verify(await resigned(p, { nbf: Math.floor(t.clock / 1000) - 5 }, t.clock))).ok).toBe(true);
      for (const [name, got, reason] of cases) {
        const r = await got;
        expect(r.ok, `${name}: ${JSON.stringify(r)}`).toBe(false);
        expect(r.reason, name).toMatch(reason);
        expect(r.agentName, name).toBeNull();
      }
      // Forged membership VC: right issuer DID, wrong key.
      const forger = { ...makeIssuer('x'), did: t.auth.issuerDid };
      const forged = await makeAgent(forger);
      expect((await verify(await presentationFor(forged, { now: t.clock }))).reason).toMatch(/membership credential signature invalid/);
      // A valid VC for an unregistered holder (issued by us, agent never registered): signature ok, unknown agent.
      expectDetail(await t.api.post('/v1/agents/verify-presentation', {}));
      expectDetail(await t.api.post('/v1/agents/verify-presentation', { vp: 5 }));
    });

    it('a revoked Membership VC fails verification', async () => {
      const p = await provisioned('vp-rev');
      const vp = await presentationFor(p, { now: t.clock });
      expect((await t.api.post('/v1/agents/verify-presentation', { vp })).json.ok).toBe(true);
      expect(await t.api.post('/v1/revoke', { vcJti: p.membershipJti })).toMatchObject({ status: 200, json: { revoked: true, vcJti: p.membershipJti } });
      expect((await t.api.post('/v1/agents/verify-presentation', { vp })).json).toMatchObject({
        ok: false,
        reason: 'membership credential revoked',
        agentDid: p.did,
      });
    });
  });

  describe('revocation', () => {
    it('revoke is idempotent, 404s unknown jtis, 422s bad bodies; lists and status list with ETag', async () => {
      const p = await provisioned('rv-1');
      const capJti = (decodeJwt(p.capabilityVcs[0]) as Json).jti;
      const e1 = (await t.api.get('/status/default')).headers.get('etag')!;
      expect(await t.api.post('/v1/revoke', { vcJti: capJti })).toMatchObject({ status: 200, json: { revoked: true, vcJti: capJti } });
      expect(await t.api.post('/v1/revoke', { vcJti: capJti })).toMatchObject({ status: 200, json: { revoked: true, vcJti: capJti } });
      const unk = await t.api.post('/v1/revoke', { vcJti: 'urn:uuid:never-issued' });
      expect(unk.status).toBe(404);
      expectEnvelope(unk, 'unknown_credential');
      expectDetail(await t.api.post('/v1/revoke', {}));
      expectDetail(await t.api.post('/v1/revoke', { vcJti: '' }));
      const all = (await t.api.get('/v1/revocations')).json.revoked;
      expect(all.filter((j: string) => j === capJti)).toHaveLength(1);
      expect(all).not.toContain('urn:uuid:never-issued');
      const st = await t.api.get('/status/default');
      expect(st.json.revoked).toContain(capJti);
      const e2 = st.headers.get('etag')!;
      expect(e2).not.toBe(e1);
      expect((await t.api.get('/status/default', { 'if-none-match': e2 })).status).toBe(304);
      expect((await t.api.get('/status', { 'if-none-match': e2 })).status).toBe(304);
      expect((await t.api.get('/status/default', { 'if-none-match': e1 })).status).toBe(200);
      const re = (await t.api.get('/v1/revocations')).headers.get('etag')!;
      expect((await t.api.get('/v1/revocations', { 'if-none-match': re })).status).toBe(304);
      expect((await t.api.get('/status/other')).json).toEqual({ revoked: [] });
      expectDetail(await t.api.get('/status/bad%20list'));
    });
  });
});
