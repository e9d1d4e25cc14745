import { describe, expect, it } from 'vitest';
import { managerConflicts } from './conflicts.js';
import { planSync, type CurrentEmployee, type EmployeeWrite, type SyncPlan } from './plan.js';
import type { GroupRow } from './repo.js';
import { ENTRA, entraSnapshot, entraUser, OKTA, oktaSnapshot } from './fixtures.js';
import { parseGroup, parseUser, SCHEMA_GROUP } from './scim.js';

const T0 = '2026-01-01T00:00:00.000Z';
const T1 = '2026-01-02T00:00:00.000Z';
const subj = (ext: string, tenant = 'contoso', idp = 'idp_a') => `${idp}:${tenant}:${ext}`;

type Row = Omit<EmployeeWrite, 'syncHash'> & { syncHash: string | null };
/** Applies a plan's employee writes and deactivations to the rows, as sync.ts does in SQL. */
function apply(cur: Row[], plan: Pick<SyncPlan, 'employeeWrites' | 'deactivations'>, now = T1): Row[] {
  const m = new Map(cur.map((r) => [r.employeeSubject, r]));
  for (const w of plan.employeeWrites) m.set(w.employeeSubject, w);
  for (const s of plan.deactivations) {
    const r = m.get(s)!;
    m.set(s, { ...r, status: 'inactive', groups: [], updatedAt: now, lastSyncedAt: now, deactivatedAt: now, syncHash: null });
  }
  return [...m.values()];
}
/** The columns sync.ts loads for the planner. */
const state = (rows: Row[]): CurrentEmployee[] =>
  rows.map((r) => ({
    employeeSubject: r.employeeSubject,
    tenantId: r.tenantId,
    idp: r.idp,
    externalId: r.externalId,
    status: r.status,
    managerSubject: r.managerSubject,
    groupsJson: JSON.stringify(r.groups),
    createdAt: r.createdAt,
    deactivatedAt: r.deactivatedAt,
    syncHash: r.syncHash,
  }));
function applyGroups(cur: GroupRow[], writes: GroupRow[]): GroupRow[] {
  const m = new Map(cur.map((r) => [r.groupKey, r]));
  for (const w of writes) m.set(w.groupKey, w);
  return [...m.values()];
}

function first() {
  const snap = entraSnapshot();
  const plan = planSync({ tenantId: 'contoso', idp: 'idp_a', ...snap, currentEmployees: [], currentGroups: [], now: T0 });
  return { snap, plan, rows: apply([], plan, T0), groups: applyGroups([], plan.groupWrites) };
}

describe('scim parsing', () => {
  it('reads an Entra-style user: primary email, names, enterprise extension, roles, entitlements', () => {
    const p = parseUser(
      entraUser({ oid: 'o1', upn: 'a@x.com', given: 'A', family: 'B', department: 'Eng', managerOid: 'm1', roles: ['R2', 'R1', 'R1'], apps: ['z', 'a'] }),
    );
    expect(p.ok).toBe(true);
    if (!p.ok) return;
    expect(p.value).toMatchObject({
      externalId: 'o1',
      email: 'a@x.com',
      givenName: 'A',
      familyName: 'B',
      department: 'Eng',
      managerRef: 'm1',
      roles: ['R1', 'R2'],
      appAssignments: ['a', 'z'],
      active: true,
      groupRefs: null,
    });
  });
  it.each([
    [{ userName: 'x@y.com' }, 'externalId is required'],
    [{ externalId: '' }, 'externalId is required'],
    [{ externalId: 'e', active: 42 }, 'active must be a boolean'],
    [{ externalId: 'e', emails: 'x' }, 'emails must be an array'],
    [{ externalId: 'e', schemas: [SCHEMA_GROUP] }, 'not a SCIM User'],
    [{ externalId: 'e', entitlements: [{}] }, 'entitlements[0].value is required'],
    [{ externalId: 'e', name: 'Bob' }, 'name must be an object'],
    ['just a string', 'must be a JSON object'],
  ])('rejects %j', (raw, msg) => {
    const p = parseUser(raw);
    expect(p.ok).toBe(false);
    if (!p.ok) expect(p.error).toContain(msg);
  });
  it('falls back to userName for email only when it is an address; never derives the id from it', () => {
    const p = parseUser({ externalId: 'e1', userName: 'u@x.com' });
    expect(p.ok && p.value.email).toBe('u@x.com');
    const q = parseUser({ externalId: 'e2', userName: 'jdoe' });
    expect(q.ok && q.value.email).toBe(null);
  });
  it('skips nested group members and requires member values', () => {
    const g = parseGroup({ externalId: 'g', members: [{ value: 'u1' }, { value: 'g2', type: 'Group' }] });
    expect(g.ok && g.value.memberRefs).toEqual(['u1']);
    const bad = parseGroup({ externalId: 'g', members: [{ display: 'x' }] });
    expect(bad.ok).toBe(false);
  });
});

