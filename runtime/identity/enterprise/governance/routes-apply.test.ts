/**
 * The declarative governance routes over real HTTP on PGlite and Postgres: PATCH of a governed
 * agent's fields (one history entry per change, nothing written when nothing changes) and a
 * producer's apply (register, update, walk SPEC 3.1, hold, retire what it no longer declares,
 * conflicts with other producers and the API, an unchanged apply touching no row).
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { rowsOf } from '../../../store/factory.js';
import { testBackends } from '../../../store/testing.js';
import { ENTRA } from '../directory/fixtures.js';
import { pathTo } from './model.js';
import { governedAgentCalls, S, T, useGovernance } from './routes-testing.js';

const AT = '2026-03-01T09:00:00.000Z';
const steps = (history: { action: string; by: string; detail: string }[]) => history.map((h) => [h.action, h.by, h.detail]);

describe('pathTo: the shortest SPEC 3.1 walk', () => {
  it.each([
    ['draft', 'active', ['pending_approval', 'approved', 'active']],
    ['active', 'suspended', ['suspended']],
    ['suspended', 'active', ['active']],
    ['draft', 'retired', ['retired']],
    ['approved', 'draft', undefined],
    ['retired', 'active', undefined],
    ['quarantined', 'quarantined', []],
  ] as const)('%s -> %s', (from, to, path) => {
    expect(pathTo(from, to)).toEqual(path);
  });
});

describe.each(testBackends())('declarative governance routes on $name', (b) => {
  const gov = useGovernance(b);
  const { register, move, activeAgent } = governedAgentCalls(() => gov.api);
  const desired = (agentName: string, o: Record<string, unknown> = {}) => ({
    agentName,
    tenantId: T,
    ownerType: 'employee',
    ownerRef: S(ENTRA.alice),
    businessSponsor: S(ENTRA.engMgr),
    riskTier: 'medium',
    approvedRuntime: 'doks_prod',
    status: 'active',
    ...o,
  });
  const apply = (owner: string, agents: unknown[]) => gov.api.post('/v1/governance/agents/apply', { owner, agents });
  const outcomes = (r: { body: { agents: { agent_name: string; outcome: string }[] } }) => r.body.agents.map((a) => [a.agent_name, a.outcome]);
  /** Every governed agent row as the store holds it (xmin moves on any write to the row). */
  const rows = () =>
    rowsOf<{ n: string; x: string; h: number; u: string }>(
      gov.store.db,
      sql`select agent_name as n, xmin::text as x, jsonb_array_length(history) as h, updated_at::text as u from governance_agents order by 1`,
    );

  describe('PATCH /v1/governance/agents/{name}', () => {
    it('sets owner, team, sponsor, risk tier and runtime: one history entry each; the same patch again writes nothing', async () => {
      await activeAgent('patched');
      const patch = {
        ownerType: 'employee',
        ownerRef: 'bob@contoso.com',
        teamRef: ENTRA.gEng,
        businessSponsor: 'alice@contoso.com',
        riskTier: 'high',
        approvedRuntime: null,
        by: 'erin',
      };
      const r = await gov.api.patch('/v1/governance/agents/patched', patch);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body).toMatchObject({
        status: 'active',
        owner_ref: S(ENTRA.bob),
        team_ref: `${T}:${ENTRA.gEng}`,
        business_sponsor: S(ENTRA.alice),
        risk_tier: 'high',
        approved_runtime: null,
        activation_blockers: ['approved_runtime_missing'],
        last_reviewed_at: AT,
      });
      expect(steps(r.body.history.slice(4))).toEqual([
        ['ownership_transferred', 'erin', `employee:${S(ENTRA.alice)} -> employee:${S(ENTRA.bob)}`],
        ['updated', 'erin', `team_ref: null -> "${T}:${ENTRA.gEng}"`],
        ['updated', 'erin', `business_sponsor: "${S(ENTRA.engMgr)}" -> "${S(ENTRA.alice)}"`],
        ['updated', 'erin', 'risk_tier: "medium" -> "high"'],
        ['updated', 'erin', 'approved_runtime: "doks_prod" -> null'],
      ]);
      const before = (await rows()).find((x) => x.n === 'patched')!;
      const again = await gov.api.patch('/v1/governance/agents/patched', patch);
      expect(again).toEqual({ status: 200, body: r.body });
      expect((await rows()).find((x) => x.n === 'patched')).toEqual(before);
    });

    it('refuses what does not resolve, an inactive new owner, a half owner, unknown fields and a retired agent; another tenant is a 404', async () => {
      expect((await register({ agentName: 'patch-refused' })).status).toBe(201);
      const p = (b: Record<string, unknown>, q = '') => gov.api.patch(`/v1/governance/agents/patch-refused${q}`, b);
      expect((await p({ teamRef: 'no-such-group' })).body.error.code).toBe('team_unresolved');
      expect((await p({ teamRef: 'fabrikam:fabgrp' })).body.error.code).toBe('team_cross_tenant');
      expect((await p({ businessSponsor: 'nobody@contoso.com' })).body.error.code).toBe('sponsor_unresolved');
      expect((await p({ ownerType: 'employee', ownerRef: S(ENTRA.dave) })).body.error.code).toBe('owner_inactive');
      expect((await p({ ownerType: 'employee', ownerRef: S('nobody') })).body.error.code).toBe('owner_unresolved');
      expect((await p({ ownerRef: S(ENTRA.bob) })).status).toBe(422);
      expect((await p({ riskTier: 'extreme' })).status).toBe(422);
      expect((await p({ status: 'active' })).status).toBe(422);
      expect((await p({ riskTier: 'low' }, '?tenant=fabrikam')).status).toBe(404);
      expect((await gov.api.patch('/v1/governance/agents/nope', { riskTier: 'low' })).status).toBe(404);
      const unchanged = await gov.api.get('/v1/governance/agents/patch-refused');
      expect(unchanged.body.history).toHaveLength(1);
      expect((await move('patch-refused', 'retired')).status).toBe(200);
      const retired = await p({ riskTier: 'low' });
      expect(retired.status).toBe(409);
      expect(retired.body.error.code).toBe('bad_transition');
    });
  });

  describe('POST /v1/governance/agents/apply', () => {
    it('registers and walks to the declared state, updates what changed, writes nothing when unchanged, retires what it no longer declares', async () => {
      const owner = 'folder:/gitops/a';
      const first = await apply(owner, [desired('ap-one'), desired('ap-two', { status: 'approved', riskTier: undefined })]);
      expect(first.status, JSON.stringify(first.body)).toBe(200);
      expect(outcomes(first)).toEqual([
        ['ap-one', 'created'],
        ['ap-two', 'created'],
      ]);
      expect(first.body.retired).toEqual([]);
      expect(first.body.agents[0].agent).toMatchObject({ status: 'active', created_by: owner, activation_blockers: [] });
      expect(steps(first.body.agents[1].agent.history)).toEqual([
        ['registered', owner, `owner ${S(ENTRA.alice)}`],
        ['transition', owner, 'draft -> pending_approval'],
        ['transition', owner, 'pending_approval -> approved'],
      ]);

      const before = await rows();
      const same = await apply(owner, [desired('ap-two', { status: 'approved', riskTier: undefined }), desired('ap-one')]);
      expect(outcomes(same)).toEqual([
        ['ap-one', 'unchanged'],
        ['ap-two', 'unchanged'],
      ]);
      expect(await rows()).toEqual(before);

      const edited = await apply(owner, [desired('ap-one', { riskTier: 'critical', teamRef: ENTRA.gEng }), desired('ap-two', { status: 'approved' })]);
      expect(outcomes(edited)).toEqual([
        ['ap-one', 'updated'],
        ['ap-two', 'updated'],
      ]);
      expect(steps(edited.body.agents[0].agent.history.slice(4))).toEqual([
        ['updated', owner, `team_ref: null -> "${T}:${ENTRA.gEng}"`],
        ['updated', owner, 'risk_tier: "medium" -> "critical"'],
      ]);
      expect(steps(edited.body.agents[1].agent.history.slice(3))).toEqual([['updated', owner, 'risk_tier: null -> "medium"']]);

      const pruned = await apply(owner, [desired('ap-two', { status: 'approved' })]);
      expect(outcomes(pruned)).toEqual([['ap-two', 'unchanged']]);
      expect(pruned.body.retired).toEqual(['ap-one']);
      const one = (await gov.api.get('/v1/governance/agents/ap-one')).body;
      expect(one.status).toBe('retired');
      expect(one.history).toHaveLength(7);
      expect(steps(one.history.slice(-1))).toEqual([['transition', owner, 'active -> retired']]);
      const after = await rows();
      expect((await apply(owner, [desired('ap-two', { status: 'approved' })])).body.retired).toEqual([]);
      expect(await rows()).toEqual(after);
      // Declared again: retired is terminal.
      const back = await apply(owner, [desired('ap-one'), desired('ap-two', { status: 'approved' })]);
      expect(back.body.agents[0]).toMatchObject({ agent_name: 'ap-one', outcome: 'retired', message: 'the governed agent is retired (terminal)' });
    });

    it('never touches what another producer or the API holds; holds what someone else suspended; reports the gate', async () => {
      const owner = 'folder:/gitops/b';
      expect(outcomes(await apply(owner, [desired('held-one')]))).toEqual([['held-one', 'created']]);
      const other = await apply('kubernetes:prod', [desired('held-one', { riskTier: 'low' })]);
      expect(other.body.agents).toEqual([{ agent_name: 'held-one', outcome: 'conflict', message: `governed agent held-one is managed by ${owner}` }]);
      expect(other.body.retired).toEqual([]);
      expect((await register({ agentName: 'api-made' })).status).toBe(201);
      const api = await apply(owner, [desired('held-one'), desired('api-made')]);
      expect(api.body.agents[0]).toEqual({
        agent_name: 'api-made',
        outcome: 'conflict',
        message: 'governed agent api-made is managed by the API (registered by alice@contoso.com)',
      });
      expect((await gov.api.get('/v1/governance/agents/api-made')).body.history).toHaveLength(1);
      // Someone else's suspension is never undone; a declaration the gate refuses says why.
      expect((await move('held-one', 'suspended', 'security-team')).status).toBe(200);
      const gated = await apply(owner, [desired('held-one'), desired('no-sponsor', { businessSponsor: undefined })]);
      expect(gated.body.agents.map((a: { agent_name: string; outcome: string; message: string }) => [a.agent_name, a.outcome, a.message])).toEqual([
        ['held-one', 'held', 'suspended by security-team (transition); a producer does not undo it'],
        ['no-sponsor', 'blocked', '409 activation_blocked: activation gate not met: sponsor_missing'],
      ]);
      expect(gated.body.agents[1].agent).toMatchObject({ status: 'approved', activation_blockers: ['sponsor_missing'] });
      expect((await gov.api.get('/v1/governance/agents/held-one')).body.status).toBe('suspended');
      // Its own suspension it walks back.
      await apply(owner, [desired('held-one', { status: 'suspended' })]);
      expect((await move('held-one', 'active', 'reviewer')).status).toBe(200);
      expect(outcomes(await apply(owner, [desired('held-one', { status: 'suspended' })]))).toEqual([['held-one', 'updated']]);
      expect(outcomes(await apply(owner, [desired('held-one')]))).toEqual([['held-one', 'updated']]);
      expect((await gov.api.get('/v1/governance/agents/held-one')).body.status).toBe('active');
    });

    it('refuses a name declared twice, an unknown status and a malformed owner (nothing written); /openapi.json has both routes', async () => {
      const before = await rows();
      expect((await apply('folder:/x', [desired('twice'), desired('twice')])).body.error.code).toBe('duplicate_agent');
      expect((await apply('folder:/x', [desired('bad-status', { status: 'gone' })])).status).toBe(422);
      expect((await apply('', [])).status).toBe(422);
      expect((await apply('folder:/x', [desired('other-tenant', { tenantId: 'fabrikam', ownerRef: 'nobody' })])).body.agents[0].outcome).toBe('rejected');
      expect(await rows()).toEqual(before);
      const doc = (await gov.api.get('/openapi.json')).body;
      expect(Object.keys(doc.paths['/v1/governance/agents/{name}'])).toEqual(['get', 'patch']);
      expect(doc.paths['/v1/governance/agents/apply'].post.responses['200']).toBeDefined();
      expect(doc.components.schemas.GovernedAgentUpdate.properties.riskTier).toBeDefined();
    });
  });
});
