import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../../store/factory.js';
import { testBackends } from '../../../store/testing.js';
import { runCascade } from './cascade.js';
import { governanceRepo } from './repo.js';
import { deleteEmployee, seedAgent, seedDelegation, seedEmployee, seedGroup, setEmployee, subjectOf } from './testkit.js';
import type { DbOrTx } from '../tenant.js';

const NOW = Date.parse('2026-03-02T09:00:00.000Z');
const nowSec = Math.floor(NOW / 1000);

interface Case {
  reason: string;
  /** Extra delegation fields. */
  delegation?: { requiredGroup?: string; expiresAt?: number; grantor?: string };
  change: (db: DbOrTx, t: string) => Promise<void>;
  agent: string;
  delegation_status: string;
  vc_status: string;
  kinds: string[];
  counts: Record<string, number>;
  by_reason: Record<string, number>;
}

const zero = { agents_suspended: 0, agents_quarantined: 0, delegations_revoked: 0, delegations_invalidated: 0, delegations_expired: 0 };

const CASES: Case[] = [
  {
    reason: 'owner_inactive',
    by_reason: { owner_inactive: 2 },
    change: (db, t) => setEmployee(db, t, 'own', { active: false }),
    agent: 'suspended',
    delegation_status: 'revoked',
    vc_status: 'revoked',
    kinds: ['agent_suspend', 'delegation_revoke'],
    counts: { agents_suspended: 1, delegations_revoked: 1 },
  },
  {
    reason: 'owner_missing',
    by_reason: { owner_missing: 2 },
    change: (db, t) => deleteEmployee(db, t, 'own'),
    agent: 'quarantined',
    delegation_status: 'revoked',
    vc_status: 'revoked',
    kinds: ['agent_quarantine', 'delegation_revoke'],
    counts: { agents_quarantined: 1, delegations_revoked: 1 },
  },
  {
    reason: 'sponsor_inactive',
    by_reason: { sponsor_inactive: 1, agent_inactive: 1 },
    change: (db, t) => setEmployee(db, t, 'spn', { active: false }),
    agent: 'suspended',
    delegation_status: 'invalidated',
    vc_status: 'revoked',
    kinds: ['agent_suspend', 'delegation_invalidate'],
    counts: { agents_suspended: 1, delegations_invalidated: 1 },
  },
  {
    reason: 'delegation_expired',
    by_reason: { delegation_expired: 1 },
    delegation: { expiresAt: nowSec - 1 },
    change: async () => {},
    agent: 'active',
    delegation_status: 'expired',
    vc_status: 'expired',
    kinds: ['delegation_expire'],
    counts: { delegations_expired: 1 },
  },
  {
    reason: 'delegation_grantor_lost_authority',
    by_reason: { delegation_grantor_lost_authority: 1 },
    delegation: { grantor: 'mgr' },
    change: (db, t) => setEmployee(db, t, 'mgr', { active: false }),
    agent: 'active',
    delegation_status: 'invalidated',
    vc_status: 'revoked',
    kinds: ['delegation_invalidate'],
    counts: { delegations_invalidated: 1 },
  },
  {
    reason: 'group_removed',
    by_reason: { group_removed: 1 },
    delegation: { requiredGroup: 'ops' },
    change: (db, t) => setEmployee(db, t, 'own', { groups: [] }),
    agent: 'active',
    delegation_status: 'invalidated',
    vc_status: 'revoked',
    kinds: ['delegation_invalidate'],
    counts: { delegations_invalidated: 1 },
  },
  {
    reason: 'agent_inactive',
    by_reason: { agent_inactive: 1 },
    change: async (db, t) => {
      await governanceRepo(db, t).updateAgent(`agent-${t}`, { status: 'retired' }, []);
    },
    agent: 'retired',
    delegation_status: 'invalidated',
    vc_status: 'revoked',
    kinds: ['delegation_invalidate'],
    counts: { delegations_invalidated: 1 },
  },
];

