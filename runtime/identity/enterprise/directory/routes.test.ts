import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { createApi } from '../../../lib/api.js';
import { rowsOf, type Store } from '../../../store/factory.js';
import { testBackends } from '../../../store/testing.js';
import { enterpriseRoutes } from '../index.js';
import { ENTRA, entraSnapshot, entraUser, OKTA, oktaSnapshot } from './fixtures.js';
import { directoryRoutes, SYNC_BODY_LIMIT } from './routes.js';
import type { SyncStage } from './sync.js';

const subj = (ext: string, tenant = 'contoso', idp = 'idp_a') => `${idp}:${tenant}:${ext}`;
const enc = encodeURIComponent;

describe.each(testBackends())('directory routes on $name', (b) => {
  let store: Store;
  let clock = Date.parse('2026-03-01T09:00:00.000Z');
  let failAt: SyncStage | undefined;
  const app = createApi({ bodyLimit: SYNC_BODY_LIMIT });
  const crashApp = createApi({ bodyLimit: SYNC_BODY_LIMIT });

  const post = (a: typeof app, path: string, body: unknown) =>
    a.request(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  const sync = (body: unknown, a = app) => post(a, '/v1/directory/sync', body);
  const get = async (path: string) => {
    const r = await app.request(path);
    return { status: r.status, body: (await r.json()) as any };
  };
  /** Follows `Link: rel="next"` from `first`; the subjects of every page, in order. */
  const walk = async (first: string) => {
    const seen: string[] = [];
    let next: string | undefined = first;
    while (next) {
      const r = await app.request(next);
      expect(r.status).toBe(200);
      seen.push(...((await r.json()) as any[]).map((e) => e.employee_subject));
      next = /^<([^>]+)>; rel="next"$/.exec(r.headers.get('link') ?? '')?.[1];
    }
    return seen;
  };
  const xmins = async (tenant: string) =>
    rowsOf<{ k: string; x: string }>(
      store.db,
      sql`select employee_subject as k, xmin::text as x from directory_employees where tenant_id = ${tenant}
          union all select group_key, xmin::text from directory_groups where tenant_id = ${tenant} order by 1`,
    );

  beforeAll(async () => {
    store = await b.open();
    app.route('/', enterpriseRoutes({ store, now: () => clock }));
    crashApp.route(
      '/',
      directoryRoutes({
        db: store.db,
        now: () => clock,
        failpoint: (s) => {
          if (s === failAt) throw new Error(`injected failure at ${s}`);
        },
      }),
    );
  });
  afterAll(async () => {
    await store?.close();
  });

  it('syncs an Entra-style snapshot and serves the records in the API shape', async () => {
    const snap = entraSnapshot();
    const r = await sync({ tenantId: 'contoso', ...snap });
    expect(r.status).toBe(200);
    const run = (await r.json()) as any;
    expect(run).toMatchObject({
      tenant_id: 'contoso',
      idp: 'idp_a',
      status: 'ok',
      started_at: '2026-03-01T09:00:00.000Z',
      counts: {
        users_created: 7,
        users_updated: 0,
        users_deactivated: 0,
        users_reactivated: 0,
        users_unchanged: 0,
        groups_created: 3,
        groups_updated: 0,
        groups_unchanged: 0,
        errors: 0,
      },
      errors: [],
      conflicts: [],
    });
    expect(run.id).toEqual(expect.any(String));
    expect(run).toHaveProperty('cascade');

    const alice = await get(`/v1/directory/employees/${enc(subj(ENTRA.alice))}`);
    expect(alice.status).toBe(200);
    expect(alice.body).toEqual({
      employee_subject: subj(ENTRA.alice),
      idp: 'idp_a',
      tenant_id: 'contoso',
      external_id: ENTRA.alice,
      external_idp_id: null,
      email: 'alice@contoso.com',
      display_name: 'Alice Adams',
      given_name: 'Alice',
      family_name: 'Adams',
      title: 'Staff Engineer',
      department: 'Engineering',
      manager_subject: subj(ENTRA.engMgr),
      groups: [ENTRA.gEng],
      roles: [],
      app_assignments: ['aws-dev', 'github'],
      status: 'active',
      active: true,
      source: 'scim',
      created_at: '2026-03-01T09:00:00.000Z',
      updated_at: '2026-03-01T09:00:00.000Z',
      deactivated_at: null,
      last_synced_at: '2026-03-01T09:00:00.000Z',
      session: null,
    });
    // A raw ':' in the path works as well as the encoded form.
    expect((await get(`/v1/directory/employees/${subj(ENTRA.alice)}`)).status).toBe(200);

    const inactive = await get('/v1/directory/employees?tenant=contoso&status=inactive');
    expect(inactive.body.map((e: any) => e.external_id)).toEqual([ENTRA.dave]);
    expect(inactive.body[0]).toMatchObject({ active: false, deactivated_at: '2026-03-01T09:00:00.000Z' });
    const all = await get('/v1/directory/employees?tenant=contoso');
    expect(all.body).toHaveLength(7);
    // Paged: a Link to the next page until the last, the pages adding up to the whole, in order.
    expect(await walk('/v1/directory/employees?tenant=contoso&limit=3')).toEqual(all.body.map((e: any) => e.employee_subject));
    expect((await app.request('/v1/directory/employees?tenant=contoso&limit=7')).headers.get('link')).toBeNull();
    expect((await get('/v1/directory/employees?limit=0')).status).toBe(422);

    const groups = await get('/v1/directory/groups?tenant=contoso');
    expect(groups.body.map((g: any) => g.display_name).sort()).toEqual(['Agent Approvers', 'Engineering', 'Finance']);
    const eng = await get(`/v1/directory/groups/${enc(`contoso:${ENTRA.gEng}`)}`);
    expect(eng.status).toBe(200);
    expect(eng.body.members).toEqual([ENTRA.alice, ENTRA.bob, ENTRA.engMgr, ENTRA.dave].map((e) => subj(e)).sort());
  });

  it('reports everything unchanged for the same snapshot and rewrites no row', async () => {
    const before = await xmins('contoso');
    clock += 60_000;
    const r = await sync({ tenantId: 'contoso', idp: 'idp_a', mode: 'snapshot', ...entraSnapshot() });
    const run = (await r.json()) as any;
    expect(run.counts).toMatchObject({ users_unchanged: 7, users_created: 0, users_updated: 0, users_deactivated: 0, groups_unchanged: 3, groups_updated: 0 });
    expect(await xmins('contoso')).toEqual(before);
    const alice = await get(`/v1/directory/employees/${enc(subj(ENTRA.alice))}`);
    expect(alice.body.updated_at).toBe('2026-03-01T09:00:00.000Z');
  });

  it('applies updates, deactivations and reactivations, keeps sessions, and reports conflicts', async () => {
    const session = { last_seen_at: '2026-03-01T08:00:00.000Z', token_email: 'bob@contoso.com' };
    await store.db.execute(sql`update directory_employees set session = ${JSON.stringify(session)}::jsonb where employee_subject = ${subj(ENTRA.bob)}`);
    clock += 60_000;
    const snap = entraSnapshot();
    const users = snap.users
      .filter((u) => u.externalId !== ENTRA.bob && u.externalId !== ENTRA.engMgr)
      .map((u) =>
        u.externalId === ENTRA.alice
          ? entraUser({ oid: ENTRA.alice, upn: 'alice.adams@contoso.com', given: 'Alice', family: 'Adams', department: 'Platform', managerOid: ENTRA.engMgr })
          : u,
      )
      .map((u) => (u.externalId === ENTRA.dave ? { ...u, active: true } : u));
    users.push(entraUser({ oid: 'new-1', upn: 'nina@contoso.com', given: 'Nina', family: 'Novak', managerOid: 'not-in-tenant' }));
    const run = (await (await sync({ tenantId: 'contoso', users, groups: snap.groups })).json()) as any;
    expect(run.counts).toMatchObject({ users_created: 1, users_updated: 1, users_deactivated: 2, users_reactivated: 1, users_unchanged: 3 });
    expect(run.conflicts).toEqual(
      [
        { type: 'manager_inactive', subject: subj(ENTRA.alice), detail: expect.any(String) },
        { type: 'manager_inactive', subject: subj(ENTRA.dave), detail: expect.any(String) },
        { type: 'manager_missing', subject: subj('new-1'), detail: expect.any(String) },
      ].sort((a, b) => (a.subject < b.subject ? -1 : 1)),
    );
    const bob = (await get(`/v1/directory/employees/${enc(subj(ENTRA.bob))}`)).body;
    expect(bob).toMatchObject({ status: 'inactive', active: false, deactivated_at: new Date(clock).toISOString(), session });
    const alice = (await get(`/v1/directory/employees/${enc(subj(ENTRA.alice))}`)).body;
    expect(alice).toMatchObject({
      employee_subject: subj(ENTRA.alice),
      email: 'alice.adams@contoso.com',
      department: 'Platform',
      created_at: '2026-03-01T09:00:00.000Z',
    });
    const dave = (await get(`/v1/directory/employees/${enc(subj(ENTRA.dave))}`)).body;
    expect(dave).toMatchObject({ status: 'active', deactivated_at: null });

    const conflicts = await get('/v1/directory/conflicts?tenant=contoso');
    expect(conflicts.status).toBe(200);
    expect(conflicts.body).toEqual(run.conflicts);
  });

  it('applies a snapshot with malformed records as partial, naming each failure', async () => {
    clock += 60_000;
    const snap = entraSnapshot();
    const users = [...snap.users.map((u) => (u.externalId === ENTRA.carol ? { ...u, emails: 'carol@contoso.com' } : u)), { userName: 'ghost@contoso.com' }, 17];
    const r = await sync({ tenantId: 'contoso', users, groups: [...snap.groups, { displayName: 'broken', members: 'x' }] });
    expect(r.status).toBe(200);
    const run = (await r.json()) as any;
    expect(run.status).toBe('partial');
    expect(run.counts.errors).toBe(4);
    expect(run.errors).toEqual([
      { resource_type: 'User', external_id: ENTRA.carol, error: 'emails must be an array' },
      { resource_type: 'User', external_id: 'users[7]', error: expect.stringContaining('externalId') },
      { resource_type: 'User', external_id: 'users[8]', error: expect.stringContaining('JSON object') },
      { resource_type: 'Group', external_id: 'groups[3]', error: expect.stringContaining('externalId') },
    ]);
    // The rest was applied (bob and the engineering manager are back), carol was left as she was.
    expect(run.counts.users_reactivated).toBe(2);
    const carol = (await get(`/v1/directory/employees/${enc(subj(ENTRA.carol))}`)).body;
    expect(carol).toMatchObject({ status: 'active', email: 'carol@contoso.com' });
    const history = await get('/v1/directory/syncs?tenant=contoso');
    expect(history.body[0]).toMatchObject({ id: run.id, status: 'partial', errors: run.errors });
    expect(history.body).toHaveLength(4);
    expect(history.body.map((h: any) => h.started_at)).toEqual([...history.body.map((h: any) => h.started_at)].sort().reverse());
  });

  it('rolls a failing sync back entirely, whatever stage it failed in', async () => {
    for (const stage of ['employees', 'groups', 'run'] as const) {
      const before = (await get('/v1/directory/employees?tenant=contoso')).body;
      const groupsBefore = (await get('/v1/directory/groups?tenant=contoso')).body;
      const runsBefore = (await get('/v1/directory/syncs?tenant=contoso')).body;
      failAt = stage;
      clock += 60_000;
      const r = await sync(
        { tenantId: 'contoso', users: [entraUser({ oid: 'only-one', upn: 'o@contoso.com', given: 'O', family: 'One' })], groups: [] },
        crashApp,
      );
      failAt = undefined;
      expect(r.status).toBe(500);
      expect(await r.json()).toEqual({ error: { code: 'internal_error', message: 'internal error' } });
      expect((await get('/v1/directory/employees?tenant=contoso')).body).toEqual(before);
      expect((await get('/v1/directory/groups?tenant=contoso')).body).toEqual(groupsBefore);
      expect((await get('/v1/directory/syncs?tenant=contoso')).body).toEqual(runsBefore);
    }
  });

  it('keeps tenants apart: a sync of one tenant never changes another, reads never mix them', async () => {
    // Same provider ids in a second tenant: distinct subjects, distinct rows.
    clock += 60_000;
    const r = await sync({ tenantId: 'fabrikam', ...entraSnapshot() });
    expect(((await r.json()) as any).counts.users_created).toBe(7);
    const okta = await sync({ tenantId: 'initech', idp: 'idp_b', ...oktaSnapshot() });
    expect(((await okta.json()) as any).counts).toMatchObject({ users_created: 3, groups_created: 2 });

    const fabBefore = await xmins('fabrikam');
    const oktaBefore = await xmins('initech');
    clock += 60_000;
    const wipe = (await (await sync({ tenantId: 'contoso', users: [], groups: [] })).json()) as any;
    expect(wipe.counts.users_deactivated).toBeGreaterThan(0);
    expect(await xmins('fabrikam')).toEqual(fabBefore);
    expect(await xmins('initech')).toEqual(oktaBefore);
    const fab = (await get('/v1/directory/employees?tenant=fabrikam&status=active')).body;
    expect(fab).toHaveLength(6);
    expect(fab.every((e: any) => e.tenant_id === 'fabrikam' && e.employee_subject.startsWith('idp_a:fabrikam:'))).toBe(true);
    expect((await get('/v1/directory/groups?tenant=initech')).body.every((g: any) => g.tenant_id === 'initech')).toBe(true);
    expect((await get('/v1/directory/syncs?tenant=fabrikam')).body.every((s: any) => s.tenant_id === 'fabrikam')).toBe(true);
    // A key of one tenant asked for under another tenant is not found.
    expect((await get(`/v1/directory/employees/${enc(subj(ENTRA.alice, 'fabrikam'))}?tenant=contoso`)).status).toBe(404);
    expect((await get(`/v1/directory/groups/${enc(`fabrikam:${ENTRA.gEng}`)}?tenant=contoso`)).status).toBe(404);
    // Without a tenant, lists cover every tenant (each read through its own scoped repository).
    const everyone = (await get('/v1/directory/employees')).body;
    expect(new Set(everyone.map((e: any) => e.tenant_id))).toEqual(new Set(['contoso', 'fabrikam', 'initech']));
    expect(await walk('/v1/directory/employees?limit=4')).toEqual(everyone.map((e: any) => e.employee_subject));
    expect(await walk('/v1/directory/employees?limit=4&status=inactive')).toEqual(
      (await get('/v1/directory/employees?status=inactive')).body.map((e: any) => e.employee_subject),
    );
    const peggy = (await get(`/v1/directory/employees/${enc(`idp_b:initech:${OKTA.peggy.oktaId}`)}`)).body;
    expect(peggy).toMatchObject({ external_idp_id: OKTA.peggy.scimId, manager_subject: `idp_b:initech:${OKTA.boss.oktaId}`, groups: [OKTA.group.oktaId] });
  });

  it('answers 404 with the error envelope for unknown employees and groups', async () => {
    for (const path of [
      '/v1/directory/employees/idp_a:contoso:nobody',
      '/v1/directory/employees/not-a-subject',
      '/v1/directory/groups/contoso:nogroup',
      '/v1/directory/groups/nokey',
    ]) {
      const r = await get(path);
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ error: { code: 'not_found', message: expect.any(String) } });
    }
  });

  it('rejects invalid requests with 422 detail', async () => {
    const cases: [unknown, (string | number)[]][] = [
      [{ users: [] }, ['body', 'tenantId']],
      [{ tenantId: 'a:b', users: [] }, ['body', 'tenantId']],
      [{ tenantId: 'contoso', idp: 'idp_c', users: [] }, ['body', 'idp']],
      [{ tenantId: 'contoso', mode: 'delta', users: [] }, ['body', 'mode']],
      [{ tenantId: 'contoso' }, ['body', 'users']],
      [{ tenantId: 'contoso', users: {} }, ['body', 'users']],
      [{ tenantId: 'contoso', users: [], groups: 'x' }, ['body', 'groups']],
    ];
    for (const [body, loc] of cases) {
      const r = await sync(body);
      expect(r.status, JSON.stringify(body)).toBe(422);
      const j = (await r.json()) as any;
      expect(j.detail.map((d: any) => d.loc)).toContainEqual(loc);
    }
    const bad = await sync('{"tenantId": ');
    expect(bad.status).toBe(422);
    expect(((await bad.json()) as any).detail[0].type).toBe('json_invalid');
    // Bytes that are not UTF-8 are refused, not decoded to U+FFFD (two such ids would be one).
    const latin1 = Buffer.concat([
      Buffer.from('{"tenantId":"contoso","users":[{"externalId":"a'),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('","userName":"x"}]}'),
    ]);
    const notUtf8 = await app.request('/v1/directory/sync', { method: 'POST', headers: { 'content-type': 'application/json' }, body: latin1 });
    expect(notUtf8.status).toBe(422);
    expect(JSON.stringify(await notUtf8.json())).toMatch(/not valid UTF-8/);
    expect((await get('/v1/directory/conflicts')).status).toBe(422);
    expect((await get('/v1/directory/employees?status=gone')).status).toBe(422);
    expect((await get('/v1/directory/employees?tenant=a%20b')).status).toBe(422);
    expect((await get('/v1/directory/syncs?limit=0')).status).toBe(422);
  });

  it('refuses a sync body over its limit with 413', async () => {
    const r = await app.request('/v1/directory/sync', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': String(SYNC_BODY_LIMIT + 1) },
      body: '{}',
    });
    expect(r.status).toBe(413);
    expect(((await r.json()) as any).error.code).toBe('payload_too_large');
  });
});
