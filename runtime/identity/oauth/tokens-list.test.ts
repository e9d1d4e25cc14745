/**
 * `GET /v1/tokens` over HTTP: the tokens issued here as recorded (never their values), newest
 * first, with their agent, human, audience, scope, delegation and status (revoked by the token's
 * own revocation or its delegation's, else active); pages by cursor; one tenant; filters by
 * delegation and agent; bad input refused in the management API's shapes.
 */
import { describe, expect, it } from 'vitest';
import { testBackends } from '../../store/testing.js';
import { agent, delegation, exchangeDelegation, postForm, tool, useBed } from './oauth-testing.js';

describe.each(testBackends())('issued tokens list on $name', (b) => {
  const bed = useBed(b);

  it('lists issued and revoked tokens beside their delegations, paged, never their values', async () => {
    const me = await agent(bed, 'tl-a', ['crm']);
    tool(bed, 'crm', { requireScope: 'crm.read' });
    const d1 = await delegation(bed, 'tl-a', { task: 'T-1', action: 'crm:read', resource: 'crm/*', approver: 'ann@corp.test' });
    const d2 = await delegation(bed, 'tl-a', { task: 'T-2', action: 'crm:read', resource: 'crm/2', approver: 'bo@corp.test' });
    const exchange = async (vc: string) => {
      const r = await exchangeDelegation(bed, me, vc, 'crm');
      expect(r.status).toBe(200);
      return r.json.access_token as string;
    };
    const [t1, t2, t3] = [await exchange(d1.vc!), await exchange(d1.vc!), await exchange(d2.vc!)];
    expect((await postForm(bed, '/oauth/revoke', { token: t1 })).status).toBe(200);
    expect((await bed.api.post('/v1/revoke', { vcJti: d2.vcJti })).status).toBe(200);
    const jti = (t: string) => JSON.parse(Buffer.from(t.split('.')[1]!, 'base64url').toString()).jti as string;

    const first = await bed.api.get('/v1/tokens?limit=2');
    expect(first.status).toBe(200);
    expect(first.json.tokens).toHaveLength(2);
    expect(typeof first.json.next).toBe('string');
    const second = await bed.api.get(`/v1/tokens?limit=2&after=${first.json.next}`);
    expect(second.status).toBe(200);
    expect(second.json.next).toBeNull();
    const all = [...first.json.tokens, ...second.json.tokens] as Record<string, unknown>[];
    for (const t of [t1, t2, t3]) expect(JSON.stringify([first.json, second.json])).not.toContain(t.split('.')[2]);
    const byJti = new Map(all.map((t) => [t.jti, t]));
    expect(byJti.size).toBe(3);
    const common = { tenant: 'default', grant: 'token-exchange', agent: 'tl-a', agentDid: me.did, audience: 'crm', scope: 'crm:read crm.read' };
    expect(byJti.get(jti(t1))).toMatchObject({ ...common, human: 'ann@corp.test', delegationId: d1.id, status: 'revoked', revokedBy: 'token' });
    expect(byJti.get(jti(t2))).toMatchObject({ ...common, human: 'ann@corp.test', delegationId: d1.id, status: 'active', revokedBy: null, revokedAt: null });
    expect(byJti.get(jti(t3))).toMatchObject({ ...common, human: 'bo@corp.test', delegationId: d2.id, status: 'revoked', revokedBy: 'delegation' });
    for (const t of all) {
      expect(Date.parse(t.expiresAt as string) - Date.parse(t.issuedAt as string)).toBe(300_000);
      expect(Object.keys(t).sort()).toEqual(
        [
          'agent',
          'agentDid',
          'audience',
          'delegationId',
          'expiresAt',
          'grant',
          'human',
          'issuedAt',
          'jti',
          'revokedAt',
          'revokedBy',
          'scope',
          'status',
          'tenant',
        ].sort(),
      );
    }
    // Newest first: issued_at never increases down the list.
    const times = all.map((t) => Date.parse(t.issuedAt as string));
    expect(times).toEqual([...times].sort((x, y) => y - x));

    const ofD1 = await bed.api.get(`/v1/tokens?delegation=${d1.id}`);
    expect((ofD1.json.tokens as { jti: string }[]).map((t) => t.jti).sort()).toEqual([jti(t1), jti(t2)].sort());
    expect((await bed.api.get('/v1/tokens?agent=nobody')).json).toEqual({ tokens: [], next: null });
    expect((await bed.api.get('/v1/tokens?tenant=acme')).json).toEqual({ tokens: [], next: null });

    // Refusals: a cursor this route did not answer, a limit out of range, a malformed tenant.
    const bad = await bed.api.get('/v1/tokens?after=not-a-cursor');
    expect(bad.status).toBe(400);
    expect(bad.json).toEqual({ error: { code: 'bad_cursor', message: 'after is not a cursor this route answered' } });
    expect((await bed.api.get('/v1/tokens?limit=0')).status).toBe(422);
    expect((await bed.api.get('/v1/tokens?limit=501')).status).toBe(422);
    expect((await bed.api.get('/v1/tokens?tenant=a%3Ab')).status).toBe(422);
  });
});
