/**
 * Tenancy of governed agents (issue 15 item 7), over a real socket: a `teamRef` naming another
 * tenant's group is a 400 (SPEC 7: a cross-tenant reference denies), an unknown team too, and an
 * identity agent counts as governed once any tenant governs its name (the name standing applies to).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../../store/factory.js';
import { agents as identityAgents } from '../../../store/schema/identity.js';
import { testBackends } from '../../../store/testing.js';
import { seedEmployee, seedGroup, serveEnterprise, subjectOf } from './testkit.js';

describe.each(testBackends())('governance tenancy on $name', (b) => {
  let store: Store;
  let api: Awaited<ReturnType<typeof serveEnterprise>>;

  beforeAll(async () => {
    store = await b.open();
    api = await serveEnterprise(store, () => Date.parse('2026-03-02T10:00:00Z'));
    for (const t of ['ta', 'tb']) {
      await seedEmployee(store.db, { tenant: t, ext: 'owner' });
      await seedGroup(store.db, t, 'team', ['owner']);
    }
  });
  afterAll(async () => {
    await api?.close();
    await store?.close();
  });

  const register = (tenant: string, agentName: string, extra: Record<string, unknown> = {}) =>
    api.post('/v1/governance/agents', {
      agentName,
      tenantId: tenant,
      ownerType: 'employee',
      ownerRef: subjectOf(tenant, 'owner'),
      riskTier: 'low',
      approvedRuntime: 'local_dev',
      createdBy: 'x',
      ...extra,
    });

  it("a teamRef naming another tenant's group, or no group, is 400; this tenant's group is stored as its key", async () => {
    const cross = await register('ta', 'a-cross', { teamRef: 'tb:team' });
    expect(cross.status).toBe(400);
    expect(cross.body.error.code).toBe('team_cross_tenant');
    const unknown = await register('ta', 'a-unknown', { teamRef: 'ta:nope' });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.code).toBe('team_unresolved');
    expect((await api.get('/v1/governance/agents/a-cross')).status).toBe(404);
    const ok = await register('ta', 'a-team', { teamRef: 'team' });
    expect(ok.status).toBe(201);
    expect(ok.body.team_ref).toBe('ta:team');
  });

  it('an identity agent is governed by the governed record of its name, whatever tenant holds that record', async () => {
    // The identity authority keeps its agents in a tenant of its own (default); governed records
    // live in their directory tenant; standing is applied by name (names are unique across tenants).
    const now = '2026-03-01T09:00:00Z';
    await store.db.insert(identityAgents).values({ tenantId: 'default', name: 'shadow', role: 'worker', capabilities: [], createdAt: now, updatedAt: now });
    const before = (await api.get('/v1/governance/summary')).body.totals.ungoverned;
    expect(before).toBeGreaterThanOrEqual(1);
    expect((await register('tb', 'shadow')).status).toBe(201);
    expect((await api.get('/v1/governance/summary')).body.totals.ungoverned).toBe(before - 1);
    // The name is taken for every tenant: standing could not tell two records apart.
    expect((await register('ta', 'shadow')).status).toBe(409);
  });
});
