/**
 * Authority delegations over real HTTP (127.0.0.1, ephemeral port) on PGlite and Postgres: every
 * grant basis and denial, break-glass, revoke/usable/log, and the directory sync running the
 * cascade in its own transaction (which invalidates grants made here, so the two share a suite).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { testBackends } from '../../../store/testing.js';
import { ENTRA, entraSnapshot, entraUser } from '../directory/fixtures.js';
import { syncDirectory } from '../directory/sync.js';
import { runCascade } from './cascade.js';
import { grantDelegation } from './delegations.js';
import { governedAgentCalls, S, T, T0, useGovernance } from './routes-testing.js';
import { seedAgent, seedDelegation, subjectOf } from './testkit.js';

describe.each(testBackends())('governance routes on $name', (b) => {
  const gov = useGovernance(b);

  const { register, move, activeAgent } = governedAgentCalls(() => gov.api);

  describe('authority delegations', () => {
    const grant = (o: Record<string, unknown>) =>
      gov.api.post('/v1/authority/delegations', { tenantId: T, agentId: 'alice-agent', action: 'read', resource: 'crm/accounts/*', ...o });

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
      { who: 'the owner, within the required group', o: { approverRef: S(ENTRA.alice), requiredGroup: ENTRA.gEng }, basis: 'agent_owner' },
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
      expect(await gov.api.get(`/v1/authority/delegations/${r.body.delegation_id}/usable`)).toEqual({
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
      // The requester names the group: being in it is no authority over the agent.
      {
        why: 'a member of the required group with no authority over the agent',
        o: { approverRef: S(ENTRA.bob), requiredGroup: ENTRA.gEng },
        status: 403,
        code: 'approver_lacks_authority',
      },
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
      const before = (await gov.api.get('/v1/authority/delegations')).body.length;
      const r = await grant(o);
      expect(r.status).toBe(status);
      expect(r.body.error.code).toBe(code);
      if (status === 403) expect(r.body.error.policy_decision).toMatchObject({ decision: 'deny', code });
      expect((await gov.api.get('/v1/authority/delegations')).body.length).toBe(before);
    });

    it('with auth on: an OIDC caller grants only as itself; a key caller is recorded as asserting the approval', async () => {
      const deps = { db: gov.store.db, now: () => gov.clock };
      const input = { tenantId: T, agentId: 'alice-agent', breakGlass: false, action: 'read', resource: 'crm/leads/*' };
      const bob = { kind: 'oidc' as const, id: `oidc:${ENTRA.bob}`, scopes: new Set(['approvals:decide']) };
      // Bob signed in names Alice (the owner) as the approver: refused, nothing stored.
      const before = (await gov.api.get('/v1/authority/delegations')).body.length;
      await expect(grantDelegation(deps, { ...input, approverRef: S(ENTRA.alice) }, bob)).rejects.toMatchObject({ status: 403, code: 'approver_not_caller' });
      expect((await gov.api.get('/v1/authority/delegations')).body.length).toBe(before);
      // Alice signed in grants as herself.
      const alice = { kind: 'oidc' as const, id: `oidc:${ENTRA.alice}`, scopes: new Set(['approvals:decide']) };
      const own = await grantDelegation(deps, { ...input, approverRef: S(ENTRA.alice) }, alice);
      expect(own).toMatchObject({ granted_by: S(ENTRA.alice), authority_basis: 'agent_owner' });
      expect(own.authority_evidence.asserted_by).toBeUndefined();
      // A key (a system trusted to record approvals) asserts the approver; the record says which key.
      const key = { kind: 'key' as const, id: 'key:itsm', scopes: new Set(['approvals:decide']) };
      const asserted = await grantDelegation(deps, { ...input, approverRef: S(ENTRA.alice) }, key);
      expect(asserted.authority_evidence.asserted_by).toBe('key:itsm');
      expect(asserted.history.find((h) => h.action === 'granted')?.detail).toContain('asserted by key:itsm');
    });

    it('rejects a body without approver or required fields with 422', async () => {
      expect((await gov.api.post('/v1/authority/delegations', { tenantId: T, agentId: 'alice-agent', action: 'read', resource: 'x' })).status).toBe(422);
      expect((await grant({ approverRef: S(ENTRA.alice), resource: undefined })).status).toBe(422);
      expect((await grant({ approverRef: S(ENTRA.alice), expiresInSeconds: 0 })).status).toBe(422);
      const noApprover = await grant({});
      expect(noApprover.status).toBe(422);
      expect(noApprover.body.detail[0].loc).toEqual(['body', 'approverRef']);
    });

    it('lists newest first with filters; revoke with a reason; 409 once not live; log row', async () => {
      gov.clock += 1000;
      const first = (await grant({ approverRef: S(ENTRA.alice), action: 'write' })).body;
      gov.clock += 1000;
      const second = (await grant({ approverRef: S(ENTRA.alice), action: 'delete' })).body;
      const list = (await gov.api.get(`/v1/authority/delegations?tenant=${T}&agent=alice-agent`)).body;
      expect(list[0].delegation_id).toBe(second.delegation_id);
      expect(list[1].delegation_id).toBe(first.delegation_id);
      expect((await gov.api.get(`/v1/authority/delegations?agent=team-agent`)).body.every((d: { agent_id: string }) => d.agent_id === 'team-agent')).toBe(true);
      expect((await gov.api.get(`/v1/authority/delegations/${first.delegation_id}?tenant=fabrikam`)).status).toBe(404);
      expect((await gov.api.get(`/v1/authority/delegations/${first.delegation_id}`)).body).toEqual(first);

      expect((await gov.api.post(`/v1/authority/delegations/${first.delegation_id}/revoke`, { reason: 'not_a_reason' })).status).toBe(422);
      // A tenant guard naming another tenant cannot reach this tenant's records (404, nothing changes).
      expect((await gov.api.post(`/v1/authority/delegations/${first.delegation_id}/revoke?tenant=fabrikam`, {})).status).toBe(404);
      expect((await gov.api.post('/v1/governance/agents/alice-agent/transition?tenant=fabrikam', { status: 'retired' })).status).toBe(404);
      expect(
        (await gov.api.post('/v1/governance/agents/alice-agent/transfer-ownership?tenant=fabrikam', { ownerType: 'employee', ownerRef: S(ENTRA.bob) })).status,
      ).toBe(404);
      expect((await gov.api.get('/v1/governance/agents/alice-agent')).body).toMatchObject({ status: 'active', owner_ref: S(ENTRA.alice) });
      const r = await gov.api.post(`/v1/authority/delegations/${first.delegation_id}/revoke`, { reason: 'owner_transferred', by: 'erin' });
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ status: 'revoked', vc_status: 'revoked', revocation_reason: 'owner_transferred', revoked_at: expect.any(String) });
      expect(r.body.history.at(-1)).toMatchObject({ action: 'revoke', by: 'erin', detail: 'owner_transferred' });
      expect((await gov.api.get(`/v1/authority/delegations/${first.delegation_id}/usable`)).body).toEqual({
        usable: false,
        status: 'revoked',
        reason: 'owner_transferred',
      });
      const again = await gov.api.post(`/v1/authority/delegations/${first.delegation_id}/revoke`);
      expect(again.status).toBe(409);
      expect(again.body.error.code).toBe('not_live');
      // An empty body with a JSON content type is an empty revoke request, not a decode error.
      const dflt = {
        body: (await (
          await fetch(`${gov.api.base}/v1/authority/delegations/${second.delegation_id}/revoke`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
          })
        ).json()) as any,
      };
      expect(dflt.body.revocation_reason).toBe('manual_admin_revocation');
      const log = (await gov.api.get(`/v1/revocation/log?tenant=${T}`)).body;
      expect(log[0]).toMatchObject({
        kind: 'delegation_revoke',
        reason_code: 'manual_admin_revocation',
        delegation_id: second.delegation_id,
        source: 'admin',
        by: 'admin',
      });
      expect(log[1]).toMatchObject({ kind: 'delegation_revoke', reason_code: 'owner_transferred', delegation_id: first.delegation_id, by: 'erin' });
      expect((await gov.api.get(`/v1/authority/delegations?tenant=${T}&status=revoked`)).body.length).toBeGreaterThanOrEqual(2);
    });

    it('usable is false once expired, and for a non-active agent', async () => {
      const d = (await grant({ approverRef: S(ENTRA.alice), expiresInSeconds: 60 })).body;
      gov.clock += 61_000;
      expect((await gov.api.get(`/v1/authority/delegations/${d.delegation_id}/usable`)).body).toEqual({
        usable: false,
        status: 'active',
        reason: 'delegation_expired',
      });
      // An approved (not yet active) agent can hold a usable delegation; a suspended one cannot,
      // even if a live row slipped past the cascade (written here straight to the store).
      await register({ agentName: 'approved-only' });
      for (const st of ['pending_approval', 'approved']) await move('approved-only', st);
      const pre = (await grant({ agentId: 'approved-only', approverRef: S(ENTRA.alice) })).body;
      expect((await gov.api.get(`/v1/authority/delegations/${pre.delegation_id}/usable`)).body.usable).toBe(true);
      await seedDelegation(gov.store.db, T, { delegationId: 'slipped', agentId: 'susp-agent', grantedBy: S(ENTRA.alice), expiresAt: null });
      expect((await gov.api.get('/v1/authority/delegations/slipped/usable')).body).toEqual({ usable: false, status: 'active', reason: 'agent_suspended' });
      expect((await gov.api.post(`/v1/revocation/cascade?tenant=${T}`)).body.by_reason.agent_inactive).toBeGreaterThanOrEqual(1);
      expect((await gov.api.get('/v1/authority/delegations/slipped')).body).toMatchObject({ status: 'invalidated', revocation_reason: 'agent_inactive' });
    });

    it("a manual suspend invalidates the agent's live delegations (agent_inactive)", async () => {
      await activeAgent('to-suspend');
      const d = (await grant({ agentId: 'to-suspend', approverRef: S(ENTRA.alice) })).body;
      expect((await move('to-suspend', 'suspended', 'secops')).status).toBe(200);
      expect((await gov.api.get(`/v1/authority/delegations/${d.delegation_id}`)).body).toMatchObject({
        status: 'invalidated',
        vc_status: 'revoked',
        revocation_reason: 'agent_inactive',
      });
      const log = (await gov.api.get(`/v1/revocation/log?tenant=${T}`)).body;
      expect(log[0]).toMatchObject({ kind: 'delegation_invalidate', reason_code: 'agent_inactive', agent_id: 'to-suspend', source: 'admin', by: 'secops' });
    });
  });

  describe('directory sync runs the cascade in its transaction (source auto)', () => {
    it('a sync that fails after its cascade rolls the cascade back with it', async () => {
      const t = 'rollco';
      const users = [entraUser({ oid: 'o1', upn: 'o1@r.example', given: 'O', family: 'One' })];
      await syncDirectory({ db: gov.store.db, now: () => gov.clock }, { tenantId: t, idp: 'idp_a', mode: 'snapshot', users });
      await seedAgent(gov.store.db, t, { agentName: 'roll-agent', ownerRef: `idp_a:${t}:o1` });
      await seedDelegation(gov.store.db, t, { delegationId: 'roll-del', agentId: 'roll-agent', grantedBy: `idp_a:${t}:o1`, expiresAt: null });
      const off = [entraUser({ oid: 'o1', upn: 'o1@r.example', given: 'O', family: 'One', active: false })];
      const failing = {
        db: gov.store.db,
        now: () => gov.clock,
        cascade: runCascade,
        failpoint: (st: string) => {
          if (st === 'run') throw new Error('disk full');
        },
      };
      await expect(syncDirectory(failing, { tenantId: t, idp: 'idp_a', mode: 'snapshot', users: off })).rejects.toThrow('disk full');
      expect((await gov.api.get('/v1/governance/agents/roll-agent')).body).toMatchObject({ status: 'active', owner_active: true });
      expect((await gov.api.get('/v1/authority/delegations/roll-del')).body.status).toBe('active');
      expect((await gov.api.get(`/v1/revocation/log?tenant=${t}`)).body).toEqual([]);
      const ok = await gov.api.post('/v1/directory/sync', { tenantId: t, users: off });
      expect(ok.body.cascade).toMatchObject({ agents_suspended: 1, delegations_revoked: 1, by_reason: { owner_inactive: 2 } });
    });

    it('deactivating an owner suspends their agent, revokes its delegations and invalidates delegations they granted', async () => {
      await activeAgent('bob-agent', { ownerRef: S(ENTRA.bob) });
      await activeAgent('erin-agent', { ownerRef: S(ENTRA.engMgr), businessSponsor: S(ENTRA.cto) });
      const own = (
        await gov.api.post('/v1/authority/delegations', { tenantId: T, agentId: 'bob-agent', approverRef: S(ENTRA.bob), action: 'read', resource: 'wiki/*' })
      ).body;
      const viaMgr = (
        await gov.api.post('/v1/authority/delegations', { tenantId: T, agentId: 'bob-agent', approverRef: S(ENTRA.engMgr), action: 'read', resource: 'jira/*' })
      ).body;
      const granted = (
        await gov.api.post('/v1/authority/delegations', {
          tenantId: T,
          agentId: 'erin-agent',
          approverRef: S(ENTRA.cto),
          requesterRef: S(ENTRA.bob),
          action: 'read',
          resource: 'hr/*',
        })
      ).body;
      const underGroup = (
        await gov.api.post('/v1/authority/delegations', {
          tenantId: 'contoso',
          agentId: 'erin-agent',
          approverRef: S(ENTRA.engMgr),
          requiredGroup: ENTRA.gEng,
          action: 'x',
          resource: 'y',
        })
      ).body;
      // Bob has no standing authority over alice-agent: he grants on it break-glass.
      const glass = (
        await gov.api.post('/v1/authority/delegations', {
          tenantId: T,
          agentId: 'alice-agent',
          approverRef: S(ENTRA.bob),
          breakGlass: true,
          action: 'read',
          resource: 'crm/*',
        })
      ).body;
      expect([own, viaMgr, granted, underGroup, glass].every((d) => d.status === 'active')).toBe(true);

      gov.clock += 60_000;
      const snap = entraSnapshot();
      const bob = snap.users.find((u) => u.externalId === ENTRA.bob)!;
      bob.active = false;
      const r = await gov.api.post('/v1/directory/sync', { tenantId: T, ...snap });
      expect(r.status).toBe(200);
      expect(r.body.counts.users_deactivated).toBe(1);
      expect(r.body.cascade).toMatchObject({ agents_suspended: 1, agents_quarantined: 0, delegations_revoked: 2 });
      expect(r.body.cascade.by_reason.owner_inactive).toBe(3);
      // Bob granted break-glass on alice-agent: he lost the authority behind it.
      expect(r.body.cascade.by_reason.delegation_grantor_lost_authority).toBeGreaterThanOrEqual(1);
      expect((await gov.api.get('/v1/governance/agents/bob-agent')).body).toMatchObject({ status: 'suspended', owner_active: false });
      expect((await gov.api.get('/v1/governance/agents/bob-agent')).body.history.at(-1)).toMatchObject({ action: 'cascade_suspend', by: 'directory-sync' });
      for (const d of [own, viaMgr]) {
        expect((await gov.api.get(`/v1/authority/delegations/${d.delegation_id}`)).body).toMatchObject({
          status: 'revoked',
          revocation_reason: 'owner_inactive',
        });
      }
      // Bob only requested `granted`; the granter (the CTO) is still active, so it stands.
      expect((await gov.api.get(`/v1/authority/delegations/${granted.delegation_id}`)).body.status).toBe('active');
      const runs = (await gov.api.get(`/v1/directory/syncs?tenant=${T}`)).body;
      expect(runs[0].cascade).toEqual(r.body.cascade);
      const log = (await gov.api.get(`/v1/revocation/log?tenant=${T}`)).body;
      expect(log[0]).toMatchObject({ source: 'auto', by: 'directory-sync' });
      // Erin leaves the approver group: the delegation she granted under it is invalidated.
      gov.clock += 60_000;
      const snap2 = entraSnapshot();
      snap2.users.find((u) => u.externalId === ENTRA.bob)!.active = false;
      const eng = snap2.groups.find((g) => g.externalId === ENTRA.gEng)!;
      eng.members = (eng.members as { value: string }[]).filter((m) => m.value !== ENTRA.engMgr);
      const r2 = await gov.api.post('/v1/directory/sync', { tenantId: T, ...snap2 });
      expect(r2.body.cascade).toMatchObject({ delegations_invalidated: 1, by_reason: { group_removed: 1 } });
      expect((await gov.api.get(`/v1/authority/delegations/${underGroup.delegation_id}`)).body).toMatchObject({
        status: 'invalidated',
        revocation_reason: 'group_removed',
      });
    });
  });
});
