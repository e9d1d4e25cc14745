/**
 * Identity resolution over real HTTP (127.0.0.1) on PGlite and Postgres: every resolution path,
 * every conflict type, the precedence table in effect, sessions that never touch directory truth,
 * and stale tokens that never reactivate anyone.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import fc from 'fast-check';
import { rowsOf, type Store } from '../../../store/factory.js';
import { testBackends } from '../../../store/testing.js';
import { ENTRA, ENTRA_TID, entraSnapshot, OKTA, oktaSnapshot } from '../directory/fixtures.js';
import { PRECEDENCE } from './resolve.js';
import { serve, type Served } from './testkit.js';

const V2 = `https://login.microsoftonline.com/${ENTRA_TID}/v2.0`;
const OKTA_ISS = 'https://initech.okta.com';
/** The issuer map the tests run with (production default: empty). */
export const TEST_ISSUER_MAP = JSON.stringify({ [V2]: 'idp_a:contoso', [OKTA_ISS]: 'idp_b:initech' });
const A = (oid: string) => `idp_a:contoso:${oid}`;
const T0 = Date.parse('2026-03-01T09:00:00.000Z');

describe.each(testBackends())('identity resolution on $name', (b) => {
  let store: Store;
  let api: Served;
  let clock = T0;
  const resolve = (claims: Record<string, unknown>, o: Record<string, unknown> = {}) => api.post('/v1/identity/resolve', { claims, ...o });
  const rowOf = async (subject: string) =>
    (
      await rowsOf<{ j: Record<string, unknown> }>(
        store.db,
        sql`select to_jsonb(e) - 'session' as j from directory_employees e where employee_subject = ${subject}`,
      )
    )[0]?.j;
  const sessionOf = async (subject: string) =>
    (await rowsOf<{ s: Record<string, unknown> | null }>(store.db, sql`select session as s from directory_employees where employee_subject = ${subject}`))[0]
      ?.s;

  beforeAll(async () => {
    store = await b.open();
    api = await serve(store, () => clock, { IDP_ISSUER_MAP: TEST_ISSUER_MAP });
    expect((await api.post('/v1/directory/sync', { tenantId: 'contoso', ...entraSnapshot() })).status).toBe(200);
    expect((await api.post('/v1/directory/sync', { tenantId: 'initech', idp: 'idp_b', ...oktaSnapshot() })).status).toBe(200);
  });
  afterAll(async () => {
    await api?.close();
    await store?.close();
  });

  it('resolves an idp_a token by issuer map: directory wins every field, token kept as session claims', async () => {
    const before = await rowOf(A(ENTRA.alice));
    clock += 1000;
    const claims = {
      iss: V2,
      tid: ENTRA_TID,
      oid: ENTRA.alice,
      sub: 'pairwise-sub-not-used',
      email: 'alice@contoso.com',
      preferred_username: 'alice@contoso.com',
      groups: [ENTRA.gEng],
      roles: ['Global.Admin'],
      name: 'Token Name',
      department: 'Token Dept',
      manager: 'someone-else',
      status: 'active',
    };
    const r = await resolve(claims);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      resolved: true,
      reason: 'resolved',
      employee_subject: A(ENTRA.alice),
      idp: 'idp_a',
      tenant_id: 'contoso',
      effective: {
        employee_subject: A(ENTRA.alice),
        email: 'alice@contoso.com',
        display_name: 'Alice Adams',
        department: 'Engineering',
        manager_subject: A(ENTRA.engMgr),
        groups: [ENTRA.gEng],
        roles: [],
        status: 'active',
        active: true,
      },
      session: {
        last_seen_at: '2026-03-01T09:00:01.000Z',
        idp_issuer: V2,
        token_email: 'alice@contoso.com',
        token_groups: [ENTRA.gEng],
        token_roles: ['Global.Admin'],
        preferred_username: 'alice@contoso.com',
        conflicts: [],
      },
      session_recorded: true,
      conflicts: [],
      precedence: PRECEDENCE,
    });
    // Raw token roles are not auto-privileged; only the session column changed.
    expect(await rowOf(A(ENTRA.alice))).toEqual(before);
    expect(await sessionOf(A(ENTRA.alice))).toEqual(r.body.session);
  });

  it('matches an unmapped v1 issuer by the tid embedded in a mapped idp_a issuer', async () => {
    const r = await resolve({ iss: `https://sts.windows.net/${ENTRA_TID}/`, tid: ENTRA_TID, oid: ENTRA.bob });
    expect(r.body).toMatchObject({ resolved: true, employee_subject: A(ENTRA.bob), tenant_id: 'contoso' });
  });

  it('email_conflict and group_conflict: directory values kept, token values only in the session', async () => {
    const before = await rowOf(A(ENTRA.bob));
    clock += 1000;
    const r = await resolve({ iss: V2, oid: ENTRA.bob, email: 'bob@evil.example', groups: [ENTRA.gEng, ENTRA.gFin, 'not-a-group'] });
    expect(r.body.resolved).toBe(true);
    expect(r.body.conflicts.map((c: any) => c.type)).toEqual(['email_conflict', 'group_conflict']);
    expect(r.body.conflicts[1].detail).toContain(`${ENTRA.gFin}, not-a-group`);
    expect(r.body.effective).toMatchObject({ email: 'bob@contoso.com', groups: [ENTRA.gEng], active: true });
    expect(r.body.session).toMatchObject({
      token_email: 'bob@evil.example',
      token_groups: [ENTRA.gEng, ENTRA.gFin, 'not-a-group'].sort(),
      conflicts: r.body.conflicts,
    });
    expect(await rowOf(A(ENTRA.bob))).toEqual(before);
  });

  it('stale token over an inactive employee: active=false, stale_token_inactive, nothing written, never reactivated', async () => {
    const before = await rowOf(A(ENTRA.dave));
    const r = await resolve({ iss: V2, oid: ENTRA.dave, email: 'dave@contoso.com' });
    expect(r.body).toMatchObject({
      resolved: true,
      reason: 'employee_inactive',
      effective: { status: 'inactive', active: false },
      session_recorded: false,
      conflicts: [{ type: 'stale_token_inactive', detail: expect.any(String) }],
    });
    expect(await rowOf(A(ENTRA.dave))).toEqual(before);
    expect(await sessionOf(A(ENTRA.dave))).toBeNull();
    expect((await api.get(`/v1/directory/employees/${encodeURIComponent(A(ENTRA.dave))}`)).body.status).toBe('inactive');
  });

  it('a sync deactivating a signed-in employee keeps the session; the next token is stale', async () => {
    clock += 1000;
    const snap = entraSnapshot();
    snap.users = snap.users.map((u) => (u.externalId === ENTRA.carol ? { ...u, active: false } : u));
    expect((await resolve({ iss: V2, oid: ENTRA.carol })).body.session_recorded).toBe(true);
    const kept = await sessionOf(A(ENTRA.carol));
    expect((await api.post('/v1/directory/sync', { tenantId: 'contoso', ...snap })).body.counts.users_deactivated).toBe(1);
    expect(await sessionOf(A(ENTRA.carol))).toEqual(kept);
    const r = await resolve({ iss: V2, oid: ENTRA.carol });
    expect(r.body).toMatchObject({ effective: { active: false }, session_recorded: false });
    expect(await sessionOf(A(ENTRA.carol))).toEqual(kept);
    // Re-syncing the original snapshot is what reactivates (the directory), and the session survives it.
    expect((await api.post('/v1/directory/sync', { tenantId: 'contoso', ...entraSnapshot() })).body.counts.users_reactivated).toBe(1);
    expect(await sessionOf(A(ENTRA.carol))).toEqual(kept);
  });

  it('idp_b by sub; name-valued token groups match durable membership', async () => {
    const r = await resolve({ iss: OKTA_ISS, sub: OKTA.peggy.oktaId, email: 'peggy@initech.example', groups: ['TPS Reports'] });
    expect(r.body).toMatchObject({ resolved: true, idp: 'idp_b', tenant_id: 'initech', employee_subject: `idp_b:initech:${OKTA.peggy.oktaId}`, conflicts: [] });
    const g = await resolve({ iss: OKTA_ISS, sub: OKTA.peggy.oktaId, groups: ['TPS Reports', 'Admins'] });
    expect(g.body.conflicts).toEqual([{ type: 'group_conflict', detail: expect.stringContaining('Admins') }]);
    const hinted = await resolve({ iss: 'https://other.okta.example', sub: OKTA.milton.oktaId }, { idp: 'idp_b', tenant: 'initech' });
    expect(hinted.body).toMatchObject({ resolved: true, employee_subject: `idp_b:initech:${OKTA.milton.oktaId}` });
  });

  it.each([
    ['unknown issuer', { iss: 'https://unknown.example', oid: ENTRA.alice }, {}, 'issuer_unknown'],
    ['hint contradicting the map', { iss: V2, oid: ENTRA.alice }, { tenant: 'initech' }, 'issuer_hint_mismatch'],
    ['tid contradicting the issuer', { iss: V2, tid: '00000000-0000-4000-8000-000000000000', oid: ENTRA.alice }, {}, 'tid_mismatch'],
    ['no subject claim (email is never a subject)', { iss: V2, email: 'alice@contoso.com' }, {}, 'subject_claim_missing'],
    ['idp_a sub fallback maps to no employee', { iss: V2, sub: 'pairwise' }, {}, 'employee_not_found'],
    ['no directory employee (no auto-provisioning)', { iss: OKTA_ISS, sub: '00uNOBODY' }, {}, 'employee_not_found'],
    ['another tenant through hints', { oid: ENTRA.alice }, { idp: 'idp_a', tenant: 'initech' }, 'employee_not_found'],
  ])('unresolved: %s', async (_n, claims, hints, reason) => {
    const r = await resolve(claims, hints);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ resolved: false, reason, effective: null, session: null, session_recorded: false, precedence: PRECEDENCE });
    expect(r.body.conflicts).toEqual([{ type: 'unresolved', detail: expect.any(String) }]);
  });

  it('property: any claims object answers 200 and never changes a directory column other than session', async () => {
    const truth = async () =>
      (
        await rowsOf<{ d: string }>(
          store.db,
          sql`select md5(string_agg((to_jsonb(e) - 'session')::text, '|' order by employee_subject)) as d from directory_employees e`,
        )
      )[0]!.d;
    const before = await truth();
    const saved = clock;
    clock = T0 - 86_400_000; // sessions written here must not outrank the later tests' newest-first checks
    const claim = fc.oneof(
      fc.constantFrom(V2, OKTA_ISS, ENTRA_TID, ENTRA.alice, ENTRA.dave, OKTA.peggy.oktaId, ENTRA.gFin),
      fc.string(),
      fc.integer(),
      fc.array(fc.string(), { maxLength: 3 }),
      fc.constant(null),
    );
    const claims = fc.dictionary(fc.constantFrom('iss', 'tid', 'oid', 'sub', 'email', 'groups', 'roles', 'preferred_username', 'status', 'active'), claim);
    const hints = fc.record({ idp: fc.constantFrom('idp_a', 'idp_b'), tenant: fc.constantFrom('contoso', 'initech', 'fabrikam') }, { requiredKeys: [] });
    await fc.assert(
      fc.asyncProperty(claims, hints, async (c, h) => {
        const r = await resolve(c, h);
        expect(r.status).toBe(200);
        if (r.body.resolved) expect(r.body.effective.active).toBe(r.body.effective.status === 'active');
        else expect(r.body.conflicts[0].type).toBe('unresolved');
      }),
      { numRuns: 60 },
    );
    clock = saved;
    expect(await truth()).toBe(before);
    expect((await api.get(`/v1/directory/employees/${encodeURIComponent(A(ENTRA.dave))}`)).body.status).toBe('inactive');
  });

  it('validation: 422 for a missing claims object, a bad idp or tenant hint', async () => {
    expect((await api.post('/v1/identity/resolve', {})).status).toBe(422);
    expect((await api.post('/v1/identity/resolve', { claims: [] })).status).toBe(422);
    expect((await resolve({}, { idp: 'idp_c' })).status).toBe(422);
    expect((await resolve({}, { tenant: 'a:b' })).status).toBe(422);
  });

  it('sessions: newest first, per tenant, the documented item shape', async () => {
    const all = await api.get('/v1/identity/sessions');
    expect(all.status).toBe(200);
    const seen = all.body.map((s: any) => s.session.last_seen_at);
    expect([...seen].sort().reverse()).toEqual(seen);
    const contoso = (await api.get('/v1/identity/sessions?tenant=contoso')).body;
    expect(contoso[0]).toEqual({
      employee_subject: A(ENTRA.carol),
      display_name: 'Carol Chen',
      tenant_id: 'contoso',
      status: 'active',
      email: 'carol@contoso.com',
      department: 'Finance',
      session: expect.objectContaining({ idp_issuer: V2 }),
    });
    expect(contoso.every((s: any) => s.tenant_id === 'contoso')).toBe(true);
    expect(contoso.map((s: any) => s.employee_subject)).not.toContain(A(ENTRA.dave));
    expect((await api.get('/v1/identity/sessions?tenant=initech&limit=1')).body).toHaveLength(1);
    expect((await api.get('/v1/identity/sessions?tenant=bad:t')).status).toBe(422);
  });
});
