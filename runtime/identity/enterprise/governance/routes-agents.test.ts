/**
 * Governance over real HTTP (127.0.0.1, ephemeral port) on PGlite and Postgres: governed agents,
 * every lifecycle pair, the activation gate, ownership transfer, issues and summary, and every
 * governance route in /openapi.json. Delegations: routes-delegations.test.ts; the cascade's
 * reason codes: routes-cascade.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { testBackends } from '../../../store/testing.js';
import { ENTRA } from '../directory/fixtures.js';
import { AGENT_STATUSES, canTransition, type AgentStatus } from './model.js';
import { agents as identityAgents } from '../../../store/schema/identity.js';
import { governedAgentCalls, S, T, useGovernance } from './routes-testing.js';
import { seedAgent, seedEmployee, seedGroup, subjectOf } from './testkit.js';

describe.each(testBackends())('governance routes on $name', (b) => {
  const gov = useGovernance(b);

  const { register, move, activeAgent } = governedAgentCalls(() => gov.api);

  describe('governed agents', () => {
    it('registers draft with the canonical owner subject and live enrichment', async () => {
      const r = await register({ agentName: 'reporter', ownerRef: 'alice@contoso.com', teamRef: `${T}:${ENTRA.gEng}` });
      expect(r.status).toBe(201);
      expect(r.body).toMatchObject({
        agent_name: 'reporter',
        tenant_id: T,
        owner_type: 'employee',
        owner_ref: S(ENTRA.alice),
        team_ref: `${T}:${ENTRA.gEng}`,
        business_sponsor: S(ENTRA.engMgr),
        risk_tier: 'medium',
        approved_runtime: 'doks_prod',
        status: 'draft',
        created_by: 'alice@contoso.com',
        created_at: '2026-03-01T09:00:00.000Z',
        last_reviewed_at: null,
        owner_display: 'Alice Adams',
        owner_ok: true,
        owner_active: true,
        sponsor_display: 'Erin Moss',
        sponsor_active: true,
        activation_blockers: [],
      });
      expect(r.body.history).toEqual([{ at: '2026-03-01T09:00:00.000Z', action: 'registered', by: 'alice@contoso.com', detail: `owner ${S(ENTRA.alice)}` }]);
      const got = await gov.api.get('/v1/governance/agents/reporter');
      expect(got).toEqual({ status: 200, body: r.body });
      expect((await gov.api.get(`/v1/governance/agents/reporter?tenant=fabrikam`)).status).toBe(404);
      const dup = await register({ agentName: 'reporter' });
      expect(dup.status).toBe(409);
      expect(dup.body.error.code).toBe('agent_exists');
    });

    it('inactive owner: registered but draft with the blocker; unknown or cross-tenant owner: 400', async () => {
      const r = await register({ agentName: 'daves-bot', ownerRef: S(ENTRA.dave), businessSponsor: undefined, riskTier: undefined });
      expect(r.status).toBe(201);
      expect(r.body).toMatchObject({
        status: 'draft',
        owner_ok: true,
        owner_active: false,
        activation_blockers: ['owner_inactive', 'sponsor_missing', 'risk_tier_missing'],
      });
      expect(r.body).not.toHaveProperty('sponsor_active');
      for (const [ref, code] of [
        [S('nobody'), 'owner_unresolved'],
        ['ghost@contoso.com', 'owner_unresolved'],
        [subjectOf('fabrikam', 'fab1'), 'owner_cross_tenant'],
      ] as const) {
        const bad = await register({ agentName: `bad-${code}`, ownerRef: ref });
        expect(bad.status).toBe(400);
        expect(bad.body.error).toMatchObject({ code });
      }
      expect((await register({ agentName: 'bad-team', ownerType: 'team', ownerRef: 'fabrikam:fabgrp' })).status).toBe(400);
      expect((await register({ agentName: 'bad-sponsor', businessSponsor: subjectOf('fabrikam', 'fab1') })).body.error.code).toBe('sponsor_unresolved');
      expect((await gov.api.get('/v1/governance/agents/bad-team')).status).toBe(404);
      const team = await register({ agentName: 'team-bot', ownerType: 'team', ownerRef: ENTRA.gFin });
      expect(team.status).toBe(201);
      expect(team.body).toMatchObject({ owner_ref: `${T}:${ENTRA.gFin}`, owner_display: 'Finance', owner_ok: true, owner_active: true });
    });

    it('names are unique across tenants: concurrent registrations in two tenants yield one 201 and one 409', async () => {
      const [x, y] = await Promise.all([
        register({ agentName: 'raced' }),
        gov.api.post('/v1/governance/agents', { agentName: 'raced', tenantId: 'fabrikam', ownerType: 'employee', ownerRef: subjectOf('fabrikam', 'fab1') }),
      ]);
      expect([x.status, y.status].sort()).toEqual([201, 409]);
      expect((x.status === 409 ? x : y).body.error.code).toBe('agent_exists');
    });

    it('validation errors are 422 {detail}, unknown ids are 404 envelopes', async () => {
      for (const body of [
        {},
        { agentName: 'x y', tenantId: T, ownerType: 'employee', ownerRef: 'a' },
        { agentName: 'ok', tenantId: T, ownerType: 'robot', ownerRef: 'a' },
        'not json',
      ]) {
        const r = await gov.api.post('/v1/governance/agents', body);
        expect(r.status).toBe(422);
        expect(r.body.detail[0]).toMatchObject({ loc: expect.any(Array), msg: expect.any(String), type: expect.any(String) });
      }
      expect((await register({ agentName: 'rt', riskTier: 'extreme' })).status).toBe(422);
      for (const p of ['/v1/governance/agents/nope', '/v1/authority/delegations/nope', '/v1/authority/delegations/nope/usable']) {
        const r = await gov.api.get(p);
        expect(r.status).toBe(404);
        expect(r.body.error.code).toBe('not_found');
      }
      expect((await move('nope', 'active')).status).toBe(404);
      expect((await gov.api.post('/v1/authority/delegations/nope/revoke', {})).status).toBe(404);
      expect((await gov.api.get('/v1/governance/agents?status=bogus')).status).toBe(422);
    });

    // SPEC 3.1's manual moves, written out here (never read from the production table): ok moves, - is a 409.
    const TABLE = `
      from \\ to        draft  pending_approval  approved  active  suspended  quarantined  retired
      draft             -      ok                -         -       -          -            ok
      pending_approval  ok     -                 ok        -       -          -            ok
      approved          -      -                 -         ok      ok         -            ok
      active            -      -                 -         -       ok         ok           ok
      suspended         -      -                 -         ok      -          ok           ok
      quarantined       -      -                 -         ok      -          -            ok
      retired           -      -                 -         -       -          -            -
    `;
    const [head, ...rows] = TABLE.trim()
      .split('\n')
      .map((l) => l.trim().split(/\s+/));
    const targets = head!.slice(3) as AgentStatus[];
    const pairs = rows.flatMap(([from, ...cells]) => cells.map((cell, i) => ({ from: from as AgentStatus, to: targets[i]!, ok: cell === 'ok' })));
    const allowedFrom = (from: AgentStatus) => pairs.filter((p) => p.from === from && p.ok).map((p) => p.to);
    it('the table covers every state, as source and as target', () => {
      expect(rows.map((r) => r[0])).toEqual([...AGENT_STATUSES]);
      expect(targets).toEqual([...AGENT_STATUSES]);
      expect(pairs).toHaveLength(49);
      for (const p of pairs) expect(canTransition(p.from, p.to), `${p.from} -> ${p.to}`).toBe(p.ok);
    });
    it.each(pairs)('transition $from -> $to: allowed=$ok', async ({ from, to, ok }) => {
      const name = `tr-${from}-${to}`;
      await seedAgent(gov.store.db, T, { agentName: name, ownerRef: S(ENTRA.cto), businessSponsor: S(ENTRA.engMgr), status: from as AgentStatus });
      const r = await move(name, to);
      if (ok) {
        expect(r.status).toBe(200);
        expect(r.body.status).toBe(to);
        expect(r.body.history.at(-1)).toMatchObject({ action: 'transition', by: 'reviewer', detail: `${from} -> ${to}` });
      } else {
        expect(r.status).toBe(409);
        expect(r.body.error).toMatchObject({ code: 'bad_transition', from, to });
        expect([...r.body.error.allowed].sort()).toEqual(allowedFrom(from).sort());
        expect((await gov.api.get(`/v1/governance/agents/${name}`)).body.status).toBe(from);
      }
    });

    it('an unknown target status is a bad_transition too', async () => {
      expect((await move('reporter', 'launched')).body.error.code).toBe('bad_transition');
    });

    it('activation gate: 409 activation_blocked with the blocker list, then passes once fixed', async () => {
      await register({ agentName: 'gated', businessSponsor: undefined, approvedRuntime: undefined });
      expect((await move('gated', 'pending_approval')).status).toBe(200);
      expect((await move('gated', 'approved')).body.last_reviewed_at).toBe('2026-03-01T09:00:00.000Z');
      const r = await move('gated', 'active');
      expect(r.status).toBe(409);
      expect(r.body.error).toMatchObject({ code: 'activation_blocked', blockers: ['sponsor_missing', 'approved_runtime_missing'] });
      await seedAgent(gov.store.db, T, { agentName: 'gated-owner-gone', ownerRef: S(ENTRA.dave), businessSponsor: S(ENTRA.cto), status: 'suspended' });
      expect((await move('gated-owner-gone', 'active')).body.error).toMatchObject({ code: 'activation_blocked', blockers: ['owner_inactive'] });
      await activeAgent('gated-ok');
      expect((await gov.api.get('/v1/governance/agents/gated-ok')).body.status).toBe('active');
    });

    it('transfer-ownership: new owner must resolve in the tenant and be active', async () => {
      const to = (ownerType: string, ownerRef: string) =>
        gov.api.post('/v1/governance/agents/reporter/transfer-ownership', { ownerType, ownerRef, by: 'erin' });
      expect((await to('employee', S(ENTRA.dave))).body.error.code).toBe('owner_inactive');
      expect((await to('employee', S('nobody'))).status).toBe(400);
      expect((await to('employee', subjectOf('fabrikam', 'fab1'))).body.error.code).toBe('owner_cross_tenant');
      expect((await to('team', 'fabrikam:fabgrp')).status).toBe(400);
      const r = await to('employee', 'bob@contoso.com');
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ owner_ref: S(ENTRA.bob), owner_display: 'Bob Baker', last_reviewed_at: '2026-03-01T09:00:00.000Z' });
      expect(r.body.history.at(-1)).toEqual({
        at: '2026-03-01T09:00:00.000Z',
        action: 'ownership_transferred',
        by: 'erin',
        detail: `employee:${S(ENTRA.alice)} -> employee:${S(ENTRA.bob)}`,
      });
      expect(r.body.history).toHaveLength(2);
      expect((await gov.api.post('/v1/governance/agents/nope/transfer-ownership', { ownerType: 'employee', ownerRef: S(ENTRA.bob) })).status).toBe(404);
    });
  });

  describe('issues, summary, openapi', () => {
    it('issues and the summary buckets', async () => {
      const t = 'sumco';
      await seedEmployee(gov.store.db, { tenant: t, ext: 'ann', department: 'Sales' });
      await seedEmployee(gov.store.db, { tenant: t, ext: 'ned', department: null });
      await seedEmployee(gov.store.db, { tenant: t, ext: 'old', active: false });
      await seedGroup(gov.store.db, t, 'squad', ['ann']);
      await seedEmployee(gov.store.db, { tenant: t, ext: 'ann', department: 'Sales', groups: ['squad'] });
      const sp = subjectOf(t, 'ann');
      await seedAgent(gov.store.db, t, { agentName: 's-healthy', ownerRef: subjectOf(t, 'ann'), businessSponsor: sp });
      await seedAgent(gov.store.db, t, { agentName: 's-incomplete', ownerRef: subjectOf(t, 'ann'), businessSponsor: null });
      await seedAgent(gov.store.db, t, { agentName: 's-noDept', ownerRef: subjectOf(t, 'ned'), businessSponsor: sp, status: 'suspended' });
      await seedAgent(gov.store.db, t, { agentName: 's-inactive', ownerRef: subjectOf(t, 'old'), businessSponsor: sp, status: 'draft' });
      await seedAgent(gov.store.db, t, { agentName: 's-ghost', ownerRef: subjectOf(t, 'ghost'), businessSponsor: sp, status: 'quarantined' });
      await seedAgent(gov.store.db, t, { agentName: 's-team', ownerType: 'team', ownerRef: `${t}:squad`, businessSponsor: sp, status: 'approved' });
      await seedAgent(gov.store.db, t, { agentName: 's-retired', ownerRef: subjectOf(t, 'ghost'), status: 'retired' });

      // Agents known to the identity authority (SPEC 2.5) without a governed record are ungoverned.
      const idAgent = (name: string) => ({
        tenantId: t,
        name,
        role: 'worker',
        capabilities: [],
        createdAt: '2026-03-01T09:00:00Z',
        updatedAt: '2026-03-01T09:00:00Z',
      });
      await gov.store.db.insert(identityAgents).values([idAgent('shadow-1'), idAgent('s-healthy')]);
      const issues = (await gov.api.get(`/v1/governance/issues?tenant=${t}`)).body;
      expect(issues.map((i: { agent_name: string; type: string; status: string }) => `${i.agent_name}:${i.type}:${i.status}`).sort()).toEqual(
        ['s-ghost:owner_missing:quarantined', 's-inactive:owner_inactive:draft', 's-incomplete:incomplete_active:active'].sort(),
      );
      const s = (await gov.api.get(`/v1/governance/summary?tenant=${t}`)).body;
      expect(s.tenant_id).toBe(t);
      expect(s.totals).toMatchObject({ governed: 6, retired: 1, ungoverned: 1 });
      expect(s.totals.by_status).toMatchObject({ active: 2, suspended: 1, draft: 1, quarantined: 1, approved: 1, retired: 1 });
      expect(s.posture).toEqual({ owner_inactive: 2, blocked: 2, active_healthy: 1, other: 1 });
      const owners = Object.fromEntries(s.by_owner.map((o: { key: string; agents: number }) => [o.key, o.agents]));
      expect(owners).toEqual({ [subjectOf(t, 'ann')]: 2, [subjectOf(t, 'ned')]: 1, [subjectOf(t, 'old')]: 1, '(unattributed)': 1, '(team-owned)': 1 });
      const depts = Object.fromEntries(s.by_department.map((o: { key: string; agents: number }) => [o.key, o.agents]));
      expect(depts).toEqual({ Sales: 2, '(unassigned)': 1, Engineering: 1, '(unattributed)': 1, '(team-owned)': 1 });
      const all = (await gov.api.get('/v1/governance/summary')).body;
      expect(all.tenant_id).toBeNull();
      expect(all.totals.governed).toBeGreaterThan(s.totals.governed);
    });

    it('serves every governance route in /openapi.json', async () => {
      const doc = (await gov.api.get('/openapi.json')).body;
      for (const p of [
        '/v1/governance/agents',
        '/v1/governance/agents/{name}',
        '/v1/governance/agents/{name}/transition',
        '/v1/governance/agents/{name}/transfer-ownership',
        '/v1/governance/issues',
        '/v1/governance/summary',
        '/v1/authority/delegations',
        '/v1/authority/delegations/{id}',
        '/v1/authority/delegations/{id}/usable',
        '/v1/authority/delegations/{id}/revoke',
        '/v1/revocation/cascade',
        '/v1/revocation/log',
      ]) {
        expect(doc.paths[p], p).toBeDefined();
      }
      expect(doc.components.schemas.GovernedAgentRegister.properties.ownerType.enum).toEqual(['employee', 'team', 'service_account_owner_group']);
      expect(doc.components.schemas.AuthorityDelegationGrant.required).toEqual(expect.arrayContaining(['tenantId', 'agentId', 'action', 'resource']));
      expect(doc.paths['/v1/governance/agents/{name}/transition'].post.responses['409']).toBeDefined();
    });
  });
});
