/**
 * SCIM 2.0 snapshots shaped like what real providers send: an Entra-style tenant (`idp_a`:
 * externalId = the directory objectId GUID, enterprise extension with manager.value, roles of type
 * WindowsAzureActiveDirectoryRole, "True" string booleans in places) and an Okta-style tenant
 * (`idp_b`: SCIM `id` assigned by the service provider, `externalId` = the Okta `00u…` id, group
 * members and manager referencing the SCIM `id`). Used by the tests and the benchmark.
 */
import { SCHEMA_ENTERPRISE_USER, SCHEMA_GROUP, SCHEMA_USER } from './scim.js';

export const ENTRA_TID = '72f988bf-86f1-41af-91ab-2d7cd011db47';

export interface EntraPerson {
  oid: string;
  upn: string;
  given: string;
  family: string;
  title?: string;
  department?: string;
  managerOid?: string;
  active?: boolean | string;
  roles?: string[];
  apps?: string[];
}

export function entraUser(p: EntraPerson): Record<string, unknown> {
  return {
    schemas: [SCHEMA_USER, SCHEMA_ENTERPRISE_USER],
    externalId: p.oid,
    userName: p.upn,
    active: p.active ?? true,
    displayName: `${p.given} ${p.family}`,
    title: p.title,
    emails: [
      { type: 'other', primary: false, value: `${p.given.toLowerCase()}@personal.example` },
      { type: 'work', primary: true, value: p.upn },
    ],
    name: { formatted: `${p.given} ${p.family}`, givenName: p.given, familyName: p.family },
    phoneNumbers: [{ type: 'work', value: '+1 425 555 0100' }],
    roles: (p.roles ?? []).map((value) => ({ primary: false, type: 'WindowsAzureActiveDirectoryRole', value })),
    entitlements: (p.apps ?? []).map((value) => ({ value })),
    [SCHEMA_ENTERPRISE_USER]: {
      employeeNumber: p.oid.slice(0, 6),
      department: p.department,
      ...(p.managerOid ? { manager: { value: p.managerOid } } : {}),
    },
  };
}

export function entraGroup(oid: string, displayName: string, memberOids: string[]): Record<string, unknown> {
  return {
    schemas: [SCHEMA_GROUP],
    externalId: oid,
    displayName,
    members: memberOids.map((value) => ({ value })),
  };
}

/** Entra-style tenant "contoso": a CTO, two managers, three engineers, one disabled account. */
export const ENTRA = {
  cto: '11111111-0000-4000-8000-000000000001',
  engMgr: '11111111-0000-4000-8000-000000000002',
  finMgr: '11111111-0000-4000-8000-000000000003',
  alice: '11111111-0000-4000-8000-000000000004',
  bob: '11111111-0000-4000-8000-000000000005',
  carol: '11111111-0000-4000-8000-000000000006',
  dave: '11111111-0000-4000-8000-000000000007',
  gEng: 'aaaaaaaa-0000-4000-8000-00000000000e',
  gFin: 'aaaaaaaa-0000-4000-8000-00000000000f',
  gApprovers: 'aaaaaaaa-0000-4000-8000-00000000000a',
} as const;

export function entraSnapshot(): { users: Record<string, unknown>[]; groups: Record<string, unknown>[] } {
  const E = ENTRA;
  const users = [
    entraUser({
      oid: E.cto,
      upn: 'cto@contoso.com',
      given: 'Casey',
      family: 'Tran',
      title: 'CTO',
      department: 'Office of the CTO',
      roles: ['Agent.Approver'],
      apps: ['github', 'aws-prod'],
    }),
    entraUser({
      oid: E.engMgr,
      upn: 'erin@contoso.com',
      given: 'Erin',
      family: 'Moss',
      title: 'Engineering Manager',
      department: 'Engineering',
      managerOid: E.cto,
      roles: ['Agent.Approver'],
      apps: ['github'],
    }),
    entraUser({
      oid: E.finMgr,
      upn: 'frank@contoso.com',
      given: 'Frank',
      family: 'Ng',
      title: 'Finance Manager',
      department: 'Finance',
      managerOid: E.cto,
      apps: ['netsuite'],
    }),
    entraUser({
      oid: E.alice,
      upn: 'alice@contoso.com',
      given: 'Alice',
      family: 'Adams',
      title: 'Staff Engineer',
      department: 'Engineering',
      managerOid: E.engMgr,
      apps: ['github', 'aws-dev'],
    }),
    entraUser({
      oid: E.bob,
      upn: 'bob@contoso.com',
      given: 'Bob',
      family: 'Baker',
      title: 'Engineer',
      department: 'Engineering',
      managerOid: E.engMgr,
      apps: ['github'],
    }),
    entraUser({
      oid: E.carol,
      upn: 'carol@contoso.com',
      given: 'Carol',
      family: 'Chen',
      title: 'Analyst',
      department: 'Finance',
      managerOid: E.finMgr,
      apps: ['netsuite'],
      active: 'True',
    }),
    entraUser({
      oid: E.dave,
      upn: 'dave@contoso.com',
      given: 'Dave',
      family: 'Diaz',
      title: 'Contractor',
      department: 'Engineering',
      managerOid: E.engMgr,
      active: false,
    }),
  ];
  const groups = [
    entraGroup(E.gEng, 'Engineering', [E.engMgr, E.alice, E.bob, E.dave]),
    entraGroup(E.gFin, 'Finance', [E.finMgr, E.carol]),
    entraGroup(E.gApprovers, 'Agent Approvers', [E.cto, E.engMgr]),
  ];
  return { users, groups };
}