describe.each(testBackends())('revocation cascade on $name', (b) => {
  let store: Store;
  beforeAll(async () => {
    store = await b.open();
  });
  afterAll(async () => {
    await store?.close();
  });

  async function world(t: string, c: Case) {
    const db = store.db;
    await seedEmployee(db, { tenant: t, ext: 'mgr' });
    await seedEmployee(db, { tenant: t, ext: 'own', manager: 'mgr', groups: ['ops'] });
    await seedEmployee(db, { tenant: t, ext: 'spn' });
    await seedGroup(db, t, 'ops', ['own']);
    await seedAgent(db, t, { agentName: `agent-${t}`, ownerRef: subjectOf(t, 'own'), businessSponsor: subjectOf(t, 'spn') });
    await seedDelegation(db, t, {
      delegationId: `del-${t}`,
      agentId: `agent-${t}`,
      grantedBy: subjectOf(t, c.delegation?.grantor ?? 'own'),
      requiredGroup: c.delegation?.requiredGroup ?? null,
      expiresAt: c.delegation?.expiresAt ?? nowSec + 3600,
    });
  }

  it.each(CASES.map((c, i) => ({ ...c, t: `t${i}` })))('$reason: status moves, log rows and counts', async (c) => {
    const { t } = c;
    await world(t, c);
    const cascade = (source: 'auto' | 'admin') => store.db.transaction((tx) => runCascade(tx, t, { now: NOW, source, by: 'tester' }));
    // Nothing changed yet: a run moves nothing (except the expiry case, which is due already).
    if (c.reason !== 'delegation_expired') expect(await cascade('admin')).toEqual({ ...zero, by_reason: {} });
    await c.change(store.db, t);
    const counts = await cascade('auto');
    expect(counts).toEqual({ ...zero, ...c.counts, by_reason: c.by_reason });
    const repo = governanceRepo(store.db, t);
    expect((await repo.getAgent(`agent-${t}`))?.status).toBe(c.agent);
    const d = await repo.getDelegation(`del-${t}`);
    expect(d?.status).toBe(c.delegation_status);
    expect(d?.vcStatus).toBe(c.vc_status);
    expect(d?.history.at(-1)?.by).toBe('tester');
    const log = await repo.listLog();
    expect(log.map((r) => r.kind).sort()).toEqual([...c.kinds].sort());
    for (const r of log) {
      expect(r).toMatchObject({ tenant_id: t, source: 'auto', by: 'tester', at: '2026-03-02T09:00:00.000Z' });
      expect(r.agent_id).toBe(`agent-${t}`);
    }
    const dRow = log.find((r) => r.delegation_id === `del-${t}`);
    expect(dRow?.reason_code).toBe(c.reason === 'sponsor_inactive' ? 'agent_inactive' : c.reason);
    expect(d?.revocationReason).toBe(dRow?.reason_code);
    // Idempotent: a second run with nothing changed moves nothing and logs nothing.
    expect(await cascade('admin')).toEqual({ ...zero, by_reason: {} });
    expect((await repo.listLog()).length).toBe(log.length);
  });

  it('is tenant-scoped: a change in one tenant moves nothing in another', async () => {
    const c = CASES[0]!;
    await world('iso-a', c);
    await world('iso-b', c);
    await c.change(store.db, 'iso-a');
    const counts = await store.db.transaction((tx) => runCascade(tx, 'iso-b', { now: NOW, source: 'admin', by: 'x' }));
    expect(counts.agents_suspended).toBe(0);
    expect((await governanceRepo(store.db, 'iso-a').getAgent('agent-iso-a'))?.status).toBe('active');
    const a = await store.db.transaction((tx) => runCascade(tx, 'iso-a', { now: NOW, source: 'admin', by: 'x' }));
    expect(a.agents_suspended).toBe(1);
    expect((await governanceRepo(store.db, 'iso-b').getAgent('agent-iso-b'))?.status).toBe('active');
    expect(await governanceRepo(store.db, 'iso-b').listLog()).toEqual([]);
  });

  it('leaves draft agents alone, escalates suspended agents whose owner vanished, rolls back with the caller', async () => {
    const t = 'misc';
    const db = store.db;
    await seedEmployee(db, { tenant: t, ext: 'gone', active: false });
    await seedAgent(db, t, { agentName: 'drafty', ownerRef: subjectOf(t, 'gone'), status: 'draft' });
    await seedAgent(db, t, { agentName: 'susp', ownerRef: subjectOf(t, 'nobody'), status: 'suspended' });
    await expect(
      db.transaction(async (tx) => {
        await runCascade(tx, t, { now: NOW, source: 'auto', by: 'x' });
        throw new Error('caller fails after the cascade');
      }),
    ).rejects.toThrow('caller fails');
    const repo = governanceRepo(db, t);
    expect((await repo.getAgent('susp'))?.status).toBe('suspended');
    expect(await repo.listLog()).toEqual([]);
    const counts = await db.transaction((tx) => runCascade(tx, t, { now: NOW, source: 'auto', by: 'x' }));
    expect(counts).toMatchObject({ agents_quarantined: 1, agents_suspended: 0, by_reason: { owner_missing: 1 } });
    expect((await repo.getAgent('drafty'))?.status).toBe('draft');
    expect((await repo.getAgent('susp'))?.status).toBe('quarantined');
  });
});
