/**
 * Differential property test for the optimised planner and parser (issue 4): on random snapshots
 * (valid, invalid and duplicate records, SCIM-id and externalId references, groups omitted or
 * not) against random prior states (rows of several idps, skipped, inactive, stale hashes), the
 * result must equal the frozen pre-optimisation implementation in e2e/fixtures/directory-reference/ field for field.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { planSync, planSyncLight, type CurrentEmployee, type Idp, type SyncPlan } from './plan.js';
import { parseGroup, parseUser, SCHEMA_ENTERPRISE_USER, SCHEMA_USER } from './scim.js';
import { planSync as refPlanSync } from '../../../../e2e/fixtures/directory-reference/plan.js';
import { parseGroup as refParseGroup, parseUser as refParseUser } from '../../../../e2e/fixtures/directory-reference/scim.js';
import type { GroupRow } from './repo.js';

const EXT = ['a', 'b', 'c', 'd', 'e', 'f', ' g ', 'h'];
const SCIM = ['s1', 's2', 's3', 'a'];
const GROUPS = ['g1', 'g2', 'g3', 'sg1'];
const T0 = '2026-01-01T00:00:00.000Z';
const T1 = '2026-01-02T00:00:00.000Z';

const pick = <T>(xs: readonly T[]) => fc.constantFrom(...xs);
const ref = fc.oneof(pick(EXT), pick(SCIM), pick(['zz', 'x\u0001', '']));
const opt = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined });

const validUser = fc.record(
  {
    schemas: opt(fc.constantFrom([SCHEMA_USER], [SCHEMA_USER, SCHEMA_ENTERPRISE_USER], ['urn:x'], [3])),
    externalId: pick(EXT),
    id: opt(fc.oneof(pick(SCIM), fc.constant(7))),
    userName: opt(fc.constantFrom('u@x.com', 'plain', ' ')),
    displayName: opt(fc.constantFrom('A B', '  A B  ', '', 'Z')),
    title: opt(fc.constantFrom('Eng', 'Mgr', null)),
    active: opt(fc.constantFrom(true, false, 'True', 'false', null)),
    name: opt(fc.record({ givenName: opt(fc.constantFrom('A', ' B')), familyName: opt(fc.constantFrom('C', '')) })),
    emails: opt(
      fc.array(fc.record({ value: opt(fc.constantFrom('p@x.com', 'q@x.com', '')), primary: opt(fc.constantFrom(true, false, 'True')) }), { maxLength: 3 }),
    ),
    roles: opt(fc.array(fc.oneof(fc.record({ value: pick(['r1', 'r2', ' r1']) }), pick(['r2', 'r3'])), { maxLength: 4 })),
    entitlements: opt(fc.array(fc.record({ value: pick(['app1', 'app2']) }), { maxLength: 3 })),
    groups: opt(fc.array(fc.record({ value: fc.oneof(pick(GROUPS), pick(['unknown-g'])) }), { maxLength: 3 })),
    [SCHEMA_ENTERPRISE_USER]: opt(fc.record({ department: opt(fc.constantFrom('D1', 'D2')), manager: opt(fc.oneof(fc.record({ value: ref }), ref)) })),
  },
  { requiredKeys: ['externalId'] },
);
const badUser = fc.oneof(
  fc.constantFrom<unknown>(null, 'x', [], { userName: 'no-ext' }, { id: 's1' }),
  pick(EXT).map((externalId) => ({ externalId, active: 5 })),
  pick(EXT).map((externalId) => ({ externalId, emails: [{ value: 3 }] })),
  pick(EXT).map((externalId) => ({ externalId, roles: [{ display: 'no value' }] })),
  pick(EXT).map((externalId) => ({ externalId, name: 'not an object' })),
  fc.constant({ externalId: 'a\u0007' }),
);
const group = fc.oneof(
  fc.record(
    {
      externalId: pick(GROUPS),
      id: opt(pick(['sg1', 'sg2'])),
      displayName: opt(fc.constantFrom('G', 'H')),
      members: opt(fc.array(fc.record({ value: fc.oneof(ref, pick(GROUPS)), type: opt(fc.constantFrom('User', 'Group', 'group')) }), { maxLength: 6 })),
    },
    { requiredKeys: ['externalId'] },
  ),
  fc.constantFrom<unknown>({ externalId: 'g2', members: 'x' }, { externalId: 'g3', members: [{ type: 'User' }] }, { members: [] }, 4),
);
const snapshot = fc.record({
  users: fc.array(fc.oneof({ weight: 4, arbitrary: validUser }, { weight: 1, arbitrary: badUser }), { maxLength: 10 }),
  groups: opt(fc.array(group, { maxLength: 4 })),
});
const extraRow = fc.record({
  idp: fc.constantFrom<Idp>('idp_a', 'idp_b'),
  ext: pick(EXT),
  status: fc.constantFrom<'active' | 'inactive'>('active', 'inactive'),
  manager: fc.option(
    fc.oneof(
      pick(EXT).map((e) => `idp_a:t:${e}`),
      fc.constant('idp_b:t:zz'),
    ),
    { nil: null },
  ),
  hash: fc.option(fc.constant('stale'), { nil: null }),
});

type Input = Parameters<typeof planSync>[0];
type Snap = { users: unknown[]; groups: unknown[] | undefined };
type Extra = { idp: Idp; ext: string; status: 'active' | 'inactive'; manager: string | null; hash: string | null };
/** Prior state: a first sync of `prior` (reference planner) plus hand-made rows. */
function priorState(prior: Snap, extra: Extra[], idp: Idp): { cur: CurrentEmployee[]; groups: GroupRow[] } {
  const plan = refPlanSync({ tenantId: 't', idp, users: prior.users, groups: prior.groups, currentEmployees: [], currentGroups: [], now: T0 });
  const rows = new Map<string, CurrentEmployee>();
  for (const w of plan.employeeWrites) {
    rows.set(w.employeeSubject, {
      employeeSubject: w.employeeSubject,
      tenantId: 't',
      idp: w.idp,
      externalId: w.externalId,
      status: w.status,
      managerSubject: w.managerSubject,
      groupsJson: JSON.stringify(w.groups),
      createdAt: w.createdAt,
      deactivatedAt: w.deactivatedAt,
      syncHash: w.syncHash,
    });
  }
  for (const x of extra) {
    const s = `${x.idp}:t:${x.ext}`;
    const prev = rows.get(s);
    rows.set(s, {
      employeeSubject: s,
      tenantId: 't',
      idp: x.idp,
      externalId: x.ext,
      status: x.status,
      managerSubject: x.manager,
      groupsJson: prev?.groupsJson ?? '["g1"]',
      createdAt: T0,
      deactivatedAt: x.status === 'inactive' ? T0 : null,
      syncHash: x.hash ?? prev?.syncHash ?? null,
    });
  }
  // A row of another tenant is ignored by both.
  rows.set('idp_a:other:a', {
    employeeSubject: 'idp_a:other:a',
    tenantId: 'other',
    idp: 'idp_a',
    externalId: 'a',
    status: 'active',
    managerSubject: null,
    groupsJson: '[]',
    createdAt: T0,
    deactivatedAt: null,
    syncHash: null,
  });
  return { cur: [...rows.values()], groups: plan.groupWrites };
}

