/**
 * Governance writes answer once every replica has them (the change feed's `settled()`): a manual
 * suspension, an on-demand cascade and a directory sync whose cascade suspends each revoke the
 * agent's Membership VC and change its standing, and when the write answers on replica a,
 * replica b has both, or (a stopped hearing b under load) b is not answering from memory.
 * Replica b hears every notification 150 ms late, so without the barrier it would still hold the
 * old state. Real PostgreSQL only (on PGlite a notification is delivered before the write returns).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../../../lib/log.js';
import { eventually } from '../../../lib/poll-testing.js';
import type { Store } from '../../../store/factory.js';
import { openTestPostgres, TEST_DATABASE_URL, testSchema } from '../../../store/testing.js';
import { createChangeFeed, type ChangeFeed } from '../../change-feed.js';
import { slowReplica } from '../../change-feed-testing.js';
import { entraUser } from '../directory/fixtures.js';
import { seedAgent, seedEmployee, seedIdentity, serveEnterprise, setEmployee, subjectOf } from './testkit.js';

const T = 'replicas-t';

beforeAll(() => setLogLevel('error'));

describe.skipIf(!TEST_DATABASE_URL)('governance writes on one replica hold on another when they answer', () => {
  let sa: Store;
  let sb: Store;
  let a: ChangeFeed;
  let b: ChangeFeed;
  let link: ReturnType<typeof slowReplica>;
  let api: Awaited<ReturnType<typeof serveEnterprise>>;
  /** What replica b has applied: revoked jtis and governed statuses. */
  const revoked = new Set<string>();
  const status = new Map<string, string | null>();

  /** An active governed agent with an identity (its Membership VC `m-<name>`), owned by employee `owner`. */
  const seed = async (name: string, owner: string, tenant = T) => {
    await seedAgent(sa.db, tenant, { agentName: name, ownerRef: owner, status: 'active', riskTier: 'low', approvedRuntime: 'local_dev' });
    await seedIdentity(sa.db, name);
  };
  /**
   * Replica b has the Membership VC revoked and the standing moved, or (a stopped hearing b: its
   * pings over a second apart under load) b is not trusting its memory.
   */
  const refusedOnB = (name: string, to: string) => {
    if (b.live()) expect({ revoked: revoked.has(`urn:uuid:m-${name}`), status: status.get(name) }).toEqual({ revoked: true, status: to });
  };

  beforeAll(async () => {
    const schema = testSchema();
    sa = await openTestPostgres({ schema });
    sb = await openTestPostgres({ schema, keepSchema: true });
    link = slowReplica(sb, 150);
    b = createChangeFeed(link.store);
    b.subscribe({
      apply: (c) => {
        if (c.kind === 'revoked') revoked.add(c.jti);
        if (c.kind === 'governed') status.set(c.name, c.status);
      },
      resync: async () => {},
    });
    a = createChangeFeed(sa);
    api = await serveEnterprise(sa, () => Date.now(), { changes: a });
    await eventually(() => a.live() && b.live(), 'both feeds live', 10_000);
  }, 30_000);
  afterAll(async () => {
    await api?.close();
    await b?.close();
    await a?.close();
    await sb?.close();
    await sa?.close();
  });

  it('a manual suspension', async () => {
    await seed('rep-manual', await seedEmployee(sa.db, { tenant: T, ext: 'own-m' }));
    const r = await api.post('/v1/governance/agents/rep-manual/transition', { status: 'suspended', by: 'admin@x' });
    expect(r.status).toBe(200);
    refusedOnB('rep-manual', 'suspended');
  });

  it('an on-demand cascade after the owner left', async () => {
    await seed('rep-cascade', await seedEmployee(sa.db, { tenant: T, ext: 'own-c' }));
    await setEmployee(sa.db, T, 'own-c', { active: false });
    const r = await api.post(`/v1/revocation/cascade?tenant=${T}`, {});
    expect(r.status).toBe(200);
    expect(r.body.agents_suspended).toBe(1);
    refusedOnB('rep-cascade', 'suspended');
  });

  it('a directory sync whose cascade suspends', async () => {
    const tenant = `${T}-sync`;
    const user = (active: boolean) => entraUser({ oid: 'own-s', upn: 'own-s@x.example', given: 'O', family: 'S', active });
    expect((await api.post('/v1/directory/sync', { tenantId: tenant, users: [user(true)], groups: [] })).status).toBe(200);
    await seed('rep-sync', subjectOf(tenant, 'own-s'), tenant);
    const r = await api.post('/v1/directory/sync', { tenantId: tenant, users: [user(false)], groups: [] });
    expect(r.status).toBe(200);
    expect(r.body.cascade.agents_suspended).toBe(1);
    refusedOnB('rep-sync', 'suspended');
  });
});
