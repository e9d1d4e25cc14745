/**
 * Test helpers: write directory and governance state straight through the drizzle schema, so
 * cascade and grant tests can set up any directory shape (including ones a SCIM sync never
 * produces, such as a dangling owner reference).
 */
import type { ChangeFeed } from '../../change-feed.js';
import type http from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import { and, eq } from 'drizzle-orm';
import { createApi } from '../../../lib/api.js';
import { close as closeServer, listen } from '../../../lib/http.js';
import type { Store } from '../../../store/factory.js';
import { enterpriseRoutes, SYNC_BODY_LIMIT } from '../index.js';
import { employees, groups } from '../../../store/schema/directory.js';
import { agents as identityAgents } from '../../../store/schema/identity.js';
import type { DbOrTx } from '../tenant.js';
import { governanceRepo, type NewAgent, type NewDelegation } from './repo.js';

export const T0 = '2026-03-01T09:00:00.000Z';
export const subjectOf = (tenant: string, ext: string) => `idp_a:${tenant}:${ext}`;

export interface EmpSeed {
  tenant: string;
  ext: string;
  name?: string;
  email?: string;
  department?: string | null;
  manager?: string | null;
  groups?: string[];
  roles?: string[];
  active?: boolean;
}

export async function seedEmployee(db: DbOrTx, e: EmpSeed): Promise<string> {
  const subject = subjectOf(e.tenant, e.ext);
  const row = {
    employeeSubject: subject,
    tenantId: e.tenant,
    idp: 'idp_a',
    externalId: e.ext,
    email: e.email ?? `${e.ext}@${e.tenant}.example`,
    displayName: e.name ?? e.ext,
    department: e.department === undefined ? 'Engineering' : e.department,
    managerSubject: e.manager ? subjectOf(e.tenant, e.manager) : null,
    groups: [...(e.groups ?? [])].sort(),
    roles: e.roles ?? [],
    appAssignments: [],
    status: (e.active === false ? 'inactive' : 'active') as 'active' | 'inactive',
    source: 'scim',
    createdAt: T0,
    updatedAt: T0,
  };
  await db.insert(employees).values(row).onConflictDoUpdate({ target: employees.employeeSubject, set: row });
  return subject;
}

export async function setEmployee(db: DbOrTx, tenant: string, ext: string, set: { active?: boolean; groups?: string[] }): Promise<void> {
  const patch: Partial<typeof employees.$inferInsert> = {};
  if (set.active !== undefined) patch.status = set.active ? 'active' : 'inactive';
  if (set.groups) patch.groups = [...set.groups].sort();
  await db
    .update(employees)
    .set(patch)
    .where(and(eq(employees.tenantId, tenant), eq(employees.externalId, ext)));
}

export async function deleteEmployee(db: DbOrTx, tenant: string, ext: string): Promise<void> {
  await db.delete(employees).where(and(eq(employees.tenantId, tenant), eq(employees.externalId, ext)));
}

export async function seedGroup(db: DbOrTx, tenant: string, ext: string, memberExts: string[], name?: string): Promise<string> {
  const key = `${tenant}:${ext}`;
  const row = {
    groupKey: key,
    tenantId: tenant,
    externalId: ext,
    displayName: name ?? ext,
    members: memberExts.map((m) => subjectOf(tenant, m)).sort(),
    createdAt: T0,
    updatedAt: T0,
  };
  await db.insert(groups).values(row).onConflictDoUpdate({ target: groups.groupKey, set: row });
  return key;
}

export async function seedAgent(db: DbOrTx, tenant: string, a: Partial<NewAgent> & { agentName: string; ownerRef: string }): Promise<void> {
  await governanceRepo(db, tenant).insertAgent({
    ownerType: 'employee',
    status: 'active',
    riskTier: 'low',
    approvedRuntime: 'local_dev',
    createdAt: T0,
    updatedAt: T0,
    history: [],
    ...a,
  });
}

/** The identity-authority record of agent `name`, provisioned with the Membership VC `urn:uuid:m-<name>`. */
export async function seedIdentity(db: DbOrTx, name: string): Promise<void> {
  const at = new Date().toISOString();
  await db.insert(identityAgents).values({
    name,
    role: 'r',
    capabilities: [],
    did: `did:key:z${name}`,
    publicKey: 'x',
    membershipJti: `urn:uuid:m-${name}`,
    membershipExp: 9e9,
    createdAt: at,
    updatedAt: at,
  } as never);
}

export async function seedDelegation(
  db: DbOrTx,
  tenant: string,
  d: Partial<NewDelegation> & { delegationId: string; agentId: string; grantedBy: string },
): Promise<void> {
  await governanceRepo(db, tenant).insertDelegation({
    action: 'read',
    resource: 'crm/*',
    status: 'active',
    vcStatus: 'valid',
    breakGlass: false,
    authorityBasis: 'agent_owner',
    authorityEvidence: {},
    policyDecision: {},
    createdAt: T0,
    approvedAt: T0,
    history: [],
    ...d,
  });
}

/** The enterprise routes (directory + governance, cascade wired) served on 127.0.0.1:<ephemeral>. */
export async function serveEnterprise(store: Store, now: () => number, o: { changes?: ChangeFeed } = {}) {
  const app = createApi({ bodyLimit: SYNC_BODY_LIMIT });
  app.route('/', enterpriseRoutes({ store, now, changes: o.changes }));
  app.doc31('/openapi.json', { openapi: '3.1.0', info: { title: 'test', version: '1' } });
  const server = createAdaptorServer({ fetch: app.fetch }) as http.Server;
  const port = await listen(server, '127.0.0.1:0');
  const base = `http://127.0.0.1:${port}`;
  const call = async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const r = await fetch(base + path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : undefined };
  };
  return {
    base,
    get: (p: string) => call('GET', p),
    post: (p: string, b?: unknown) => call('POST', p, b),
    patch: (p: string, b?: unknown) => call('PATCH', p, b),
    close: () => closeServer(server),
  };
}
