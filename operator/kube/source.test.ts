/**
 * The Kubernetes source for real: client-node's KubeConfig, generated clients and informers over
 * a socket to the in-test API server (operator/testing/fake-apiserver.ts: why it exists and how
 * it stays honest to the real one is said there), feeding the applier over the real registry and
 * identity authority.
 */
import { KubeConfig } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createApplier } from '../apply.js';
import { listYamlFiles } from '../validate/files.js';
import { startFakeApiServer, type FakeApiServer } from '../testing/fake-apiserver.js';
import { EXAMPLES_DIR, openTestStack, type TestStack } from '../testing/stack.js';
import { accessTriples } from './access.js';
import { FINALIZER, startKubernetesSource, type KubernetesSource } from './source.js';

const exampleDocs = () =>
  listYamlFiles(EXAMPLES_DIR).flatMap((f) =>
    parseAllDocuments(readFileSync(join(EXAMPLES_DIR, f), 'utf8'))
      .map((d) => d.toJS())
      .filter(Boolean),
  );

async function until(check: () => boolean | Promise<boolean>, what: string, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The registry entries crds/examples programs (RegistryServices, and the agents' own entries). */
const EXAMPLE_ENTRIES = 10;
const ready = (obj: any) => obj?.status?.conditions?.find((c: { type: string }) => c.type === 'Ready');

describe('Kubernetes source against the in-test API server', () => {
  let api: FakeApiServer;
  let t: TestStack;
  const sources: KubernetesSource[] = [];

  function kubeConfig(): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'test', server: api.url, skipTLSVerify: true }],
      users: [{ name: 'operator', token: api.token }],
      contexts: [{ name: 'test', cluster: 'test', user: 'operator' }],
      currentContext: 'test',
    });
    return kc;
  }
  function start(identity: string, election = { leaseDurationMs: 1500, renewDeadlineMs: 1000, retryPeriodMs: 100 }): KubernetesSource {
    const s = startKubernetesSource({
      kubeConfig: kubeConfig(),
      cluster: 'test',
      identity,
      leaseNamespace: 'writ-system',
      election,
      resyncMs: 60_000,
      debounceMs: 10,
      applier: (owner) => createApplier({ owner, registry: t.registryPort, identity: t.identity }),
    });
    sources.push(s);
    return s;
  }

  beforeEach(async () => {
    api = await startFakeApiServer({ bookmarkMs: 50 });
    t = await openTestStack();
  });
  afterEach(async () => {
    for (const s of sources.splice(0)) await s.close().catch(() => {});
    await api?.close();
    await t?.close();
  });

  it('programs the examples, writes finalizers and status (generation untouched), and a steady resync writes nothing', async () => {
    for (const d of exampleDocs()) api.apply(d);
    const s = start('op-a');
    await s.synced;
    await until(() => api.list('governedagents').every((g) => ready(g)?.status === 'True') && t.registry.list().length === EXAMPLE_ENTRIES, 'all Ready').catch(
      (e) => {
        throw new Error(
          `${(e as Error).message}: ${JSON.stringify(api.list('governedagents').map((g) => [g.metadata.name, ready(g)]))} registry ${t.registry.list().length}`,
        );
      },
    );
    expect(s.owner).toBe('kubernetes:test');
    expect(t.registry.ownerOf('research-agent')).toBe('kubernetes:test');
    for (const plural of ['registryservices', 'agentpolicies', 'governedagents']) {
      for (const o of api.list(plural)) {
        expect(o.metadata.finalizers).toEqual([FINALIZER]);
        expect(o.metadata.generation).toBe(1);
        expect(o.status.observedGeneration).toBe(1);
        expect(ready(o)).toMatchObject({ status: 'True', observedGeneration: 1 });
        expect(o.status.policyVersion).toBeGreaterThan(0);
      }
    }
    expect(api.get('governedagents', 'agents', 'research-agent')!.status).toMatchObject({ lifecycle: 'active', activationBlockers: [] });
    // The custom resources as stored (each with its resourceVersion); the leader lease renews on its own clock.
    const stored = () => JSON.stringify(['registryservices', 'agentpolicies', 'governedagents'].map((p) => api.list(p)));
    const before = stored();
    const version = t.registry.version;
    expect(await s.resync()).toBe(0);
    expect(stored()).toBe(before);
    expect(t.registry.version).toBe(version);
  });

  it('a spec change bumps generation and reaches the registry; an invalid change is refused by the API server; delete withdraws and removes the finalizer', async () => {
    for (const d of exampleDocs()) api.apply(d);
    const s = start('op-a');
    await s.synced;
    await until(() => t.registry.list().length === EXAMPLE_ENTRIES && ready(api.get('registryservices', 'default', 'web'))?.status === 'True', 'programmed');

    const web = api.get('registryservices', 'default', 'web')!;
    api.apply({ ...web, spec: { ...web.spec, upstream: 'web.default.svc:81' } });
    await until(() => t.registry.get('web')?.upstream === 'web.default.svc:81', 'the update');
    await until(() => api.get('registryservices', 'default', 'web')!.status.observedGeneration === 2, 'observedGeneration 2');
    expect(api.get('registryservices', 'default', 'web')!.metadata.generation).toBe(2);
    expect(() => api.apply({ ...web, spec: { ...web.spec, public: true, requireScope: 'x' } })).toThrow(/a public service cannot require a scope/);

    api.remove('agentpolicies', 'agents', 'research-agent');
    await until(() => api.get('agentpolicies', 'agents', 'research-agent') === undefined, 'the CR to be gone');
    expect(t.registry.get('research-agent')).toBeUndefined();
    // Idempotent: deleting the governed agent CR retires the agent (history kept), and a second pass is a no-op.
    api.remove('governedagents', 'agents', 'research-agent');
    await until(() => api.get('governedagents', 'agents', 'research-agent') === undefined, 'the governed agent CR to be gone');
    const g = (await (await t.identity('/v1/governance/agents/research-agent')).json()) as { status: string; history: { action: string; detail: string }[] };
    expect(g.status).toBe('retired');
    expect(g.history.map((h) => h.detail).slice(-2)).toEqual(['approved -> active', 'active -> retired']);
    expect(await s.resync()).toBe(0);
  });

  it('kubectl apply of an edited GovernedAgent reaches the identity authority and the resource reports Ready at its new generation', async () => {
    for (const d of exampleDocs()) api.apply(d);
    const s = start('op-a');
    await s.synced;
    await until(() => ready(api.get('governedagents', 'agents', 'research-agent'))?.status === 'True', 'Ready');
    const cr = api.get('governedagents', 'agents', 'research-agent')!;
    api.apply({
      ...cr,
      spec: { ...cr.spec, riskTier: 'critical', approvedRuntime: 'doks_stage', businessSponsor: 'idp_a:example:e1a2b3c4-0000-4000-8000-000000000002' },
    });
    await until(() => api.get('governedagents', 'agents', 'research-agent')!.status.observedGeneration === 2, 'observedGeneration 2');
    const after = api.get('governedagents', 'agents', 'research-agent')!;
    expect(after.metadata.generation).toBe(2);
    expect(ready(after)).toMatchObject({ status: 'True', reason: 'Ready', observedGeneration: 2 });
    expect(after.status).toMatchObject({ lifecycle: 'active', activationBlockers: [] });
    const g = (await (await t.identity('/v1/governance/agents/research-agent')).json()) as Record<string, any>;
    expect(g).toMatchObject({
      status: 'active',
      risk_tier: 'critical',
      approved_runtime: 'doks_stage',
      business_sponsor: 'idp_a:example:e1a2b3c4-0000-4000-8000-000000000002',
    });
    expect(g.history.slice(4).map((h: { action: string; by: string; detail: string }) => [h.action, h.by, h.detail])).toEqual([
      [
        'updated',
        'kubernetes:test',
        'business_sponsor: "idp_a:example:e1a2b3c4-0000-4000-8000-000000000001" -> "idp_a:example:e1a2b3c4-0000-4000-8000-000000000002"',
      ],
      ['updated', 'kubernetes:test', 'risk_tier: "medium" -> "critical"'],
      ['updated', 'kubernetes:test', 'approved_runtime: "doks_prod" -> "doks_stage"'],
    ]);
    expect(await s.resync()).toBe(0);
  });

  it('a CR that was never applied (another owner holds its name) is deleted cleanly; 410 Gone after a compaction relists', async () => {
    await t.registry.upsert({ name: 'taken', upstream: 'mine.svc:1' });
    api.apply({ apiVersion: 'writ.io/v1alpha1', kind: 'RegistryService', metadata: { name: 'taken', namespace: 'default' }, spec: { upstream: 'x.svc:1' } });
    const s = start('op-a');
    await s.synced;
    await until(() => ready(api.get('registryservices', 'default', 'taken'))?.reason === 'Conflict', 'Conflict status');
    api.remove('registryservices', 'default', 'taken');
    await until(() => api.get('registryservices', 'default', 'taken') === undefined, 'deleted');
    expect(t.registry.get('taken')!.upstream).toBe('mine.svc:1');

    // The watch connections drop; meanwhile a CR is created and history is compacted: the
    // informers' resume from their old resourceVersion gets 410 and they relist.
    api.dropWatches();
    api.apply({ apiVersion: 'writ.io/v1alpha1', kind: 'RegistryService', metadata: { name: 'late', namespace: 'default' }, spec: { upstream: 'late.svc:1' } });
    api.compact();
    await until(() => t.registry.get('late') !== undefined, 'the CR created during the gap', 60_000);
    expect(api.requests.filter((r) => r.verb === 'list' && r.resource === 'registryservices').length).toBeGreaterThanOrEqual(2);
  }, 120_000);

  it('leader election: one writer of two; kill it and the other takes over within the lease duration; never two at once', async () => {
    for (const d of exampleDocs()) api.apply(d);
    const a = start('op-a');
    const b = start('op-b');
    let both = 0;
    const sampler = setInterval(() => {
      if (a.isLeader() && b.isLeader()) both++;
    }, 5);
    try {
      await until(() => a.isLeader() || b.isLeader(), 'a leader');
      const [leader, follower] = a.isLeader() ? [a, b] : [b, a];
      await until(() => t.registry.list().length === EXAMPLE_ENTRIES, 'programmed by the leader');
      expect(follower.isLeader()).toBe(false);
      expect(await follower.resync()).toBe(0); // a follower never writes
      const killedAt = Date.now();
      await leader.crash();
      await until(() => follower.isLeader(), 'the follower to take over', 5_000);
      const tookMs = Date.now() - killedAt;
      console.log(`leader failover: ${tookMs} ms after the kill (lease duration 1500 ms, retry period 100 ms)`);
      // The follower may take over leaseDuration after it last saw the lease renewed (client-go's
      // rule), so the bound is the lease duration plus a retry period and scheduling slack on a
      // shared 2-core machine.
      expect(tookMs).toBeLessThan(2 * 1500);
      // The new leader writes: a new CR gets programmed.
      api.apply({
        apiVersion: 'writ.io/v1alpha1',
        kind: 'RegistryService',
        metadata: { name: 'after-failover', namespace: 'default' },
        spec: { upstream: 'a.svc:1' },
      });
      await until(() => t.registry.get('after-failover') !== undefined, 'the new leader to program');
      expect(both).toBe(0);
      expect(api.get('leases', 'writ-system', 'writ-io-operator')!.spec).toMatchObject({
        holderIdentity: follower === a ? 'op-a' : 'op-b',
        leaseTransitions: 1,
      });
    } finally {
      clearInterval(sampler);
    }
  });

  it('every request the operator made is granted by its RBAC table', async () => {
    for (const d of exampleDocs()) api.apply(d);
    const s = start('op-a');
    await s.synced;
    await until(() => t.registry.list().length === EXAMPLE_ENTRIES, 'programmed');
    api.remove('registryservices', 'default', 'web');
    await until(() => api.get('registryservices', 'default', 'web') === undefined, 'deleted');
    await s.close();
    const made = new Set(api.requests.map((r) => `${r.group}|${r.resource}|${r.verb}`));
    const granted = new Set(accessTriples());
    for (const m of made) expect(granted.has(m), m).toBe(true);
    // And the table holds nothing the operator did not do: the RBAC is exactly what the code uses.
    expect([...made].sort()).toEqual(accessTriples());
  });
});
