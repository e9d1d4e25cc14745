import { describe, expect, it } from 'vitest';
import { API_VERSION } from './crd/definitions.js';
import { reconcile, type ObservedWithAge } from './reconcile.js';
import { checkResource, keyOf } from './resource.js';
import { statusFor, type ApplyResult, type Outcome } from './status.js';

function cr(kind: string, name: string, spec: Record<string, unknown>, meta: Record<string, unknown> = {}, createdAt?: string): ObservedWithAge {
  const o = checkResource({ apiVersion: API_VERSION, kind, metadata: { name, namespace: 'ns', ...meta }, spec }, `test:${name}`).observed!;
  return createdAt ? { ...o, createdAt } : o;
}
const svc = (name: string, spec: Record<string, unknown> = {}, meta?: Record<string, unknown>, at?: string) =>
  cr('RegistryService', name, { upstream: `${name}.svc:80`, ...spec }, meta, at);
const pol = (name: string, spec: Record<string, unknown> = {}, meta?: Record<string, unknown>, at?: string) =>
  cr('AgentPolicy', name, { agent: name, ...spec }, meta, at);
const gov = (name: string, spec: Record<string, unknown> = {}) =>
  cr('GovernedAgent', name, { tenant: 't', ownerType: 'employee', ownerRef: 'idp_a:t:1', ...spec });

const applied = (over: Partial<ApplyResult>): ApplyResult => ({
  version: 7,
  created: [],
  updated: [],
  deleted: [],
  unchanged: [],
  conflicts: [],
  conflictOwners: {},
  invalid: [],
  ...over,
});
const outcome = (over: Partial<Outcome> = {}): Outcome => ({ identityErrors: new Map(), governed: new Map(), ...over });
const NOW = '2026-01-01T00:00:00Z';
const cond = (s: ReturnType<typeof statusFor>, t: string) => s.conditions.find((c) => c.type === t)!;

describe('reconcile (pure): observed CRs -> desired state', () => {
  it('create: services, agent policies (default upstream) and governed agents become desired entries', () => {
    const d = reconcile([
      svc('web', { public: true }),
      pol('bot', { allowTools: ['search'], budget: { callsPerHour: 5 }, identity: { role: 'r' } }),
      gov('bot', { state: 'approved' }),
    ]);
    expect(d.services).toEqual([
      { name: 'bot', upstream: 'bot.ns.svc:8080', kind: 'agent', allowTools: ['search'], budget: { callsPerHour: 5 } },
      { name: 'web', upstream: 'web.svc:80', public: true, kind: 'service' },
    ]);
    expect(d.identities).toEqual([{ name: 'bot', role: 'r', capabilities: [] }]);
    expect(d.governed).toEqual([{ name: 'bot', tenant: 't', ownerType: 'employee', ownerRef: 'idp_a:t:1', state: 'approved' }]);
    expect([...d.verdicts.values()].every((v) => v.accepted)).toBe(true);
  });

  it('update: a changed spec changes the desired entry (level-based, no memory of the old one)', () => {
    const before = reconcile([pol('bot', { allowTools: ['a'] })]);
    const after = reconcile([pol('bot', { allowTools: ['a', 'b'], dataClass: 'regulated' }, { generation: 2 })]);
    expect(before.services[0]!.allowTools).toEqual(['a']);
    expect(after.services[0]).toMatchObject({ allowTools: ['a', 'b'], dataClass: 'regulated' });
  });

  it('delete: a resource being deleted contributes nothing and is listed for its finalizer', () => {
    const d = reconcile([svc('web'), svc('gone', {}, { deletionTimestamp: NOW })]);
    expect(d.services.map((s) => s.name)).toEqual(['web']);
    expect(d.deleting).toEqual(['RegistryService/ns/gone']);
    expect(d.verdicts.has('RegistryService/ns/gone')).toBe(false);
  });

  it('invalid CR: Accepted=False Invalid, the others proceed', () => {
    const bad = cr('RegistryService', 'bad', { upstream: 'nope' });
    const d = reconcile([bad, svc('web')]);
    expect(d.services.map((s) => s.name)).toEqual(['web']);
    const s = statusFor(bad, d, outcome({ apply: applied({ unchanged: ['web'] }) }), NOW);
    expect(cond(s, 'Accepted')).toMatchObject({ status: 'False', reason: 'Invalid' });
    expect(cond(s, 'Accepted').message).toContain('spec.upstream');
    expect(cond(s, 'Ready')).toMatchObject({ status: 'False', reason: 'Invalid' });
  });

  it('conflict between two resources: the older wins, the loser is Conflict and contributes nothing', () => {
    const older = svc('search', { owner: 'old' }, { namespace: 'b' }, '2026-01-01T00:00:00Z');
    const newer = pol('search', {}, { namespace: 'a' }, '2026-02-01T00:00:00Z');
    for (const order of [
      [older, newer],
      [newer, older],
    ]) {
      const d = reconcile(order);
      expect(d.services).toEqual([{ name: 'search', upstream: 'search.svc:80', public: false, kind: 'service', owner: 'old' }]);
      expect(d.verdicts.get(keyOf(newer))).toEqual({
        accepted: false,
        reason: 'Conflict',
        message: 'registry name search is already claimed by RegistryService/b/search',
      });
    }
  });

  it('conflict with another owner (the api owner holds the entry): Programmed=False Conflict, Accepted stays True', () => {
    const r = svc('orders');
    const d = reconcile([r]);
    const s = statusFor(r, d, outcome({ version: 3, apply: applied({ version: 3, conflicts: ['orders'], conflictOwners: { orders: 'api' } }) }), NOW);
    expect(cond(s, 'Accepted').status).toBe('True');
    expect(cond(s, 'Programmed')).toMatchObject({ status: 'False', reason: 'Conflict', message: 'registry entry orders is owned by api' });
    expect(cond(s, 'Ready').reason).toBe('Conflict');
    expect(s.policyVersion).toBeUndefined();
  });

  it('drift: the desired state does not depend on what the registry holds, so the next apply puts it back', () => {
    const d1 = reconcile([pol('bot', { allowTools: ['a'] })]);
    const d2 = reconcile([pol('bot', { allowTools: ['a'] })]);
    expect(d2.services).toEqual(d1.services);
    // The apply reports the entry it rewrote as updated: the status moves policyVersion to it.
    const r = pol('bot', { allowTools: ['a'] });
    const first = statusFor(r, d1, outcome({ version: 4, apply: applied({ version: 4, created: ['bot'] }) }), NOW);
    const steady = statusFor(r, d1, outcome({ version: 6, apply: applied({ version: 6, unchanged: ['bot'] }) }), '2026-01-02T00:00:00Z', first);
    expect(steady).toEqual(first);
    const fixed = statusFor(r, d1, outcome({ version: 9, apply: applied({ version: 9, updated: ['bot'] }) }), '2026-01-03T00:00:00Z', first);
    expect(fixed.policyVersion).toBe(9);
    expect(cond(fixed, 'Ready').lastTransitionTime).toBe(NOW);
  });

  it('ordering: a policy naming an agent (and a governed agent) that appear later gives the same desired state', () => {
    const items = [pol('research', { allowAgents: ['summarizer'] }), gov('summarizer', { state: 'approved' }), pol('summarizer')];
    const a = reconcile(items);
    const b = reconcile([...items].reverse());
    expect(b.services).toEqual(a.services);
    expect(b.governed).toEqual(a.governed);
    expect([...b.verdicts].sort()).toEqual([...a.verdicts].sort());
    expect(a.services.map((s) => s.name)).toEqual(['research', 'summarizer']);
  });

  it('a governed agent and an agent policy of the same name do not conflict (different claims)', () => {
    const d = reconcile([pol('bot'), gov('bot')]);
    expect([...d.verdicts.values()].every((v) => v.accepted)).toBe(true);
  });

  it('the same resource declared twice (a duplicated document) is a conflict on the second', () => {
    const a = svc('web');
    const b = { ...svc('web', { owner: 'x' }), origin: 'other.yaml:3' };
    const d = reconcile([a, b]);
    expect(d.services).toHaveLength(1);
    expect([...d.verdicts.values()].filter((v) => !v.accepted)).toEqual([
      { accepted: false, reason: 'Conflict', message: 'RegistryService/ns/web is declared twice (other.yaml:3)' },
    ]);
  });
});