/**
 * The light-state path of sync.ts: rows with only subject, idp, externalId, status and digest;
 * the rows the staged plan names in `need` get their other columns back, the rest keep placeholders.
 */
function planLight(input: Input): { plan: SyncPlan; needed: number } | null {
  const light = input.currentEmployees.map((r) => ({ ...r, managerSubject: null, groupsJson: '[]', createdAt: '', deactivatedAt: null }));
  const staged = planSyncLight({ ...input, currentEmployees: light });
  if (!staged) return null;
  const full = new Map(input.currentEmployees.map((r) => [r.employeeSubject, r]));
  for (const r of staged.need) {
    const f = full.get(r.employeeSubject)!;
    r.managerSubject = f.managerSubject;
    r.createdAt = f.createdAt;
    r.deactivatedAt = f.deactivatedAt;
  }
  return { plan: staged.finish(), needed: staged.need.length };
}

describe('optimised planner equals the reference implementation', () => {
  it('parses every record identically', () => {
    fc.assert(
      fc.property(fc.oneof(validUser, badUser), group, (u, g) => {
        expect(parseUser(u)).toEqual(refParseUser(u));
        expect(parseGroup(g)).toEqual(refParseGroup(g));
      }),
      { numRuns: 400 },
    );
  });

  it('plans identically (writes, deactivations, groups, counts, errors, conflicts)', () => {
    fc.assert(
      fc.property(snapshot, snapshot, fc.array(extraRow, { maxLength: 4 }), fc.constantFrom<Idp>('idp_a', 'idp_b'), (prior, next, extra, idp) => {
        const { cur, groups } = priorState(prior, extra, idp);
        const input: Input = { tenantId: 't', idp, users: next.users, groups: next.groups, currentEmployees: cur, currentGroups: groups, now: T1 };
        expect(planSync(input)).toEqual(refPlanSync(input));
      }),
      { numRuns: 400 },
    );
  });

  it('plans identically from the light state plus the rows it names (sync.ts path)', () => {
    let staged = 0;
    fc.assert(
      fc.property(snapshot, snapshot, fc.array(extraRow, { maxLength: 4 }), fc.constantFrom<Idp>('idp_a', 'idp_b'), (prior, next, extra, idp) => {
        const { cur, groups } = priorState(prior, extra, idp);
        const input: Input = { tenantId: 't', idp, users: next.users, groups: next.groups, currentEmployees: cur, currentGroups: groups, now: T1 };
        const light = planLight(input);
        if (next.groups === undefined) expect(light).toBeNull();
        if (!light) return;
        staged++;
        expect(light.plan).toEqual(refPlanSync(input));
      }),
      { numRuns: 600 },
    );
    expect(staged).toBeGreaterThan(200);
  });

  it('an unchanged re-sync (every row matched) takes the same result as the reference', () => {
    fc.assert(
      fc.property(snapshot, fc.constantFrom<Idp>('idp_a', 'idp_b'), (snap, idp) => {
        const { cur, groups } = priorState(snap, [], idp);
        const input: Input = {
          tenantId: 't',
          idp,
          users: snap.users,
          groups: snap.groups,
          currentEmployees: cur.filter((r) => r.tenantId === 't'),
          currentGroups: groups,
          now: T1,
        };
        const plan = planSync(input);
        expect(plan).toEqual(refPlanSync(input));
        expect(plan.employeeWrites).toEqual([]);
        // From the light state it needs no other column of any row.
        const light = planLight(input);
        if (light) {
          expect(light.plan).toEqual(plan);
          expect(light.needed).toBe(0);
        }
      }),
      { numRuns: 300 },
    );
  });
});
