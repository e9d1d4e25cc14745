import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { API_VERSION } from './crd/definitions.js';
import { sql } from 'drizzle-orm';
import { rowsOf } from '../runtime/store/factory.js';
import { createApplier, type Applier } from './apply.js';
import { postJson } from './ports.js';
import { checkResource, type Observed } from './resource.js';
import { sameStatus, type CrStatus } from './status.js';
import { readFolder } from './validate/files.js';
import { EXAMPLES_DIR, openTestStack, type TestStack } from './testing/stack.js';

const ready = (s: CrStatus | undefined) => s?.conditions.find((c) => c.type === 'Ready');
const cr = (kind: string, name: string, spec: Record<string, unknown>): Observed =>
  checkResource({ apiVersion: API_VERSION, kind, metadata: { name, namespace: 'agents' }, spec }, `t:${name}`).observed!;

async function governed(t: TestStack, name: string): Promise<any> {
  const r = await t.identity(`/v1/governance/agents/${name}`);
  return r.status === 200 ? r.json() : undefined;
}

describe('applier against the real registry and identity authority', () => {
  let t: TestStack;
  let applier: Applier;
  const examples = readFolder(EXAMPLES_DIR).resources;

  beforeEach(async () => {
    t = await openTestStack();
    applier = createApplier({ owner: 'folder:test', registry: t.registryPort, identity: t.identity });
  });
  afterEach(async () => t?.close());

  it('the examples: registry entries, identity agents and governed agents walked to their wanted state; all Ready', async () => {
    const pass = await applier.run(examples);
    expect(t.registry.list().map((s) => s.name)).toEqual([
      'everything',
      'gpt-4o-mini',
      'ledger',
      'orders',
      'research-agent',
      'search',
      'summarizer',
      'tickets',
      'tool-agent',
      'web',
    ]);
    expect(t.registry.get('summarizer')!.upstream).toBe('summarizer.agents.svc:8080');
    expect(t.registry.ownerOf('web')).toBe('folder:test');
    expect((await governed(t, 'research-agent')).status).toBe('active');
    expect((await governed(t, 'summarizer')).status).toBe('approved');
    expect((await t.identity('/v1/agents/research-agent')).status).toBe(200);
    for (const [key, s] of pass.statuses) expect(ready(s), key).toMatchObject({ status: 'True', reason: 'Ready' });
    expect(pass.statuses.get('GovernedAgent/agents/research-agent')).toMatchObject({
      lifecycle: 'active',
      activationBlockers: [],
      policyVersion: t.registry.version,
    });
  });

  it('steady state: a second pass writes nothing (no version bump, no audit record, same statuses)', async () => {
    const first = await applier.run(examples);
    const version = t.registry.version;
    const audits = t.audits.length;
    const second = await applier.run(examples, first.statuses);
    expect(t.registry.version).toBe(version);
    expect(t.audits.length).toBe(audits);
    expect(second.outcome.apply!.unchanged).toHaveLength(10);
    for (const [k, s] of second.statuses) expect(sameStatus(s, first.statuses.get(k)), k).toBe(true);
  });

  it('drift: an entry of ours changed by hand through the apply API is put back on the next pass', async () => {
    const first = await applier.run(examples);
    const hacked = { ...t.registry.get('research-agent')!, allowTools: ['search', 'ledger', 'web'] };
    delete (hacked as { registeredAt?: string }).registeredAt;
    const others = t.registry.list().filter((s) => s.name !== 'research-agent' && t.registry.ownerOf(s.name) === 'folder:test');
    await t.registry.apply([...others, hacked], { owner: 'folder:test', by: 'someone' });
    expect(t.registry.get('research-agent')!.allowTools).toContain('web');
    const pass = await applier.run(examples, first.statuses);
    expect(pass.outcome.apply!.updated).toEqual(['research-agent']);
    expect(t.registry.get('research-agent')!.allowTools).toEqual(['search', 'ledger']);
    expect(pass.statuses.get('AgentPolicy/agents/research-agent')!.policyVersion).toBe(t.registry.version);
  });

  it('conflict with the api owner: the entry is not overwritten and the resource says who holds it', async () => {
    await t.registry.upsert({ name: 'orders', upstream: 'mine.svc:1', owner: 'someone' });
    const pass = await applier.run(examples);
    expect(t.registry.get('orders')!.upstream).toBe('mine.svc:1');
    expect(ready(pass.statuses.get('RegistryService/default/orders'))).toMatchObject({
      status: 'False',
      reason: 'Conflict',
      message: 'registry entry orders is owned by api',
    });
    expect(ready(pass.statuses.get('RegistryService/default/web'))!.status).toBe('True');
  });

  it('delete: a policy and a governed agent no longer declared are withdrawn (entry pruned, identity and governed agent retired, history kept)', async () => {
    await applier.run(examples);
    expect((await postJson(t.identity, '/v1/agents/research-agent/provision', {})).status).toBe(200);
    const rest = examples.filter((r) => !(r.name === 'research-agent' && r.namespace === 'agents'));
    const pass = await applier.run(rest);
    expect(pass.outcome.apply!.deleted).toEqual(['research-agent']);
    expect(t.registry.get('research-agent')).toBeUndefined();
    const g = await governed(t, 'research-agent');
    expect(g.status).toBe('retired');
    expect(g.history.map((h: { action: string; by: string; detail: string }) => [h.action, h.by, h.detail])).toEqual([
      ['registered', 'folder:test', 'owner idp_a:example:e1a2b3c4-0000-4000-8000-000000000002'],
      ['transition', 'folder:test', 'draft -> pending_approval'],
      ['transition', 'folder:test', 'pending_approval -> approved'],
      ['transition', 'folder:test', 'approved -> active'],
      ['transition', 'folder:test', 'active -> retired'],
    ]);
    // The identity agent is retired, not deleted: its record stays, its credentials are revoked.
    const agent = await (await t.identity('/v1/agents/research-agent')).json();
    expect(agent).toMatchObject({ name: 'research-agent', provisioned: true, retired_at: expect.any(String) });
    const creds = await rowsOf<{ n: string }>(
      t.store.db,
      sql`select count(*)::text as n from identity_credentials c join identity_revocations r on r.jti = c.jti where c.agent_name = 'research-agent'`,
    );
    expect(creds[0]!.n).toBe('3'); // its Membership VC and its two capability VCs
    expect((await postJson(t.identity, '/v1/agents/research-agent/provision', {})).body.error.code).toBe('agent_retired');
    // Declared again: retirement is terminal (SPEC 3.1), and the status says so.
    const again = await applier.run(examples);
    expect((await governed(t, 'research-agent')).status).toBe('retired');
    expect(ready(again.statuses.get('GovernedAgent/agents/research-agent'))).toMatchObject({ status: 'False', reason: 'Retired' });
  });

  it('edit: a changed owner, team, sponsor, risk tier and runtime reach the identity authority (one history entry each, by the owner) and the resource is Ready', async () => {
    const first = await applier.run(examples);
    const edited = examples.map((r) =>
      r.kind === 'GovernedAgent' && r.name === 'research-agent'
        ? {
            ...r,
            generation: 2,
            spec: {
              ...r.spec,
              ownerRef: 'idp_a:example:e1a2b3c4-0000-4000-8000-000000000001',
              businessSponsor: 'sam.ortiz@example.com',
              riskTier: 'high',
              approvedRuntime: 'doks_stage',
              teamRef: undefined,
            },
          }
        : r,
    );
    const pass = await applier.run(edited, first.statuses);
    const g = await governed(t, 'research-agent');
    expect(g).toMatchObject({
      status: 'active',
      owner_ref: 'idp_a:example:e1a2b3c4-0000-4000-8000-000000000001',
      business_sponsor: 'idp_a:example:e1a2b3c4-0000-4000-8000-000000000002',
      team_ref: null,
      risk_tier: 'high',
      approved_runtime: 'doks_stage',
    });
    expect(g.history.slice(4).map((h: { action: string; by: string; detail: string }) => [h.action, h.by, h.detail])).toEqual([
      [
        'ownership_transferred',
        'folder:test',
        'employee:idp_a:example:e1a2b3c4-0000-4000-8000-000000000002 -> employee:idp_a:example:e1a2b3c4-0000-4000-8000-000000000001',
      ],
      ['updated', 'folder:test', 'team_ref: "example:research-team" -> null'],
      [
        'updated',
        'folder:test',
        'business_sponsor: "idp_a:example:e1a2b3c4-0000-4000-8000-000000000001" -> "idp_a:example:e1a2b3c4-0000-4000-8000-000000000002"',
      ],
      ['updated', 'folder:test', 'risk_tier: "medium" -> "high"'],
      ['updated', 'folder:test', 'approved_runtime: "doks_prod" -> "doks_stage"'],
    ]);
    const st = pass.statuses.get('GovernedAgent/agents/research-agent')!;
    expect(ready(st)).toMatchObject({ status: 'True', reason: 'Ready', observedGeneration: 2 });
    expect(st.lifecycle).toBe('active');
  });

  it('steady state: an unchanged resync writes nothing to the registry or the identity store (no row touched, no history entry, no version bump)', async () => {
    const first = await applier.run(examples);
    const rows = () =>
      rowsOf<{ t: string; n: string; x: string; h: number }>(
        t.store.db,
        sql`select 'governed' as t, agent_name as n, xmin::text as x, jsonb_array_length(history) as h from governance_agents
            union all select 'identity', name, xmin::text, 0 from identity_agents
            union all select 'revocations', count(*)::text, '', 0 from identity_revocations
            union all select 'registry', name, xmin::text, 0 from registry_services
            order by 1, 2`,
      );
    const before = await rows();
    expect(before.map((r) => [r.t, r.n, r.h])).toEqual([
      ['governed', 'research-agent', 4],
      ['governed', 'summarizer', 3],
      ['identity', 'research-agent', 0],
      ['identity', 'summarizer', 0],
      ['registry', 'everything', 0],
      ['registry', 'gpt-4o-mini', 0],
      ['registry', 'ledger', 0],
      ['registry', 'orders', 0],
      ['registry', 'research-agent', 0],
      ['registry', 'search', 0],
      ['registry', 'summarizer', 0],
      ['registry', 'tickets', 0],
      ['registry', 'tool-agent', 0],
      ['registry', 'web', 0],
      ['revocations', '0', 0],
    ]);
    const version = t.registry.version;
    const audits = t.audits.length;
    // A fresh applier (a restarted operator: no memo of anything) and a resync of the same one.
    const again = createApplier({ owner: 'folder:test', registry: t.registryPort, identity: t.identity });
    await again.run(examples, first.statuses);
    await applier.run(examples, first.statuses);
    expect(await rows()).toEqual(before);
    expect(t.registry.version).toBe(version);
    expect(t.audits.length).toBe(audits);
  });

  it('held: an agent suspended by someone else is not re-activated; the status says by whom', async () => {
    await applier.run(examples);
    const r = await postJson(t.identity, '/v1/governance/agents/research-agent/transition', { status: 'suspended', by: 'security-team' });
    expect(r.status).toBe(200);
    const pass = await applier.run(examples);
    expect((await governed(t, 'research-agent')).status).toBe('suspended');
    expect(ready(pass.statuses.get('GovernedAgent/agents/research-agent'))).toMatchObject({ status: 'False', reason: 'Held' });
    expect(ready(pass.statuses.get('GovernedAgent/agents/research-agent'))!.message).toContain('security-team');
  });

  it('the identity authority answer is reported: unknown owner (Rejected), inactive owner (Blocked with blockers)', async () => {
    const unknown = cr('GovernedAgent', 'ghost', { tenant: 'example', ownerType: 'employee', ownerRef: 'idp_a:example:nobody' });
    const sync = await postJson(t.identity, '/v1/directory/sync', {
      tenantId: 'example',
      mode: 'snapshot',
      users: [
        {
          schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
          externalId: 'e1a2b3c4-0000-4000-8000-000000000001',
          userName: 'dana.lee@example.com',
          active: false,
        },
      ],
      groups: [],
    });
    expect(sync.status).toBe(200);
    const blocked = cr('GovernedAgent', 'blocked', {
      tenant: 'example',
      ownerType: 'employee',
      ownerRef: 'idp_a:example:e1a2b3c4-0000-4000-8000-000000000001',
      businessSponsor: 'idp_a:example:e1a2b3c4-0000-4000-8000-000000000001',
      riskTier: 'low',
      approvedRuntime: 'doks_dev',
      state: 'active',
    });
    const pass = await applier.run([unknown, blocked]);
    expect(ready(pass.statuses.get('GovernedAgent/agents/ghost'))).toMatchObject({ status: 'False', reason: 'Rejected' });
    const b = pass.statuses.get('GovernedAgent/agents/blocked')!;
    expect(ready(b)).toMatchObject({ status: 'False', reason: 'Blocked' });
    expect(b.lifecycle).toBe('approved');
    expect(b.activationBlockers).toEqual(expect.arrayContaining(['owner_inactive']));
  });

  it('an invalid resource never blocks the others', async () => {
    const bad = cr('AgentPolicy', 'bad', { agent: 'bad', allowAgents: ['bad'] });
    const pass = await applier.run([bad, ...examples]);
    expect(ready(pass.statuses.get('AgentPolicy/agents/bad'))).toMatchObject({ status: 'False', reason: 'Invalid' });
    expect(t.registry.get('web')).toBeDefined();
    expect(t.registry.get('bad')).toBeUndefined();
  });
});
