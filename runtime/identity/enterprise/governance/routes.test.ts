/**
 * Governance over real HTTP (127.0.0.1, ephemeral port) on PGlite and Postgres: governed agents,
 * every lifecycle pair, the activation gate, ownership transfer, issues and summary, authority
 * delegations (every basis and denial), revoke, every cascade reason over the cascade route, and
 * the directory sync running the cascade in its own transaction.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../../store/factory.js';
import { testBackends } from '../../../store/testing.js';
import { ENTRA, entraSnapshot, entraUser } from '../directory/fixtures.js';
import { syncDirectory } from '../directory/sync.js';
import { runCascade } from './cascade.js';
import { AGENT_STATUSES, TRANSITIONS, type AgentStatus } from './model.js';
import { agents as identityAgents } from '../../../store/schema/identity.js';
import { governanceRepo } from './repo.js';
import { deleteEmployee, seedAgent, seedDelegation, seedEmployee, seedGroup, serveEnterprise, setEmployee, subjectOf } from './testkit.js';

const T = 'contoso';
const S = (oid: string) => `idp_a:${T}:${oid}`;
const enc = encodeURIComponent;
const T0 = Date.parse('2026-03-01T09:00:00.000Z');

describe.each(testBackends())('governance routes on $name', (b) => {
  let store: Store;
  let api: Awaited<ReturnType<typeof serveEnterprise>>;
  let clock = T0;

  beforeAll(async () => {
    store = await b.open();
    api = await serveEnterprise(store, () => clock);
    const r = await api.post('/v1/directory/sync', { tenantId: T, ...entraSnapshot() });
    expect(r.status).toBe(200);
    await seedEmployee(store.db, { tenant: 'fabrikam', ext: 'fab1' });
    await seedGroup(store.db, 'fabrikam', 'fabgrp', ['fab1']);
  });
  afterAll(async () => {
    await api?.close();
    await store?.close();
  });

  const register = (o: Record<string, unknown>) =>
    api.post('/v1/governance/agents', {
      tenantId: T,
      ownerType: 'employee',
      ownerRef: S(ENTRA.alice),
      businessSponsor: S(ENTRA.engMgr),
      riskTier: 'medium',
      approvedRuntime: 'doks_prod',
      createdBy: 'alice@contoso.com',
      ...o,
    });
  const move = (name: string, status: string, by = 'reviewer') => api.post(`/v1/governance/agents/${enc(name)}/transition`, { status, by });
  const activeAgent = async (name: string, o: Record<string, unknown> = {}) => {
    expect((await register({ agentName: name, ...o })).status).toBe(201);
    for (const s of ['pending_approval', 'approved', 'active']) expect((await move(name, s)).status).toBe(200);
  };

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
      const got = await api.get('/v1/governance/agents/reporter');
      expect(got).toEqual({ status: 200, body: r.body });
      expect((await api.get(`/v1/governance/agents/reporter?tenant=fabrikam`)).status).toBe(404);
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
      expect((await api.get('/v1/governance/agents/bad-team')).status).toBe(404);
      const team = await register({ agentName: 'team-bot', ownerType: 'team', ownerRef: ENTRA.gFin });
      expect(team.status).toBe(201);
      expect(team.body).toMatchObject({ owner_ref: `${T}:${ENTRA.gFin}`, owner_display: 'Finance', owner_ok: true, owner_active: true });
    });

    it('names are unique across tenants: concurrent registrations in two tenants yield one 201 and one 409', async () => {
      const [x, y] = await Promise.all([
        register({ agentName: 'raced' }),
        api.post('/v1/governance/agents', { agentName: 'raced', tenantId: 'fabrikam', ownerType: 'employee', ownerRef: subjectOf('fabrikam', 'fab1') }),
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
        const r = await api.post('/v1/governance/agents', body);
        expect(r.status).toBe(422);
        expect(r.body.detail[0]).toMatchObject({ loc: expect.any(Array), msg: expect.any(String), type: expect.any(String) });
      }
      expect((await register({ agentName: 'rt', riskTier: 'extreme' })).status).toBe(422);
      for (const p of ['/v1/governance/agents/nope', '/v1/authority/delegations/nope', '/v1/authority/delegations/nope/usable']) {
        const r = await api.get(p);
        expect(r.status).toBe(404);
        expect(r.body.error.code).toBe('not_found');
      }
      expect((await move('nope', 'active')).status).toBe(404);
      expect((await api.post('/v1/authority/delegations/nope/revoke', {})).status).toBe(404);
      expect((await api.get('/v1/governance/agents?status=bogus')).status).toBe(422);
    });

    const pairs = AGENT_STATUSES.flatMap((from) => AGENT_STATUSES.map((to) => ({ from, to, ok: TRANSITIONS[from].includes(to) })));
    it.each(pairs)('transition $from -> $to: allowed=$ok', async ({ from, to, ok }) => {
      const name = `tr-${from}-${to}`;
      await seedAgent(store.db, T, { agentName: name, ownerRef: S(ENTRA.cto), businessSponsor: S(ENTRA.engMgr), status: from as AgentStatus });
      const r = await move(name, to);
      if (ok) {
        expect(r.status).toBe(200);
        expect(r.body.status).toBe(to);
        expect(r.body.history.at(-1)).toMatchObject({ action: 'transition', by: 'reviewer', detail: `${from} -> ${to}` });
      } else {
        expect(r.status).toBe(409);
        expect(r.body.error).toMatchObject({ code: 'bad_transition', from, to, allowed: [...TRANSITIONS[from]] });
        expect((await api.get(`/v1/governance/agents/${name}`)).body.status).toBe(from);
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
      await seedAgent(store.db, T, { agentName: 'gated-owner-gone', ownerRef: S(ENTRA.dave), businessSponsor: S(ENTRA.cto), status: 'suspended' });
      expect((await move('gated-owner-gone', 'active')).body.error).toMatchObject({ code: 'activation_blocked', blockers: ['owner_inactive'] });
      await activeAgent('gated-ok');
      expect((await api.get('/v1/governance/agents/gated-ok')).body.status).toBe('active');
    });

    it('transfer-ownership: new owner must resolve in the tenant and be active', async () => {
      const to = (ownerType: string, ownerRef: string) => api.post('/v1/governance/agents/reporter/transfer-ownership', { ownerType, ownerRef, by: 'erin' });
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
      expect((await api.post('/v1/governance/agents/nope/transfer-ownership', { ownerType: 'employee', ownerRef: S(ENTRA.bob) })).status).toBe(404);
    });
  });

  describe('authority delegations', () => {
    const grant = (o: Record<string, unknown>) =>
      api.post('/v1/authority/delegations', { tenantId: T, agentId: 'alice-agent', action: 'read', resource: 'crm/accounts/*', ...o });

    beforeAll(async () => {
      await activeAgent('alice-agent');
      await activeAgent('team-agent', { ownerType: 'team', ownerRef: `${T}:${ENTRA.gFin}` });
      await register({ agentName: 'draft-agent' });
      await activeAgent('susp-agent');
      expect((await move('susp-agent', 'suspended')).status).toBe(200);
    });

    it.each([
      { who: 'the owner', o: { approverRef: S(ENTRA.alice) }, basis: 'agent_owner' },
      { who: 'the direct manager (by email)', o: { grantedBy: 'erin@contoso.com', requesterRef: S(ENTRA.alice) }, basis: 'owner_manager_chain' },
      { who: 'the skip-level manager', o: { approverRef: S(ENTRA.cto) }, basis: 'owner_manager_chain' },
      { who: 'a required-group member', o: { approverRef: S(ENTRA.bob), requiredGroup: ENTRA.gEng }, basis: 'required_group_member' },
      { who: 'an owning-team member', o: { agentId: 'team-agent', approverRef: S(ENTRA.carol) }, basis: 'owning_team_member' },
    ])('grant by $who: basis $basis, active, valid, time-boxed', async ({ o, basis }) => {
      const r = await grant({ ...o, taskId: 'T-1', taskDescription: 'quarterly report', resourceType: 'crm', expiresInSeconds: 600 });
      expect(r.status).toBe(201);
      expect(r.body).toMatchObject({
        tenant_id: T,
        status: 'active',
        vc_status: 'valid',
        authority_basis: basis,
        break_glass: false,
        action: 'read',
        resource: 'crm/accounts/*',
        task_id: 'T-1',
        resource_type: 'crm',
        expires_at: T0 / 1000 + 600,
        approved_at: '2026-03-01T09:00:00.000Z',
        revoked_at: null,
        revocation_reason: null,
      });
      expect(r.body.authority_evidence).toMatchObject({ basis, break_glass: false });
      expect(r.body.policy_decision).toMatchObject({ decision: 'allow' });
      expect(r.body.history.map((h: { action: string }) => h.action)).toEqual(['requested', 'granted']);
      expect(await api.get(`/v1/authority/delegations/${r.body.delegation_id}/usable`)).toEqual({
        status: 200,
        body: { usable: true, status: 'active', reason: null },
      });
    });

    it('records the manager chain as evidence and defaults the lifetime to 24 h', async () => {
      const r = await grant({ approverRef: S(ENTRA.cto) });
      expect(r.body.granted_by).toBe(S(ENTRA.cto));
      expect(r.body.requester_ref).toBe(S(ENTRA.cto));
      expect(r.body.authority_evidence).toMatchObject({ manager_level: 2, manager_chain: [S(ENTRA.engMgr), S(ENTRA.cto)] });
      expect(r.body.expires_at).toBe(T0 / 1000 + 86400);
    });

    it('break-glass: an unauthorised but active approver is granted, capped at 1 h, recorded in history and evidence', async () => {
      const r = await grant({ approverRef: S(ENTRA.finMgr), breakGlass: true, expiresInSeconds: 86400 });
      expect(r.status).toBe(201);
      expect(r.body).toMatchObject({ authority_basis: 'break_glass', break_glass: true, expires_at: T0 / 1000 + 3600 });
      expect(r.body.authority_evidence).toMatchObject({ break_glass: true, basis: 'break_glass', ttl_capped_at: 3600 });
      expect(r.body.history.at(-1)).toMatchObject({ action: 'break_glass', by: S(ENTRA.finMgr) });
    });

    it.each([
      { why: 'a peer without authority', o: { approverRef: S(ENTRA.bob) }, status: 403, code: 'approver_lacks_authority' },
      { why: 'an inactive approver', o: { approverRef: S(ENTRA.dave), breakGlass: true }, status: 403, code: 'approver_inactive' },
      { why: 'an unknown approver', o: { approverRef: 'ghost@contoso.com' }, status: 403, code: 'approver_unknown' },
      { why: 'a cross-tenant approver', o: { approverRef: subjectOf('fabrikam', 'fab1'), breakGlass: true }, status: 403, code: 'cross_tenant_reference' },
      { why: 'an inactive requester', o: { approverRef: S(ENTRA.alice), requesterRef: S(ENTRA.dave) }, status: 403, code: 'requester_inactive' },
      {
        why: 'a cross-tenant requester',
        o: { approverRef: S(ENTRA.alice), requesterRef: subjectOf('fabrikam', 'fab1') },
        status: 403,
        code: 'cross_tenant_reference',
      },
      {
        why: 'an approver outside the required group',
        o: { approverRef: S(ENTRA.alice), requiredGroup: ENTRA.gFin },
        status: 403,
        code: 'approver_not_in_required_group',
      },
      { why: 'an unknown required group', o: { approverRef: S(ENTRA.alice), requiredGroup: 'fabrikam:fabgrp' }, status: 403, code: 'required_group_unknown' },
      {
        why: 'a suspended agent, even break-glass by its owner',
        o: { agentId: 'susp-agent', approverRef: S(ENTRA.alice), breakGlass: true },
        status: 403,
        code: 'agent_suspended',
      },
      { why: 'a draft agent', o: { agentId: 'draft-agent', approverRef: S(ENTRA.alice) }, status: 403, code: 'agent_not_grantable' },
      { why: 'an agent of another tenant', o: { tenantId: 'fabrikam', approverRef: subjectOf('fabrikam', 'fab1') }, status: 404, code: 'not_found' },
      { why: 'approverRef and grantedBy disagreeing', o: { approverRef: S(ENTRA.alice), grantedBy: S(ENTRA.cto) }, status: 400, code: 'ambiguous_approver' },
    ])('denies $why ($code), storing nothing', async ({ o, status, code }) => {
      const before = (await api.get('/v1/authority/delegations')).body.length;
      const r = await grant(o);
      expect(r.status).toBe(status);
      expect(r.body.error.code).toBe(code);
      if (status === 403) expect(r.body.error.policy_decision).toMatchObject({ decision: 'deny', code });
      expect((await api.get('/v1/authority/delegations')).body.length).toBe(before);
    });

    it('rejects a body without approver or required fields with 422', async () => {
      expect((await api.post('/v1/authority/delegations', { tenantId: T, agentId: 'alice-agent', action: 'read', resource: 'x' })).status).toBe(422);
      expect((await grant({ approverRef: S(ENTRA.alice), resource: undefined })).status).toBe(422);
      expect((await grant({ approverRef: S(ENTRA.alice), expiresInSeconds: 0 })).status).toBe(422);
      const noApprover = await grant({});
      expect(noApprover.status).toBe(422);
      expect(noApprover.body.detail[0].loc).toEqual(['body', 'approverRef']);
    });

    it('lists newest first with filters; revoke with a reason; 409 once not live; log row', async () => {
      clock += 1000;
      const first = (await grant({ approverRef: S(ENTRA.alice), action: 'write' })).body;
      clock += 1000;
      const second = (await grant({ approverRef: S(ENTRA.alice), action: 'delete' })).body;
      const list = (await api.get(`/v1/authority/delegations?tenant=${T}&agent=alice-agent`)).body;
      expect(list[0].delegation_id).toBe(second.delegation_id);
      expect(list[1].delegation_id).toBe(first.delegation_id);
      expect((await api.get(`/v1/authority/delegations?agent=team-agent`)).body.every((d: { agent_id: string }) => d.agent_id === 'team-agent')).toBe(true);
      expect((await api.get(`/v1/authority/delegations/${first.delegation_id}?tenant=fabrikam`)).status).toBe(404);
      expect((await api.get(`/v1/authority/delegations/${first.delegation_id}`)).body).toEqual(first);

      expect((await api.post(`/v1/authority/delegations/${first.delegation_id}/revoke`, { reason: 'not_a_reason' })).status).toBe(422);
      // A tenant guard naming another tenant cannot reach this tenant's records (404, nothing changes).
      expect((await api.post(`/v1/authority/delegations/${first.delegation_id}/revoke?tenant=fabrikam`, {})).status).toBe(404);
      expect((await api.post('/v1/governance/agents/alice-agent/transition?tenant=fabrikam', { status: 'retired' })).status).toBe(404);
      expect(
        (await api.post('/v1/governance/agents/alice-agent/transfer-ownership?tenant=fabrikam', { ownerType: 'employee', ownerRef: S(ENTRA.bob) })).status,
      ).toBe(404);
      expect((await api.get('/v1/governance/agents/alice-agent')).body).toMatchObject({ status: 'active', owner_ref: S(ENTRA.alice) });
      const r = await api.post(`/v1/authority/delegations/${first.delegation_id}/revoke`, { reason: 'owner_transferred', by: 'erin' });
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ status: 'revoked', vc_status: 'revoked', revocation_reason: 'owner_transferred', revoked_at: expect.any(String) });
      expect(r.body.history.at(-1)).toMatchObject({ action: 'revoke', by: 'erin', detail: 'owner_transferred' });
      expect((await api.get(`/v1/authority/delegations/${first.delegation_id}/usable`)).body).toEqual({
        usable: false,
        status: 'revoked',
        reason: 'owner_transferred',
      });
      const again = await api.post(`/v1/authority/delegations/${first.delegation_id}/revoke`);
      expect(again.status).toBe(409);
      expect(again.body.error.code).toBe('not_live');
      // An empty body with a JSON content type is an empty revoke request, not a decode error.
      const dflt = {
        body: (await (
          await fetch(`${api.base}/v1/authority/delegations/${second.delegation_id}/revoke`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
          })
        ).json()) as any,
      };
      expect(dflt.body.revocation_reason).toBe('manual_admin_revocation');
      const log = (await api.get(`/v1/revocation/log?tenant=${T}`)).body;
      expect(log[0]).toMatchObject({
        kind: 'delegation_revoke',
        reason_code: 'manual_admin_revocation',
        delegation_id: second.delegation_id,
        source: 'admin',
        by: 'admin',
      });
      expect(log[1]).toMatchObject({ kind: 'delegation_revoke', reason_code: 'owner_transferred', delegation_id: first.delegation_id, by: 'erin' });
      expect((await api.get(`/v1/authority/delegations?tenant=${T}&status=revoked`)).body.length).toBeGreaterThanOrEqual(2);
    });

    it('usable is false once expired, and for a non-active agent', async () => {
      const d = (await grant({ approverRef: S(ENTRA.alice), expiresInSeconds: 60 })).body;
      clock += 61_000;
      expect((await api.get(`/v1/authority/delegations/${d.delegation_id}/usable`)).body).toEqual({
        usable: false,
        status: 'active',
        reason: 'delegation_expired',
      });
      // An approved (not yet active) agent can hold a usable delegation; a suspended one cannot,
      // even if a live row slipped past the cascade (written here straight to the store).
      await register({ agentName: 'approved-only' });
      for (const st of ['pending_approval', 'approved']) await move('approved-only', st);
      const pre = (await grant({ agentId: 'approved-only', approverRef: S(ENTRA.alice) })).body;
      expect((await api.get(`/v1/authority/delegations/${pre.delegation_id}/usable`)).body.usable).toBe(true);
      await seedDelegation(store.db, T, { delegationId: 'slipped', agentId: 'susp-agent', grantedBy: S(ENTRA.alice), expiresAt: null });
      expect((await api.get('/v1/authority/delegations/slipped/usable')).body).toEqual({ usable: false, status: 'active', reason: 'agent_suspended' });
      expect((await api.post(`/v1/revocation/cascade?tenant=${T}`)).body.by_reason.agent_inactive).toBeGreaterThanOrEqual(1);
      expect((await api.get('/v1/authority/delegations/slipped')).body).toMatchObject({ status: 'invalidated', revocation_reason: 'agent_inactive' });
    });

    it("a manual suspend invalidates the agent's live delegations (agent_inactive)", async () => {
      await activeAgent('to-suspend');
      const d = (await grant({ agentId: 'to-suspend', approverRef: S(ENTRA.alice) })).body;
      expect((await move('to-suspend', 'suspended', 'secops')).status).toBe(200);
      expect((await api.get(`/v1/authority/delegations/${d.delegation_id}`)).body).toMatchObject({
        status: 'invalidated',
        vc_status: 'revoked',
        revocation_reason: 'agent_inactive',
      });
      const log = (await api.get(`/v1/revocation/log?tenant=${T}`)).body;
      expect(log[0]).toMatchObject({ kind: 'delegation_invalidate', reason_code: 'agent_inactive', agent_id: 'to-suspend', source: 'admin', by: 'secops' });
    });
  });

  describe('revocation cascade over HTTP: every reason code', () => {
    const nowSec = () => Math.floor(clock / 1000);
    const CASES: {
      reason: string;
      change: (t: string) => Promise<void>;
      d?: { expired?: boolean; grantor?: string; group?: string };
      agent: string;
      dstatus: string;
      kinds: string[];
    }[] = [
      {
        reason: 'owner_inactive',
        change: (t) => setEmployee(store.db, t, 'own', { active: false }),
        agent: 'suspended',
        dstatus: 'revoked',
        kinds: ['agent_suspend', 'delegation_revoke'],
      },
      {
        reason: 'owner_missing',
        change: (t) => deleteEmployee(store.db, t, 'own'),
        agent: 'quarantined',
        dstatus: 'revoked',
        kinds: ['agent_quarantine', 'delegation_revoke'],
      },
      {
        reason: 'sponsor_inactive',
        change: (t) => setEmployee(store.db, t, 'spn', { active: false }),
        agent: 'suspended',
        dstatus: 'invalidated',
        kinds: ['agent_suspend', 'delegation_invalidate'],
      },
      { reason: 'delegation_expired', change: async () => {}, d: { expired: true }, agent: 'active', dstatus: 'expired', kinds: ['delegation_expire'] },
      {
        reason: 'delegation_grantor_lost_authority',
        change: (t) => setEmployee(store.db, t, 'mgr', { active: false }),
        d: { grantor: 'mgr' },
        agent: 'active',
        dstatus: 'invalidated',
        kinds: ['delegation_invalidate'],
      },
      {
        reason: 'group_removed',
        change: (t) => setEmployee(store.db, t, 'own', { groups: [] }),
        d: { group: 'ops' },
        agent: 'active',
        dstatus: 'invalidated',
        kinds: ['delegation_invalidate'],
      },
      {
        reason: 'agent_inactive',
        change: async (t) => void (await governanceRepo(store.db, t).updateAgent(`agent-${t}`, { status: 'retired' }, [])),
        agent: 'retired',
        dstatus: 'invalidated',
        kinds: ['delegation_invalidate'],
      },
    ];
    it.each(CASES.map((c, i) => ({ ...c, t: `cx${i}` })))('$reason', async (c) => {
      const { t } = c;
      await seedEmployee(store.db, { tenant: t, ext: 'mgr' });
      await seedEmployee(store.db, { tenant: t, ext: 'own', manager: 'mgr', groups: ['ops'] });
      await seedEmployee(store.db, { tenant: t, ext: 'spn' });
      await seedGroup(store.db, t, 'ops', ['own']);
      await seedAgent(store.db, t, { agentName: `agent-${t}`, ownerRef: subjectOf(t, 'own'), businessSponsor: subjectOf(t, 'spn') });
      await seedDelegation(store.db, t, {
        delegationId: `del-${t}`,
        agentId: `agent-${t}`,
        grantedBy: subjectOf(t, c.d?.grantor ?? 'own'),
        requiredGroup: c.d?.group ? `${t}:${c.d.group}` : null,
        expiresAt: c.d?.expired ? nowSec() - 1 : nowSec() + 3600,
      });
      await c.change(t);
      const r = await api.post(`/v1/revocation/cascade?tenant=${t}&by=oncall`);
      expect(r.status).toBe(200);
      expect(r.body.by_reason[c.reason]).toBeGreaterThanOrEqual(1);
      expect((await api.get(`/v1/governance/agents/agent-${t}`)).body.status).toBe(c.agent);
      const d = (await api.get(`/v1/authority/delegations/del-${t}`)).body;
      expect(d.status).toBe(c.dstatus);
      expect((await api.get(`/v1/authority/delegations/del-${t}/usable`)).body.usable).toBe(false);
      const log = (await api.get(`/v1/revocation/log?tenant=${t}`)).body;
      expect(log.map((x: { kind: string }) => x.kind).sort()).toEqual([...c.kinds].sort());
      expect(log.every((x: { source: string; by: string; tenant_id: string }) => x.source === 'admin' && x.by === 'oncall' && x.tenant_id === t)).toBe(true);
      // Nothing else to do: a second run moves nothing.
      expect((await api.post(`/v1/revocation/cascade?tenant=${t}`)).body).toMatchObject({
        agents_suspended: 0,
        delegations_revoked: 0,
        delegations_invalidated: 0,
        delegations_expired: 0,
        by_reason: {},
      });
    });
  });

  describe('directory sync runs the cascade in its transaction (source auto)', () => {
    it('a sync that fails after its cascade rolls the cascade back with it', async () => {
      const t = 'rollco';
      const users = [entraUser({ oid: 'o1', upn: 'o1@r.example', given: 'O', family: 'One' })];
      await syncDirectory({ db: store.db, now: () => clock }, { tenantId: t, idp: 'idp_a', mode: 'snapshot', users });
      await seedAgent(store.db, t, { agentName: 'roll-agent', ownerRef: `idp_a:${t}:o1` });
      await seedDelegation(store.db, t, { delegationId: 'roll-del', agentId: 'roll-agent', grantedBy: `idp_a:${t}:o1`, expiresAt: null });
      const off = [entraUser({ oid: 'o1', upn: 'o1@r.example', given: 'O', family: 'One', active: false })];
      const failing = {
        db: store.db,
        now: () => clock,
        cascade: runCascade,
        failpoint: (st: string) => {
          if (st === 'run') throw new Error('disk full');
        },
      };
      await expect(syncDirectory(failing, { tenantId: t, idp: 'idp_a', mode: 'snapshot', users: off })).rejects.toThrow('disk full');
      expect((await api.get('/v1/governance/agents/roll-agent')).body).toMatchObject({ status: 'active', owner_active: true });
      expect((await api.get('/v1/authority/delegations/roll-del')).body.status).toBe('active');
      expect((await api.get(`/v1/revocation/log?tenant=${t}`)).body).toEqual([]);
      const ok = await api.post('/v1/directory/sync', { tenantId: t, users: off });
      expect(ok.body.cascade).toMatchObject({ agents_suspended: 1, delegations_revoked: 1, by_reason: { owner_inactive: 2 } });
    });

    it('deactivating an owner suspends their agent, revokes its delegations and invalidates delegations they granted', async () => {
      await activeAgent('bob-agent', { ownerRef: S(ENTRA.bob) });
      await activeAgent('erin-agent', { ownerRef: S(ENTRA.engMgr), businessSponsor: S(ENTRA.cto) });
      const own = (
        await api.post('/v1/authority/delegations', { tenantId: T, agentId: 'bob-agent', approverRef: S(ENTRA.bob), action: 'read', resource: 'wiki/*' })
      ).body;
      const viaMgr = (
        await api.post('/v1/authority/delegations', { tenantId: T, agentId: 'bob-agent', approverRef: S(ENTRA.engMgr), action: 'read', resource: 'jira/*' })
      ).body;
      const granted = (
        await api.post('/v1/authority/delegations', {
          tenantId: T,
          agentId: 'erin-agent',
          approverRef: S(ENTRA.cto),
          requesterRef: S(ENTRA.bob),
          action: 'read',
          resource: 'hr/*',
        })
      ).body;
      const underGroup = (
        await api.post('/v1/authority/delegations', {
          tenantId: 'contoso',
          agentId: 'erin-agent',
          approverRef: S(ENTRA.engMgr),
          requiredGroup: ENTRA.gEng,
          action: 'x',
          resource: 'y',
        })
      ).body;
      expect([own, viaMgr, granted, underGroup].every((d) => d.status === 'active')).toBe(true);

      clock += 60_000;
      const snap = entraSnapshot();
      const bob = snap.users.find((u) => u.externalId === ENTRA.bob)!;
      bob.active = false;
      const r = await api.post('/v1/directory/sync', { tenantId: T, ...snap });
      expect(r.status).toBe(200);
      expect(r.body.counts.users_deactivated).toBe(1);
      expect(r.body.cascade).toMatchObject({ agents_suspended: 1, agents_quarantined: 0, delegations_revoked: 2 });
      expect(r.body.cascade.by_reason.owner_inactive).toBe(3);
      // Bob approved a required-group grant on alice-agent earlier: he lost the authority behind it.
      expect(r.body.cascade.by_reason.delegation_grantor_lost_authority).toBeGreaterThanOrEqual(1);
      expect((await api.get('/v1/governance/agents/bob-agent')).body).toMatchObject({ status: 'suspended', owner_active: false });
      expect((await api.get('/v1/governance/agents/bob-agent')).body.history.at(-1)).toMatchObject({ action: 'cascade_suspend', by: 'directory-sync' });
      for (const d of [own, viaMgr]) {
        expect((await api.get(`/v1/authority/delegations/${d.delegation_id}`)).body).toMatchObject({ status: 'revoked', revocation_reason: 'owner_inactive' });
      }
      // Bob only requested `granted`; the granter (the CTO) is still active, so it stands.
      expect((await api.get(`/v1/authority/delegations/${granted.delegation_id}`)).body.status).toBe('active');
      const runs = (await api.get(`/v1/directory/syncs?tenant=${T}`)).body;
      expect(runs[0].cascade).toEqual(r.body.cascade);
      const log = (await api.get(`/v1/revocation/log?tenant=${T}`)).body;
      expect(log[0]).toMatchObject({ source: 'auto', by: 'directory-sync' });
      // Erin leaves the approver group: the delegation she granted under it is invalidated.
      clock += 60_000;
      const snap2 = entraSnapshot();
      snap2.users.find((u) => u.externalId === ENTRA.bob)!.active = false;
      const eng = snap2.groups.find((g) => g.externalId === ENTRA.gEng)!;
      eng.members = (eng.members as { value: string }[]).filter((m) => m.value !== ENTRA.engMgr);
      const r2 = await api.post('/v1/directory/sync', { tenantId: T, ...snap2 });
      expect(r2.body.cascade).toMatchObject({ delegations_invalidated: 1, by_reason: { group_removed: 1 } });
      expect((await api.get(`/v1/authority/delegations/${underGroup.delegation_id}`)).body).toMatchObject({
        status: 'invalidated',
        revocation_reason: 'group_removed',
      });
    });
  });

  describe('issues, summary, openapi', () => {
    it('issues and the summary buckets', async () => {
      const t = 'sumco';
      await seedEmployee(store.db, { tenant: t, ext: 'ann', department: 'Sales' });
      await seedEmployee(store.db, { tenant: t, ext: 'ned', department: null });
      await seedEmployee(store.db, { tenant: t, ext: 'old', active: false });
      await seedGroup(store.db, t, 'squad', ['ann']);
      await seedEmployee(store.db, { tenant: t, ext: 'ann', department: 'Sales', groups: ['squad'] });
      const sp = subjectOf(t, 'ann');
      await seedAgent(store.db, t, { agentName: 's-healthy', ownerRef: subjectOf(t, 'ann'), businessSponsor: sp });
      await seedAgent(store.db, t, { agentName: 's-incomplete', ownerRef: subjectOf(t, 'ann'), businessSponsor: null });
      await seedAgent(store.db, t, { agentName: 's-noDept', ownerRef: subjectOf(t, 'ned'), businessSponsor: sp, status: 'suspended' });
      await seedAgent(store.db, t, { agentName: 's-inactive', ownerRef: subjectOf(t, 'old'), businessSponsor: sp, status: 'draft' });
      await seedAgent(store.db, t, { agentName: 's-ghost', ownerRef: subjectOf(t, 'ghost'), businessSponsor: sp, status: 'quarantined' });
      await seedAgent(store.db, t, { agentName: 's-team', ownerType: 'team', ownerRef: `${t}:squad`, businessSponsor: sp, status: 'approved' });
      await seedAgent(store.db, t, { agentName: 's-retired', ownerRef: subjectOf(t, 'ghost'), status: 'retired' });

      // Agents known to the identity authority (SPEC 2.5) without a governed record are ungoverned.
      const idAgent = (name: string) => ({
        tenantId: t,
        name,
        role: 'worker',
        capabilities: [],
        createdAt: '2026-03-01T09:00:00Z',
        updatedAt: '2026-03-01T09:00:00Z',
      });
      await store.db.insert(identityAgents).values([idAgent('shadow-1'), idAgent('s-healthy')]);
      const issues = (await api.get(`/v1/governance/issues?tenant=${t}`)).body;
      expect(issues.map((i: { agent_name: string; type: string; status: string }) => `${i.agent_name}:${i.type}:${i.status}`).sort()).toEqual(
        ['s-ghost:owner_missing:quarantined', 's-inactive:owner_inactive:draft', 's-incomplete:incomplete_active:active'].sort(),
      );
      const s = (await api.get(`/v1/governance/summary?tenant=${t}`)).body;
      expect(s.tenant_id).toBe(t);
      expect(s.totals).toMatchObject({ governed: 6, retired: 1, ungoverned: 1 });
      expect(s.totals.by_status).toMatchObject({ active: 2, suspended: 1, draft: 1, quarantined: 1, approved: 1, retired: 1 });
      expect(s.posture).toEqual({ owner_inactive: 2, blocked: 2, active_healthy: 1, other: 1 });
      const owners = Object.fromEntries(s.by_owner.map((o: { key: string; agents: number }) => [o.key, o.agents]));
      expect(owners).toEqual({ [subjectOf(t, 'ann')]: 2, [subjectOf(t, 'ned')]: 1, [subjectOf(t, 'old')]: 1, '(unattributed)': 1, '(team-owned)': 1 });
      const depts = Object.fromEntries(s.by_department.map((o: { key: string; agents: number }) => [o.key, o.agents]));
      expect(depts).toEqual({ Sales: 2, '(unassigned)': 1, Engineering: 1, '(unattributed)': 1, '(team-owned)': 1 });
      const all = (await api.get('/v1/governance/summary')).body;
      expect(all.tenant_id).toBeNull();
      expect(all.totals.governed).toBeGreaterThan(s.totals.governed);
    });

    it('serves every governance route in /openapi.json', async () => {
      const doc = (await api.get('/openapi.json')).body;
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
