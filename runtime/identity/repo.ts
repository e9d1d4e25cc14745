/**
 * Store access of the identity authority, scoped to one tenant by construction: every query
 * goes through `identityRepo(store, tenant)` and carries its tenant_id. Multi-row writes run in
 * one transaction; state moves are guarded by the current status so concurrent calls serialize.
 */
import { and, asc, desc, eq, inArray, or, sql } from 'drizzle-orm';
import type { Store } from '../store/factory.js';
import { rowsOf } from '../store/factory.js';
import { governedAgents } from '../store/schema/governance.js';
import { agents, credentials, delegations, revocations, type Capability } from '../store/schema/identity.js';

export type AgentRow = typeof agents.$inferSelect;
export type DelegationRow = typeof delegations.$inferSelect;
export type CredentialKind = 'membership' | 'capability' | 'delegation';

export interface NewCredential {
  jti: string;
  kind: CredentialKind;
  subjectDid: string;
  agentName: string;
  delegationId?: string | null;
  exp: number;
}

export const DEFAULT_TENANT = 'default';
export const DEFAULT_LIST = 'default';

/**
 * A governed agent's status by name (names are unique across tenants: the standing the data plane
 * applies by name), or undefined when not governed; on `db` or in a transaction.
 */
async function governanceStatusOf(db: Pick<Store['db'], 'select'>, name: string): Promise<string | undefined> {
  const rows = await db.select({ s: governedAgents.status }).from(governedAgents).where(eq(governedAgents.agentName, name)).limit(1);
  return rows[0]?.s;
}

export interface DesiredAgent {
  name: string;
  role: string;
  capabilities: Capability[];
}

export interface AgentsApplyResult {
  owner: string;
  created: string[];
  updated: string[];
  unchanged: string[];
  /** Agents the owner managed and no longer declares, retired by this apply (credentials revoked). */
  retired: string[];
  /** Names another producer manages (not written), and who. */
  conflicts: string[];
  conflictOwners: Record<string, string>;
  /** Membership credentials this apply revoked (for the caller's verify index). */
  revokedMemberships: string[];
}

/** The stored declaration differs from `a`, or the agent is retired (SQL: the update's guard). */
const differs = (a: DesiredAgent, owner?: string) =>
  sql`(${agents.role} is distinct from ${a.role} or ${agents.capabilities} is distinct from ${JSON.stringify(a.capabilities)}::jsonb
      or ${agents.retiredAt} is not null${owner === undefined ? sql`` : sql` or ${agents.managedBy} is distinct from ${owner}`})`;

type Tx = Parameters<Parameters<Store['db']['transaction']>[0]>[0];

/** Retires one agent: every credential it holds is revoked, `retired_at` set; row and credentials kept. */
async function retireAgent(tx: Tx, tenant: string, name: string, at: string): Promise<void> {
  const held = await tx
    .select({ jti: credentials.jti })
    .from(credentials)
    .where(and(eq(credentials.tenantId, tenant), eq(credentials.agentName, name)));
  if (held.length)
    await tx
      .insert(revocations)
      .values(held.map((c) => ({ jti: c.jti, tenantId: tenant, list: DEFAULT_LIST, revokedAt: at })))
      .onConflictDoNothing();
  await tx
    .update(agents)
    .set({ retiredAt: at, updatedAt: at })
    .where(and(eq(agents.tenantId, tenant), eq(agents.name, name)));
}

/**
 * A producer's apply (the registry's `apply(desired, {owner})` model), one transaction: creates
 * what is missing (managed by `owner`), updates what differs (adopting an agent no producer
 * manages, reviving a retired one), reports names another producer manages as conflicts,
 * retires what `owner` manages and no longer declares, and writes nothing when nothing differs.
 */
async function applyAgents(db: Store['db'], tenant: string, owner: string, desired: readonly DesiredAgent[], nowMs: number): Promise<AgentsApplyResult> {
  const at = new Date(nowMs).toISOString();
  const out: AgentsApplyResult = { owner, created: [], updated: [], unchanged: [], retired: [], conflicts: [], conflictOwners: {}, revokedMemberships: [] };
  const declared = new Set(desired.map((d) => d.name));
  return db.transaction(async (tx) => {
    const mine = or(eq(agents.managedBy, owner), declared.size ? inArray(agents.name, [...declared]) : undefined);
    const rows = await tx
      .select({ name: agents.name, managedBy: agents.managedBy, retiredAt: agents.retiredAt, membershipJti: agents.membershipJti })
      .from(agents)
      .where(and(eq(agents.tenantId, tenant), mine))
      .orderBy(asc(agents.name))
      .for('update');
    const byName = new Map(rows.map((r) => [r.name, r]));
    for (const d of [...desired].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const cur = byName.get(d.name);
      if (cur && cur.managedBy !== null && cur.managedBy !== owner) {
        out.conflicts.push(d.name);
        out.conflictOwners[d.name] = cur.managedBy;
      } else if (!cur) {
        await tx
          .insert(agents)
          .values({ tenantId: tenant, name: d.name, role: d.role, capabilities: d.capabilities, managedBy: owner, createdAt: at, updatedAt: at });
        out.created.push(d.name);
      } else {
        const set = { role: d.role, capabilities: d.capabilities, managedBy: owner, retiredAt: null, updatedAt: at };
        const hit = await tx
          .update(agents)
          .set(set)
          .where(and(eq(agents.tenantId, tenant), eq(agents.name, d.name), differs(d, owner)))
          .returning({ name: agents.name });
        (hit.length ? out.updated : out.unchanged).push(d.name);
      }
    }
    for (const r of rows) {
      if (r.managedBy !== owner || declared.has(r.name) || r.retiredAt !== null) continue;
      await retireAgent(tx, tenant, r.name, at);
      out.retired.push(r.name);
      if (r.membershipJti) out.revokedMemberships.push(r.membershipJti);
    }
    return out;
  });
}

