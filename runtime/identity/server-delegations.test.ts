import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { decodeJwt } from 'jose';
import { rowsOf } from '../store/factory.js';
import { testBackends } from '../store/testing.js';
import { expectDetail, expectEnvelope, provisioner, type Json, useAuthority } from './server-testing.js';

describe.each(testBackends())('identity authority on $name', (b) => {
  const t = useAuthority(b);

  const provisioned = provisioner(() => t.api);

  describe('delegations', () => {
    it('request: 201 pending, 404 unknown or unprovisioned agent, 422 bad input', async () => {
      await provisioned('dl-1');
      const r = await t.api.post('/v1/delegations/request', {
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
      const unknown = await t.api.post('/v1/delegations/request', { actorName: 'ghost', task: 't', action: 'a', resource: 'r', reason: 'x' });
      expect(unknown.status).toBe(404);
      expectEnvelope(unknown);
      await t.api.post('/v1/agents', { name: 'dl-unprov', role: 'r', capabilities: [] });
      const unprov = await t.api.post('/v1/delegations/request', { actorName: 'dl-unprov', task: 't', action: 'a', resource: 'r', reason: 'x' });
      expect(unprov.status).toBe(404);
      expectEnvelope(unprov, 'agent_not_provisioned');
      const before = (await t.api.get('/v1/delegations')).json.length;
      for (const bad of [
        {},
        { actorName: 'dl-1', task: 't', action: 'a', resource: 'r' },
        { actorName: 'dl-1', task: 't', action: 'a', resource: 'r', reason: 'x', ttlSeconds: 0 },
        { actorName: 'dl-1', task: 't', action: 'a', resource: 'r', reason: 'x', ttlSeconds: 10 ** 9 },
        { actorName: 'dl-1', task: 't', action: 'a', resource: 'r', reason: 'x', ttlSeconds: 1.5 },
      ]) {
        expectDetail(await t.api.post('/v1/delegations/request', bad));
      }
      expect((await t.api.get('/v1/delegations')).json.length).toBe(before);
    });

    it('list newest first, get, approve, deny, vc and every 404/409', async () => {
      await provisioned('dl-2');
      const req = async (task: string) =>
        (await t.api.post('/v1/delegations/request', { actorName: 'dl-2', task, action: 'db:read', resource: 'db/orders', reason: 'r', ttlSeconds: 120 })).json;
      const a = await req('A');
      const d = await req('D');
      const list = (await t.api.get('/v1/delegations')).json.map((x: Json) => x.id);
      expect(list.indexOf(d.id)).toBeLessThan(list.indexOf(a.id));
      expect((await t.api.get(`/v1/delegations/${a.id}`)).json).toMatchObject({ id: a.id, status: 'pending' });
      const nf = await t.api.get('/v1/delegations/00000000-0000-0000-0000-000000000000');
      expect(nf.status).toBe(404);
      expectEnvelope(nf);
      const vcPending = await t.api.get(`/v1/delegations/${a.id}/vc`);
      expect(vcPending.status).toBe(409);
      expectEnvelope(vcPending, 'not_approved');
      expect((await t.api.get('/v1/delegations/nope/vc')).status).toBe(404);

      expectDetail(await t.api.post(`/v1/delegations/${a.id}/approve`, {}));
      const ok = await t.api.post(`/v1/delegations/${a.id}/approve`, { approver: 'alice' });
      expect(ok.status).toBe(200);
      expect(Object.keys(ok.json).sort()).toEqual(['id', 'notAfter', 'status', 'vc', 'vcJti']);
      expect(ok.json).toMatchObject({ id: a.id, status: 'approved', notAfter: Math.floor(t.clock / 1000) + 120 });
      const vcp = decodeJwt(ok.json.vc) as Json;
      expect(vcp).toMatchObject({ iss: t.auth.issuerDid, sub: a.actorDid, jti: ok.json.vcJti, exp: ok.json.notAfter });
      expect(vcp.vc.type).toContain('TaskDelegationCredential');
      expect(vcp.vc.credentialSubject).toMatchObject({
        id: a.actorDid,
        task: 'A',
        action: 'db:read',
        resource: 'db/orders',
        delegationId: a.id,
        approver: 'alice',
      });
      expect((await t.api.get(`/v1/delegations/${a.id}/vc`)).json).toEqual({ vc: ok.json.vc });
      expect((await t.api.get(`/v1/delegations/${a.id}`)).json).toMatchObject({
        status: 'approved',
        approver: 'alice',
        vcJti: ok.json.vcJti,
        notAfter: ok.json.notAfter,
      });
      const again = await t.api.post(`/v1/delegations/${a.id}/approve`, { approver: 'bob' });
      expect(again.status).toBe(409);
      expectEnvelope(again, 'not_pending');
      expect((await t.api.post(`/v1/delegations/${a.id}/deny`, { approver: 'bob', reason: 'no' })).status).toBe(409);
      expect((await t.api.post('/v1/delegations/nope/approve', { approver: 'x' })).status).toBe(404);
      expect((await t.api.post('/v1/delegations/nope/deny', { approver: 'x', reason: 'y' })).status).toBe(404);

      expectDetail(await t.api.post(`/v1/delegations/${d.id}/deny`, { approver: 'bob' }));
      expectDetail(await t.api.post(`/v1/delegations/${d.id}/deny`, { reason: 'x' }));
      const den = await t.api.post(`/v1/delegations/${d.id}/deny`, { approver: 'bob', reason: 'not needed' });
      expect(den.status).toBe(200);
      expect(den.json).toMatchObject({ id: d.id, status: 'denied', approver: 'bob', denyReason: 'not needed', vcJti: null });
      expect(typeof den.json.deniedAt).toBe('string');
      expect((await t.api.post(`/v1/delegations/${d.id}/approve`, { approver: 'a' })).status).toBe(409);
      expect((await t.api.get(`/v1/delegations/${d.id}/vc`)).status).toBe(409);
    });

    it('check: glob, task/action/actor match, expiry against the clock, revocation, 422', async () => {
      const ag = await provisioned('dl-3');
      const id = (
        await t.api.post('/v1/delegations/request', {
          actorName: 'dl-3',
          task: 'T',
          action: 'files:read',
          resource: 'files/acme/*',
          reason: 'r',
          ttlSeconds: 60,
        })
      ).json.id;
      const q = (o: Record<string, string>) =>
        t.api.get(`/v1/delegations/check?${new URLSearchParams({ actor: 'dl-3', task: 'T', action: 'files:read', resource: 'files/acme/q3.pdf', ...o })}`);
      expect((await q({})).json).toEqual({ ok: false, reason: 'no approved delegation', vcJti: null, notAfter: null, delegationId: null });
      const appr = (await t.api.post(`/v1/delegations/${id}/approve`, { approver: 'al' })).json;
      expect((await q({})).json).toEqual({ ok: true, reason: 'delegation approved', vcJti: appr.vcJti, notAfter: appr.notAfter, delegationId: id });
      expect((await q({ actor: ag.did })).json.ok).toBe(true);
      expect((await q({ resource: 'files/acme/deep/x' })).json.ok).toBe(true);
      expect((await q({ resource: 'files/other/x' })).json.reason).toBe('no approved delegation');
      expect((await q({ resource: 'files/acmeX' })).json.ok).toBe(false);
      // A path that resolves outside the prefix never matches it, spelled plainly or encoded.
      for (const resource of [
        'files/acme/../other',
        'files/acme/%2e%2e/other',
        'files/acme/.%2E/x',
        'files/acme/..%2fother',
        'files/acme/x%2F..',
        'files/acme/..\\x',
        'files/acme/./q3.pdf',
      ]) {
        expect((await q({ resource })).json.reason, resource).toBe('no approved delegation');
      }
      expect((await q({ resource: 'files/acme/q3..pdf?next=../x' })).json.ok, 'dots inside a name, a query').toBe(true);
      expect((await q({ task: 'T2' })).json.ok).toBe(false);
      expect((await q({ action: 'files:write' })).json.ok).toBe(false);
      expect((await q({ actor: 'dl-1' })).json.ok).toBe(false);
      t.clock += 61_000;
      try {
        expect((await q({})).json).toMatchObject({ ok: false, reason: 'delegation expired', delegationId: id });
      } finally {
        t.clock -= 61_000;
      }
      await t.api.post('/v1/revoke', { vcJti: appr.vcJti });
      expect((await q({})).json).toMatchObject({ ok: false, reason: 'delegation revoked', vcJti: appr.vcJti });
      expectDetail(await t.api.get('/v1/delegations/check?actor=dl-3&task=T'));
      expectDetail(await t.api.get('/v1/delegations/check'));
    });

    it('concurrent approve and deny: exactly one wins', async () => {
      await provisioned('dl-4');
      for (let i = 0; i < 3; i++) {
        const id = (await t.api.post('/v1/delegations/request', { actorName: 'dl-4', task: `C${i}`, action: 'a', resource: 'r', reason: 'r' })).json.id;
        const results = await Promise.all([
          t.api.post(`/v1/delegations/${id}/approve`, { approver: 'a1' }),
          t.api.post(`/v1/delegations/${id}/approve`, { approver: 'a2' }),
          t.api.post(`/v1/delegations/${id}/deny`, { approver: 'd1', reason: 'no' }),
          t.api.post(`/v1/delegations/${id}/deny`, { approver: 'd2', reason: 'no' }),
        ]);
        const codes = results.map((r) => r.status).sort();
        expect(codes).toEqual([200, 409, 409, 409]);
        const final = (await t.api.get(`/v1/delegations/${id}`)).json;
        const winner = results.find((r) => r.status === 200)!;
        expect(final.status).toBe(winner.json.status);
        const creds = await rowsOf<{ n: number | string }>(t.store.db, sql`select count(*) as n from identity_credentials where delegation_id = ${id}`);
        expect(Number(creds[0]!.n)).toBe(final.status === 'approved' ? 1 : 0);
      }
    });
  });
});
