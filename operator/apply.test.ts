import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { API_VERSION } from './crd/definitions.js';
import { createApplier, pathTo, type Applier } from './apply.js';
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
    expect(t.registry.list().map((s) => s.name)).toEqual(['gpt-4o-mini', 'ledger', 'orders', 'research-agent', 'search', 'summarizer', 'web']);
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
    expect(second.outcome.apply!.unchanged).toHaveLength(7);
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

  it('delete: a policy and a governed agent no longer declared are withdrawn (entry pruned, agent suspended)', async () => {
    await applier.run(examples);
    const rest = examples.filter((r) => !(r.name === 'research-agent' && r.namespace === 'agents'));
    const pass = await applier.run(rest);
    expect(pass.outcome.apply!.deleted).toEqual(['research-agent']);
    expect(t.registry.get('research-agent')).toBeUndefined();
    expect((await governed(t, 'research-agent')).status).toBe('suspended');
    // Declared again: the operator suspended it itself, so it walks it back to active.
    await applier.run(examples);
    expect((await governed(t, 'research-agent')).status).toBe('active');
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

describe('pathTo (SPEC 3.1 walk)', () => {
  it.each([
    ['draft', 'active', ['pending_approval', 'approved', 'active']],
    ['active', 'suspended', ['suspended']],
    ['suspended', 'active', ['active']],
    ['approved', 'draft', undefined],
    ['retired', 'active', undefined],
    ['quarantined', 'quarantined', []],
  ] as const)('%s -> %s', (from, to, path) => {
    expect(pathTo(from, to)).toEqual(path);
  });
});