describe('planSync', () => {
  it('creates every user and group of a first snapshot, with subjects from externalId', () => {
    const { plan, rows, groups } = first();
    expect(plan.status).toBe('ok');
    expect(plan.counts).toMatchObject({ users_created: 7, users_updated: 0, users_deactivated: 0, groups_created: 3, errors: 0 });
    const alice = rows.find((r) => r.externalId === ENTRA.alice)!;
    expect(alice).toMatchObject({
      employeeSubject: subj(ENTRA.alice),
      email: 'alice@contoso.com',
      managerSubject: subj(ENTRA.engMgr),
      groups: [ENTRA.gEng],
      appAssignments: ['aws-dev', 'github'],
      status: 'active',
      createdAt: T0,
      deactivatedAt: null,
    });
    const dave = rows.find((r) => r.externalId === ENTRA.dave)!;
    expect(dave.status).toBe('inactive');
    expect(dave.deactivatedAt).toBe(T0);
    const eng = groups.find((g) => g.externalId === ENTRA.gEng)!;
    expect(eng.groupKey).toBe(`contoso:${ENTRA.gEng}`);
    expect(eng.members).toEqual([ENTRA.alice, ENTRA.bob, ENTRA.engMgr, ENTRA.dave].map((e) => subj(e)).sort());
    const cto = rows.find((r) => r.externalId === ENTRA.cto)!;
    expect(cto.groups).toEqual([ENTRA.gApprovers]);
  });

  it('plans nothing for the same snapshot twice', () => {
    const { snap, rows, groups } = first();
    const again = planSync({ tenantId: 'contoso', idp: 'idp_a', ...snap, currentEmployees: state(rows), currentGroups: groups, now: T1 });
    expect(again.employeeWrites).toEqual([]);
    expect(again.groupWrites).toEqual([]);
    expect(again.counts).toMatchObject({ users_unchanged: 7, groups_unchanged: 3, users_created: 0, users_updated: 0 });
  });

  it('updates, deactivates absent users, reactivates, and reports manager conflicts', () => {
    const { snap, rows, groups } = first();
    const users = snap.users
      .filter((u) => u.externalId !== ENTRA.bob && u.externalId !== ENTRA.engMgr)
      .map((u) => (u.externalId === ENTRA.alice ? { ...u, title: 'Principal Engineer' } : u.externalId === ENTRA.dave ? { ...u, active: true } : u));
    const p = planSync({ tenantId: 'contoso', idp: 'idp_a', users, groups: snap.groups, currentEmployees: state(rows), currentGroups: groups, now: T1 });
    expect(p.counts).toMatchObject({ users_updated: 1, users_deactivated: 2, users_reactivated: 1, users_unchanged: 3, groups_updated: 2 });
    expect(p.deactivations.sort()).toEqual([subj(ENTRA.engMgr), subj(ENTRA.bob)].sort());
    const after = apply(rows, p);
    const bob = after.find((r) => r.externalId === ENTRA.bob)!;
    expect(bob).toMatchObject({ status: 'inactive', deactivatedAt: T1, groups: [], createdAt: T0 });
    const dave = after.find((r) => r.externalId === ENTRA.dave)!;
    expect(dave).toMatchObject({ status: 'active', deactivatedAt: null });
    // alice and dave report to the now-inactive engineering manager
    expect(p.conflicts.map((c) => [c.type, c.subject])).toEqual([subj(ENTRA.alice), subj(ENTRA.dave)].sort().map((s) => ['manager_inactive', s]));
  });

  it('flags a manager that is not in the tenant as manager_missing', () => {
    const users = [entraUser({ oid: 'x1', upn: 'x@c.com', given: 'X', family: 'Y', managerOid: 'ghost' })];
    const p = planSync({ tenantId: 'contoso', idp: 'idp_a', users, groups: [], currentEmployees: [], currentGroups: [], now: T0 });
    expect(p.conflicts).toEqual([{ type: 'manager_missing', subject: subj('x1'), detail: expect.stringContaining(subj('ghost')) }]);
  });

  it('skips malformed records as errors (partial) without deactivating the user they name', () => {
    const { snap, rows, groups } = first();
    const users = snap.users.map((u) => (u.externalId === ENTRA.bob ? { ...u, active: 'maybe' } : u));
    users.push({ userName: 'noid@contoso.com' }, { externalId: ENTRA.alice, displayName: 'dup' });
    const p = planSync({
      tenantId: 'contoso',
      idp: 'idp_a',
      users,
      groups: [...snap.groups, { displayName: 'no id' }],
      currentEmployees: state(rows),
      currentGroups: groups,
      now: T1,
    });
    expect(p.status).toBe('partial');
    expect(p.counts.errors).toBe(4);
    expect(p.errors).toEqual([
      { resource_type: 'User', external_id: ENTRA.bob, error: 'active must be a boolean' },
      { resource_type: 'User', external_id: 'users[7]', error: expect.stringContaining('externalId is required') },
      { resource_type: 'User', external_id: ENTRA.alice, error: expect.stringContaining('duplicate') },
      { resource_type: 'Group', external_id: 'groups[3]', error: expect.stringContaining('externalId is required') },
    ]);
    expect(p.employeeWrites.find((w) => w.externalId === ENTRA.bob)).toBeUndefined();
    expect(p.deactivations).toEqual([]);
    // bob stays a member of his group: the group's member list still resolves him
    expect(p.groupWrites).toEqual([]);
  });

  it('resolves Okta-style members and managers given as SCIM ids', () => {
    const snap = oktaSnapshot();
    const p = planSync({ tenantId: 'initech', idp: 'idp_b', ...snap, currentEmployees: [], currentGroups: [], now: T0 });
    expect(p.status).toBe('ok');
    const s = (o: { oktaId: string }) => `idp_b:initech:${o.oktaId}`;
    const peggy = p.employeeWrites.find((w) => w.externalId === OKTA.peggy.oktaId)!;
    expect(peggy).toMatchObject({
      employeeSubject: s(OKTA.peggy),
      managerSubject: s(OKTA.boss),
      externalIdpId: OKTA.peggy.scimId,
      groups: [OKTA.group.oktaId],
    });
    const tps = p.groupWrites.find((g) => g.externalId === OKTA.group.oktaId)!;
    expect(tps.members).toEqual([s(OKTA.peggy), s(OKTA.milton)]);
    const everyone = p.groupWrites.find((g) => g.externalId === '00g2allEEEEEEEEEEE4x7')!;
    expect(everyone.members).toEqual([s(OKTA.boss)]);
  });

  it('leaves groups alone when the snapshot omits them', () => {
    const { snap, rows, groups } = first();
    const p = planSync({
      tenantId: 'contoso',
      idp: 'idp_a',
      users: snap.users,
      groups: undefined,
      currentEmployees: state(rows),
      currentGroups: groups,
      now: T1,
    });
    expect(p.employeeWrites).toEqual([]);
    expect(p.groupWrites).toEqual([]);
  });

  it('empties the members of a group that left the snapshot', () => {
    const { snap, rows, groups } = first();
    const p = planSync({
      tenantId: 'contoso',
      idp: 'idp_a',
      users: snap.users,
      groups: snap.groups.slice(1),
      currentEmployees: state(rows),
      currentGroups: groups,
      now: T1,
    });
    expect(p.groupWrites).toEqual([expect.objectContaining({ externalId: ENTRA.gEng, members: [] })]);
    expect(p.counts.users_updated).toBe(4);
  });

  it('never deactivates another idp of the same tenant, nor another tenant', () => {
    const { rows } = first();
    const p = planSync({ tenantId: 'contoso', idp: 'idp_b', users: [], groups: undefined, currentEmployees: state(rows), currentGroups: [], now: T1 });
    expect(p.employeeWrites).toEqual([]);
    const q = planSync({ tenantId: 'fabrikam', idp: 'idp_a', users: [], groups: [], currentEmployees: state(rows), currentGroups: [], now: T1 });
    expect(q.employeeWrites).toEqual([]);
  });

  it('managerConflicts ignores inactive employees', () => {
    const st = new Map<string, 'active' | 'inactive'>([
      ['a', 'inactive'],
      ['b', 'active'],
    ]);
    expect(
      managerConflicts(
        't',
        st,
        new Map([
          ['a', 'zz'],
          ['b', null],
        ]),
      ),
    ).toEqual([]);
  });
});
