/**
 * The revocation cascade over HTTP (127.0.0.1, ephemeral port) on PGlite and Postgres: every
 * reason code through POST /v1/revocation/cascade, each in its own tenant, with its log rows.
 */
import { describe, expect, it } from 'vitest';
import { testBackends } from '../../../store/testing.js';
import { governanceRepo } from './repo.js';
import { useGovernance } from './routes-testing.js';
import { deleteEmployee, seedAgent, seedDelegation, seedEmployee, seedGroup, setEmployee, subjectOf } from './testkit.js';

describe.each(testBackends())('governance routes on $name', (b) => {
  const gov = useGovernance(b);

  describe('revocation cascade over HTTP: every reason code', () => {
    const nowSec = () => Math.floor(gov.clock / 1000);
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
        change: (t) => setEmployee(gov.store.db, t, 'own', { active: false }),
        agent: 'suspended',
        dstatus: 'revoked',
        kinds: ['agent_suspend', 'delegation_revoke'],
      },
      {
        reason: 'owner_missing',
        change: (t) => deleteEmployee(gov.store.db, t, 'own'),
        agent: 'quarantined',
        dstatus: 'revoked',
        kinds: ['agent_quarantine', 'delegation_revoke'],
      },
      {
        reason: 'sponsor_inactive',
        change: (t) => setEmployee(gov.store.db, t, 'spn', { active: false }),
        agent: 'suspended',
        dstatus: 'invalidated',
        kinds: ['agent_suspend', 'delegation_invalidate'],
      },
      { reason: 'delegation_expired', change: async () => {}, d: { expired: true }, agent: 'active', dstatus: 'expired', kinds: ['delegation_expire'] },
      {
        reason: 'delegation_grantor_lost_authority',
        change: (t) => setEmployee(gov.store.db, t, 'mgr', { active: false }),
        d: { grantor: 'mgr' },
        agent: 'active',
        dstatus: 'invalidated',
        kinds: ['delegation_invalidate'],
      },
      {
        reason: 'group_removed',
        change: (t) => setEmployee(gov.store.db, t, 'own', { groups: [] }),
        d: { group: 'ops' },
        agent: 'active',
        dstatus: 'invalidated',
        kinds: ['delegation_invalidate'],
      },
      {
        reason: 'agent_inactive',
        change: async (t) => void (await governanceRepo(gov.store.db, t).updateAgent(`agent-${t}`, { status: 'retired' }, [])),
        agent: 'retired',
        dstatus: 'invalidated',
        kinds: ['delegation_invalidate'],
      },
    ];
    it.each(CASES.map((c, i) => ({ ...c, t: `cx${i}` })))('$reason', async (c) => {
      const { t } = c;
      await seedEmployee(gov.store.db, { tenant: t, ext: 'mgr' });
      await seedEmployee(gov.store.db, { tenant: t, ext: 'own', manager: 'mgr', groups: ['ops'] });
      await seedEmployee(gov.store.db, { tenant: t, ext: 'spn' });
      await seedGroup(gov.store.db, t, 'ops', ['own']);
      await seedAgent(gov.store.db, t, { agentName: `agent-${t}`, ownerRef: subjectOf(t, 'own'), businessSponsor: subjectOf(t, 'spn') });
      await seedDelegation(gov.store.db, t, {
        delegationId: `del-${t}`,
        agentId: `agent-${t}`,
        grantedBy: subjectOf(t, c.d?.grantor ?? 'own'),
        requiredGroup: c.d?.group ? `${t}:${c.d.group}` : null,
        expiresAt: c.d?.expired ? nowSec() - 1 : nowSec() + 3600,
      });
      await c.change(t);
      const r = await gov.api.post(`/v1/revocation/cascade?tenant=${t}&by=oncall`);
      expect(r.status).toBe(200);
      expect(r.body.by_reason[c.reason]).toBeGreaterThanOrEqual(1);
      expect((await gov.api.get(`/v1/governance/agents/agent-${t}`)).body.status).toBe(c.agent);
      const d = (await gov.api.get(`/v1/authority/delegations/del-${t}`)).body;
      expect(d.status).toBe(c.dstatus);
      expect((await gov.api.get(`/v1/authority/delegations/del-${t}/usable`)).body.usable).toBe(false);
      const log = (await gov.api.get(`/v1/revocation/log?tenant=${t}`)).body;
      expect(log.map((x: { kind: string }) => x.kind).sort()).toEqual([...c.kinds].sort());
      expect(log.every((x: { source: string; by: string; tenant_id: string }) => x.source === 'admin' && x.by === 'oncall' && x.tenant_id === t)).toBe(true);
      // Nothing else to do: a second run moves nothing.
      expect((await gov.api.post(`/v1/revocation/cascade?tenant=${t}`)).body).toMatchObject({
        agents_suspended: 0,
        delegations_revoked: 0,
        delegations_invalidated: 0,
        delegations_expired: 0,
        by_reason: {},
      });
    });
  });
});