describe('status projection', () => {
  it('programmed and ready with observedGeneration on each condition', () => {
    const r = pol('bot', {}, { generation: 3 });
    const d = reconcile([r]);
    const s = statusFor(r, d, outcome({ version: 5, apply: applied({ version: 5, created: ['bot'] }) }), NOW);
    expect(s).toMatchObject({ observedGeneration: 3, policyVersion: 5 });
    expect(s.conditions.map((c) => [c.type, c.status, c.reason, c.observedGeneration])).toEqual([
      ['Accepted', 'True', 'Accepted', 3],
      ['Programmed', 'True', 'Programmed', 3],
      ['Ready', 'True', 'Ready', 3],
    ]);
  });

  it('apply failure, apply rejection and identity failure surface as reasons', () => {
    const r = pol('bot', { identity: { role: 'r' } });
    const d = reconcile([r]);
    expect(cond(statusFor(r, d, outcome({ applyError: 'connection refused' }), NOW), 'Ready')).toMatchObject({ status: 'False', reason: 'ApplyFailed' });
    expect(cond(statusFor(r, d, outcome({ apply: applied({ invalid: [{ name: 'bot', error: 'upstream: bad' }] }) }), NOW), 'Programmed')).toMatchObject({
      reason: 'Rejected',
      message: 'upstream: bad',
    });
    const idErr = outcome({ apply: applied({ unchanged: ['bot'] }), identityErrors: new Map([['bot', '500 boom']]) });
    expect(cond(statusFor(r, d, idErr, NOW), 'Ready')).toMatchObject({ status: 'False', reason: 'IdentityFailed' });
    expect(cond(statusFor(r, d, outcome(), NOW), 'Ready')).toMatchObject({ status: 'Unknown', reason: 'Pending' });
  });

  it('governed agents report lifecycle, blockers and the identity authority answer', () => {
    const r = gov('bot', { state: 'active', businessSponsor: 's', riskTier: 'low', approvedRuntime: 'doks_prod' });
    const d = reconcile([r]);
    const blocked = outcome({
      governed: new Map([
        ['bot', { lifecycle: 'approved', blockers: ['owner_inactive'], reason: 'Blocked' as const, message: 'activation gate not met: owner_inactive' }],
      ]),
    });
    const s = statusFor(r, d, blocked, NOW);
    expect(s).toMatchObject({ lifecycle: 'approved', activationBlockers: ['owner_inactive'] });
    expect(cond(s, 'Ready')).toMatchObject({ status: 'False', reason: 'Blocked' });
    const fine = statusFor(r, d, outcome({ version: 2, governed: new Map([['bot', { lifecycle: 'active', blockers: [] }]]) }), NOW);
    expect(cond(fine, 'Ready')).toMatchObject({ status: 'True', message: 'governed agent is active' });
  });
});