export function identityRepo(store: Store, tenant = DEFAULT_TENANT) {
  const db = store.db;
  const iso = (ms: number) => new Date(ms).toISOString();

  return {
    /**
     * Creates the agent or updates role/capabilities (keys, DID and producer untouched; a retired
     * agent is declared again). The same declaration again writes nothing (no row touched).
     */
    async upsertAgent(a: { name: string; role: string; capabilities: Capability[] }, nowMs: number): Promise<void> {
      await db
        .insert(agents)
        .values({ tenantId: tenant, name: a.name, role: a.role, capabilities: a.capabilities, createdAt: iso(nowMs), updatedAt: iso(nowMs) })
        .onConflictDoUpdate({
          target: [agents.tenantId, agents.name],
          set: { role: a.role, capabilities: a.capabilities, retiredAt: null, updatedAt: iso(nowMs) },
          setWhere: differs(a),
        });
    },

    /** A producer's whole desired set of agents (`POST /v1/agents/apply`): one transaction; see applyAgents. */
    applyAgents: (owner: string, desired: readonly DesiredAgent[], nowMs: number) => applyAgents(db, tenant, owner, desired, nowMs),

    async getAgent(name: string): Promise<AgentRow | undefined> {
      return (
        await db
          .select()
          .from(agents)
          .where(and(eq(agents.tenantId, tenant), eq(agents.name, name)))
      )[0];
    },

    async listAgents(): Promise<AgentRow[]> {
      return db.select().from(agents).where(eq(agents.tenantId, tenant)).orderBy(asc(agents.name));
    },

    async agentByDid(did: string): Promise<AgentRow | undefined> {
      return (
        await db
          .select()
          .from(agents)
          .where(and(eq(agents.tenantId, tenant), eq(agents.did, did)))
      )[0];
    },

    /**
     * Binds a new key to the agent: revokes its previous membership and capability credentials,
     * records the new ones, in one transaction (row lock on the agent serializes re-provisions).
     * `guard` sees the locked row (its current DID and Membership VC) and the agent's governance
     * status (undefined: not governed) before anything is written, and throws to refuse: checked
     * under the lock, so concurrent calls cannot all pass a check made on a read before it.
     * Resolves with the replaced identity, or undefined for an unknown agent.
     */
    async provision(
      name: string,
      p: { did: string; publicKey: string; membershipJti: string; membershipExp: number; creds: NewCredential[] },
      nowMs: number,
      guard: (current: { did: string | null; membershipJti: string | null; retiredAt: string | null }, governance: string | undefined) => void = () => {},
    ): Promise<{ did: string | null; membershipJti: string | null; retiredAt: string | null } | undefined> {
      return db.transaction(async (tx) => {
        const locked = await tx
          .select({ did: agents.did, membershipJti: agents.membershipJti, retiredAt: agents.retiredAt })
          .from(agents)
          .where(and(eq(agents.tenantId, tenant), eq(agents.name, name)))
          .for('update');
        const current = locked[0];
        if (!current) return undefined;
        guard(current, await governanceStatusOf(tx, name));
        const old = await tx
          .select({ jti: credentials.jti })
          .from(credentials)
          .where(and(eq(credentials.tenantId, tenant), eq(credentials.agentName, name), inArray(credentials.kind, ['membership', 'capability'])));
        if (old.length) {
          await tx
            .insert(revocations)
            .values(old.map((o) => ({ jti: o.jti, tenantId: tenant, list: DEFAULT_LIST, revokedAt: iso(nowMs) })))
            .onConflictDoNothing();
        }
        await tx
          .update(agents)
          .set({
            did: p.did,
            publicKey: p.publicKey,
            membershipJti: p.membershipJti,
            membershipExp: p.membershipExp,
            provisionedAt: iso(nowMs),
            updatedAt: iso(nowMs),
          })
          .where(and(eq(agents.tenantId, tenant), eq(agents.name, name)));
        await tx.insert(credentials).values(p.creds.map((c) => ({ ...c, delegationId: c.delegationId ?? null, tenantId: tenant, issuedAt: iso(nowMs) })));
        return current;
      });
    },

    /** The agent's governance status, or undefined when not governed. */
    governanceStatus: (name: string) => governanceStatusOf(db, name),

    async insertDelegation(d: Omit<typeof delegations.$inferInsert, 'tenantId' | 'seq'>): Promise<DelegationRow> {
      const rows = await db
        .insert(delegations)
        .values({ ...d, tenantId: tenant })
        .returning();
      return rows[0]!;
    },

    async listDelegations(): Promise<DelegationRow[]> {
      return db.select().from(delegations).where(eq(delegations.tenantId, tenant)).orderBy(desc(delegations.seq));
    },

    async getDelegation(id: string): Promise<DelegationRow | undefined> {
      return (
        await db
          .select()
          .from(delegations)
          .where(and(eq(delegations.tenantId, tenant), eq(delegations.id, id)))
      )[0];
    },

    /**
     * pending -> approved. The delegation row is locked first; only then is its VC signed (by
     * `sign`, from the locked row) and recorded with its credential row, in the same transaction.
     * The caller hands the VC out only after this resolves, i.e. after the commit: a VC that is
     * not recorded (and so revocable) is never issued. Undefined when it was no longer pending.
     */
    async approveDelegation(
      id: string,
      approver: string,
      sign: (d: DelegationRow) => Promise<{ jwt: string; jti: string; exp: number; subjectDid: string }>,
      nowMs: number,
    ): Promise<{ row: DelegationRow; vc: string } | undefined> {
      return db.transaction(async (tx) => {
        const where = and(eq(delegations.tenantId, tenant), eq(delegations.id, id), eq(delegations.status, 'pending'));
        const [d] = await tx.select().from(delegations).where(where).for('update');
        if (!d) return undefined;
        const vc = await sign(d);
        const rows = await tx
          .update(delegations)
          .set({ status: 'approved', approver, approvedAt: iso(nowMs), vc: vc.jwt, vcJti: vc.jti, notAfter: vc.exp })
          .where(where)
          .returning();
        await tx.insert(credentials).values({
          jti: vc.jti,
          kind: 'delegation',
          subjectDid: vc.subjectDid,
          agentName: d.actorName,
          delegationId: id,
          exp: vc.exp,
          tenantId: tenant,
          issuedAt: iso(nowMs),
        });
        return { row: rows[0]!, vc: vc.jwt };
      });
    },

    async denyDelegation(id: string, d: { approver: string; reason: string }, nowMs: number): Promise<DelegationRow | undefined> {
      const rows = await db
        .update(delegations)
        .set({ status: 'denied', approver: d.approver, deniedAt: iso(nowMs), denyReason: d.reason })
        .where(and(eq(delegations.tenantId, tenant), eq(delegations.id, id), eq(delegations.status, 'pending')))
        .returning();
      return rows[0];
    },

    async approvedFor(actor: string, task: string, action: string): Promise<DelegationRow[]> {
      return db
        .select()
        .from(delegations)
        .where(
          and(
            eq(delegations.tenantId, tenant),
            or(eq(delegations.actorName, actor), eq(delegations.actorDid, actor)),
            eq(delegations.task, task),
            eq(delegations.action, action),
            eq(delegations.status, 'approved'),
          ),
        );
    },

    async credentialExists(jti: string): Promise<boolean> {
      return (
        (
          await db
            .select({ jti: credentials.jti })
            .from(credentials)
            .where(and(eq(credentials.tenantId, tenant), eq(credentials.jti, jti)))
        ).length > 0
      );
    },

    async revoke(jti: string, nowMs: number, list = DEFAULT_LIST): Promise<void> {
      await db
        .insert(revocations)
        .values({ jti, tenantId: tenant, list, revokedAt: iso(nowMs) })
        .onConflictDoNothing();
    },

    async revokedAmong(jtis: string[]): Promise<Set<string>> {
      if (!jtis.length) return new Set();
      const rows = await db
        .select({ jti: revocations.jti })
        .from(revocations)
        .where(and(eq(revocations.tenantId, tenant), inArray(revocations.jti, jtis)));
      return new Set(rows.map((r) => r.jti));
    },

    async revokedList(list?: string): Promise<string[]> {
      const where = list === undefined ? eq(revocations.tenantId, tenant) : and(eq(revocations.tenantId, tenant), eq(revocations.list, list));
      return (await db.select({ jti: revocations.jti }).from(revocations).where(where).orderBy(asc(revocations.seq))).map((r) => r.jti);
    },

    /** Cheap version tag of a revocation list (count and newest seq) for conditional GETs. */
    async revocationVersion(list?: string): Promise<string> {
      const filter = list === undefined ? sql`tenant_id = ${tenant}` : sql`tenant_id = ${tenant} and list = ${list}`;
      const r = await rowsOf<{ n: number | string; m: number | string }>(
        db,
        sql`select count(*) as n, coalesce(max(seq), 0) as m from identity_revocations where ${filter}`,
      );
      return `${r[0]?.n ?? 0}-${r[0]?.m ?? 0}`;
    },
  };
}