export interface OktaPerson {
  scimId: string;
  oktaId: string;
  login: string;
  given: string;
  family: string;
  department?: string;
  managerScimId?: string;
  active?: boolean;
  roles?: string[];
}

export function oktaUser(p: OktaPerson): Record<string, unknown> {
  return {
    schemas: [SCHEMA_USER, SCHEMA_ENTERPRISE_USER],
    id: p.scimId,
    externalId: p.oktaId,
    userName: p.login,
    name: { givenName: p.given, familyName: p.family },
    displayName: `${p.given} ${p.family}`,
    emails: [{ primary: true, value: p.login, type: 'work' }],
    active: p.active ?? true,
    roles: (p.roles ?? []).map((value) => ({ value, display: value })),
    groups: [],
    meta: { resourceType: 'User' },
    [SCHEMA_ENTERPRISE_USER]: {
      organization: 'Initech',
      department: p.department,
      ...(p.managerScimId ? { manager: { value: p.managerScimId, displayName: 'manager' } } : {}),
    },
  };
}

export function oktaGroup(scimId: string, oktaId: string, displayName: string, memberScimIds: string[]): Record<string, unknown> {
  return {
    schemas: [SCHEMA_GROUP],
    id: scimId,
    externalId: oktaId,
    displayName,
    members: memberScimIds.map((value) => ({ value, display: value, type: 'User' })),
    meta: { resourceType: 'Group' },
  };
}

export const OKTA = {
  boss: { scimId: 'scim-u-1', oktaId: '00u1bossAAAAAAAAAA4x7' },
  peggy: { scimId: 'scim-u-2', oktaId: '00u2peggyBBBBBBBBB4x7' },
  milton: { scimId: 'scim-u-3', oktaId: '00u3miltonCCCCCCCC4x7' },
  group: { scimId: 'scim-g-1', oktaId: '00g1tpsDDDDDDDDDDD4x7' },
} as const;

export function oktaSnapshot(): { users: Record<string, unknown>[]; groups: Record<string, unknown>[] } {
  const O = OKTA;
  return {
    users: [
      oktaUser({ ...O.boss, login: 'bill@initech.example', given: 'Bill', family: 'Lumbergh', department: 'Management', roles: ['approver'] }),
      oktaUser({ ...O.peggy, login: 'peggy@initech.example', given: 'Peggy', family: 'Gibbons', department: 'Software', managerScimId: O.boss.scimId }),
      oktaUser({ ...O.milton, login: 'milton@initech.example', given: 'Milton', family: 'Waddams', department: 'Basement', managerScimId: O.boss.scimId }),
    ],
    groups: [
      oktaGroup(O.group.scimId, O.group.oktaId, 'TPS Reports', [O.peggy.scimId, O.milton.scimId]),
      // A nested group member is ignored (direct membership only).
      {
        ...oktaGroup('scim-g-2', '00g2allEEEEEEEEEEE4x7', 'Everyone', [O.boss.scimId]),
        members: [
          { value: O.boss.scimId, type: 'User' },
          { value: 'scim-g-1', type: 'Group' },
        ],
      },
    ],
  };
}

/**
 * A synthetic Entra-style snapshot of `n` users for the benchmark: a manager tree (fan-out 8),
 * one group per 50 users plus an all-hands group, two entitlements each.
 */
export function syntheticSnapshot(n: number, seed = 'bench'): { users: Record<string, unknown>[]; groups: Record<string, unknown>[] } {
  const oid = (i: number) => `${seed}-${i.toString(16).padStart(8, '0')}-4000-8000-000000000000`;
  const users: Record<string, unknown>[] = [];
  const teams = new Map<number, string[]>();
  for (let i = 0; i < n; i++) {
    const team = Math.floor(i / 50);
    let t = teams.get(team);
    if (!t) teams.set(team, (t = []));
    t.push(oid(i));
    users.push(
      entraUser({
        oid: oid(i),
        upn: `user${i}@bench.example`,
        given: `Given${i}`,
        family: `Family${i}`,
        title: i % 10 === 0 ? 'Manager' : 'Engineer',
        department: `Dept ${i % 40}`,
        managerOid: i === 0 ? undefined : oid(Math.floor((i - 1) / 8)),
        apps: ['github', `app-${i % 7}`],
        roles: i % 25 === 0 ? ['Agent.Approver'] : [],
      }),
    );
  }
  const groups = [...teams].map(([team, members]) => entraGroup(`${seed}-team-${team}`, `Team ${team}`, members));
  groups.push(
    entraGroup(
      `${seed}-all`,
      'All hands',
      users.map((u) => u.externalId as string),
    ),
  );
  return { users, groups };
}
