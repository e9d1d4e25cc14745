/**
 * Authority preview over real HTTP on PGlite (and Postgres): each capability with an allow and a
 * deny reason, subject lookup by stable subject / email / employee id / name, ambiguity reported
 * (never guessed), agent scenarios, unknown scenarios, and no writes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { rowsOf, type Store } from '../../../store/factory.js';
import { testBackends } from '../../../store/testing.js';
import { ENTRA, entraSnapshot, entraUser, OKTA, oktaSnapshot } from '../directory/fixtures.js';
import { serve, type Served } from '../identity/testkit.js';

const A = (oid: string) => `idp_a:contoso:${oid}`;

describe.each(testBackends())('authority preview on $name', (b) => {
  let store: Store;
  let api: Served;
  const preview = (o: Record<string, unknown>) => api.post('/v1/authority/preview', o);
  const byAction = (body: any) => Object.fromEntries(body.results.map((r: any) => [r.action, r]));
  const digest = async () =>
    (
      await rowsOf<{ d: string }>(
        store.db,
        sql`select md5(coalesce((select string_agg(e::text, '|' order by employee_subject) from directory_employees e), '') ||
                       coalesce((select string_agg(g::text, '|' order by agent_name) from governance_agents g), '')) as d`,
      )
    )[0]!.d;

  beforeAll(async () => {
    store = await b.open();
    api = await serve(store, () => Date.parse('2026-03-01T09:00:00.000Z'), { IDP_AUDIT_ROLES: 'approver' });
    expect((await api.post('/v1/directory/sync', { tenantId: 'contoso', ...entraSnapshot() })).status).toBe(200);
    expect((await api.post('/v1/directory/sync', { tenantId: 'initech', idp: 'idp_b', ...oktaSnapshot() })).status).toBe(200);
    const twin = entraUser({ oid: 'fab-alice', upn: 'alice@fabrikam.example', given: 'Alice', family: 'Adams' });
    expect((await api.post('/v1/directory/sync', { tenantId: 'fabrikam', users: [twin], groups: [] })).status).toBe(200);
    const reg = (o: Record<string, unknown>) =>
      api.post('/v1/governance/agents', { tenantId: 'contoso', riskTier: 'medium', approvedRuntime: 'doks_prod', createdBy: 'test', ...o });
    expect((await reg({ agentName: 'reporter', ownerType: 'employee', ownerRef: A(ENTRA.alice), businessSponsor: A(ENTRA.engMgr) })).status).toBe(201);
    for (const s of ['pending_approval', 'approved', 'active']) {
      expect((await api.post('/v1/governance/agents/reporter/transition', { status: s, by: 'test' })).status).toBe(200);
    }
    expect((await reg({ agentName: 'team-bot', ownerType: 'team', ownerRef: `contoso:${ENTRA.gEng}`, businessSponsor: A(ENTRA.engMgr) })).status).toBe(201);
  });
  afterAll(async () => {
    await api?.close();
    await store?.close();
  });

  it('owner by stable subject: all five eligible, with the response shape', async () => {
    const r = await preview({ subject: A(ENTRA.alice) });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      mode: 'authority-preview',
      kind: 'eligibility',
      subject: A(ENTRA.alice),
      scenarioKnown: true,
      principalFound: true,
      lifecycleState: 'active',
    });
    expect(r.body.results.map((x: any) => x.action)).toEqual(['own', 'sponsor', 'approve', 'operate', 'audit']);
    const m = byAction(r.body);
    expect(m.own).toMatchObject({ eligible: true, reason: 'active_employee' });
    expect(m.own.note).toContain('owns 1');
    expect(m.sponsor).toMatchObject({ eligible: true, reason: 'active_employee' });
    expect(m.approve).toMatchObject({ eligible: true, reason: 'agent_owner' });
    expect(m.operate).toMatchObject({ eligible: true, reason: 'active_employee' });
    expect(m.audit).toMatchObject({ eligible: true, reason: 'accountable_party' });
    for (const x of r.body.results) expect(x.note).toContain('not an enforcement decision');
  });

  it('approve: owning-team member (by email) and manager chain (by employee id) allow; no basis denies', async () => {
    expect(byAction((await preview({ subject: 'BOB@contoso.com', actions: ['approve'] })).body).approve).toMatchObject({
      eligible: true,
      reason: 'owning_team_member',
    });
    const erin = await preview({ subject: ENTRA.engMgr, actions: ['approve', 'audit'] });
    expect(erin.body.results).toHaveLength(2);
    expect(byAction(erin.body).approve).toMatchObject({ eligible: true, reason: 'owner_manager_chain' });
    expect(byAction(erin.body).audit).toMatchObject({ eligible: true, reason: 'accountable_party' });
    const carol = byAction((await preview({ subject: 'Carol Chen' })).body);
    expect(carol.approve).toMatchObject({ eligible: false, reason: 'no_authority_basis' });
    expect(carol.audit).toMatchObject({ eligible: false, reason: 'no_audit_basis' });
    expect(carol.own.eligible).toBe(true);
  });

  it('audit: a configured audit role allows', async () => {
    const bill = await preview({ subject: 'bill@initech.example', actions: ['audit'] });
    expect(bill.body).toMatchObject({ principalFound: true, employeeSubject: `idp_b:initech:${OKTA.boss.oktaId}` });
    expect(byAction(bill.body).audit).toMatchObject({ eligible: true, reason: 'audit_role' });
  });

  it('inactive employee: every capability denied with the lifecycle state', async () => {
    const r = await preview({ subject: 'dave@contoso.com' });
    expect(r.body).toMatchObject({ principalFound: true, lifecycleState: 'inactive' });
    expect(r.body.results.every((x: any) => !x.eligible && x.reason === 'employee_inactive')).toBe(true);
  });

  it('ambiguous name: says so with the candidates, never guesses; a tenant narrows it', async () => {
    const r = await preview({ subject: 'alice adams' });
    expect(r.body).toMatchObject({ principalFound: false, candidates: ['idp_a:contoso:' + ENTRA.alice, 'idp_a:fabrikam:fab-alice'].sort() });
    expect(r.body.results).toHaveLength(5);
    expect(r.body.results.every((x: any) => !x.eligible && x.reason === 'principal_ambiguous')).toBe(true);
    expect((await preview({ subject: 'Alice Adams', tenant: 'contoso' })).body).toMatchObject({ principalFound: true, employeeSubject: A(ENTRA.alice) });
  });

  it('unknown principal: principalFound=false, denied', async () => {
    for (const subject of ['nobody@contoso.com', 'idp_a:contoso:missing', 'idp_a:bad tenant:x']) {
      const r = await preview({ subject });
      expect(r.body).toMatchObject({ principalFound: false });
      expect(r.body.results.every((x: any) => !x.eligible && x.reason === 'principal_not_found')).toBe(true);
    }
    expect((await preview({ subject: A(ENTRA.alice), tenant: 'initech' })).body.principalFound).toBe(false);
  });

  it('agent scenarios: per-agent bases and agent state; unknown scenarios deny', async () => {
    const alice = byAction((await preview({ subject: A(ENTRA.alice), scenario: 'agent:reporter' })).body);
    expect(alice.own).toMatchObject({ eligible: true, reason: 'agent_owner' });
    expect(alice.approve).toMatchObject({ eligible: true, reason: 'agent_owner' });
    const erin = byAction((await preview({ subject: A(ENTRA.engMgr), scenario: 'agent:reporter' })).body);
    expect(erin.sponsor).toMatchObject({ eligible: true, reason: 'current_sponsor' });
    const carol = byAction((await preview({ subject: A(ENTRA.carol), scenario: 'agent:reporter' })).body);
    expect(carol.own).toMatchObject({ eligible: true, reason: 'transfer_target_eligible' });
    expect(carol.approve).toMatchObject({ eligible: false, reason: 'no_authority_basis' });
    const draft = byAction((await preview({ subject: A(ENTRA.bob), scenario: 'agent:team-bot' })).body);
    expect(draft.approve).toMatchObject({ eligible: false, reason: 'agent_draft' });
    expect(draft.operate).toMatchObject({ eligible: false, reason: 'agent_draft' });
    expect(byAction((await preview({ subject: A(ENTRA.bob), scenario: 'agent:reporter' })).body).operate).toMatchObject({ eligible: true });
    for (const scenario of ['agent:nope', 'quarterly-close']) {
      const r = await preview({ subject: A(ENTRA.alice), scenario });
      expect(r.body).toMatchObject({ scenario, scenarioKnown: false, principalFound: true });
      expect(r.body.results.every((x: any) => !x.eligible && x.reason === 'scenario_unknown')).toBe(true);
    }
    // Another tenant's agent is not a scenario of this principal.
    expect((await preview({ subject: 'bill@initech.example', scenario: 'agent:reporter' })).body.scenarioKnown).toBe(false);
  });

  it('validation is 422 and the preview writes nothing', async () => {
    const before = await digest();
    expect((await preview({})).status).toBe(422);
    expect((await preview({ subject: '  ' })).status).toBe(422);
    expect((await preview({ subject: 'x', actions: ['delete'] })).status).toBe(422);
    await preview({ subject: A(ENTRA.alice), scenario: 'agent:reporter' });
    await preview({ subject: 'alice adams' });
    expect(await digest()).toBe(before);
  });
});
