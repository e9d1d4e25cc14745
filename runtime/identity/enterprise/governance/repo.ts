/**
 * Tenant-scoped repository of the governance tables (DESIGN principle 5). `governanceRepo(db,
 * tenantId)` binds ONE tenant: every statement filters or stamps `tenant_id = tenantId`, so a
 * call for tenant A can neither read nor change tenant B's rows. The only unscoped queries are
 * the key -> tenant lookups at the bottom, used by routes addressed by a global key (agent name,
 * delegation id, a producer's owner name) before any scoped read.
 */
import { randomUUID } from 'node:crypto';
import { and, desc, eq, inArray, isNull, or, sql } from 'drizzle-orm';
import { rowsOf, type Db } from '../../../store/factory.js';
import { authorityDelegations, governedAgents, revocationLog, type HistoryEntry } from '../../../store/schema/governance.js';
import { iso } from '../directory/repo.js';
import type { DbOrTx } from '../tenant.js';
import { BRAND } from '../../../lib/brand.js';
import type { AgentStatus, DelegationStatus, LogKind } from './model.js';

export type AgentRow = typeof governedAgents.$inferSelect;
export type DelegationRow = typeof authorityDelegations.$inferSelect;
export type LogRow = typeof revocationLog.$inferSelect;
export type NewAgent = Omit<typeof governedAgents.$inferInsert, 'tenantId' | 'seq'>;
export type NewDelegation = Omit<typeof authorityDelegations.$inferInsert, 'tenantId' | 'seq'>;

export interface LogEntry {
  kind: LogKind;
  reasonCode: string;
  agentId: string | null;
  delegationId: string | null;
  source: 'auto' | 'admin';
  by: string;
  detail: string | null;
  at: string;
}

export interface RevocationLogRecord {
  id: string;
  tenant_id: string;
  kind: LogKind;
  reason_code: string;
  agent_id: string | null;
  delegation_id: string | null;
  source: 'auto' | 'admin';
  by: string;
  detail: string | null;
  at: string;
}

export function logOut(r: LogRow): RevocationLogRecord {
  return {
    id: r.id,
    tenant_id: r.tenantId,
    kind: r.kind,
    reason_code: r.reasonCode,
    agent_id: r.agentId,
    delegation_id: r.delegationId,
    source: r.source,
    by: r.by,
    detail: r.detail,
    at: iso(r.at),
  };
}

export interface GovernanceRepo {
  readonly tenantId: string;
  /** Serialises governance writers of this tenant until the transaction ends (no lost history appends). */
  lock(): Promise<void>;
  getAgent(name: string): Promise<AgentRow | undefined>;
  listAgents(filter?: { status?: AgentStatus }): Promise<AgentRow[]>;
  insertAgent(a: NewAgent): Promise<void>;
  /** Sets fields and appends history entries in one statement; false when no such agent here. */
  updateAgent(
    name: string,
    set: Partial<
      Pick<
        AgentRow,
        'status' | 'ownerType' | 'ownerRef' | 'teamRef' | 'businessSponsor' | 'riskTier' | 'approvedRuntime' | 'managedBy' | 'updatedAt' | 'lastReviewedAt'
      >
    >,
    history: HistoryEntry[],
  ): Promise<boolean>;
  getDelegation(id: string): Promise<DelegationRow | undefined>;
  listDelegations(filter?: { agent?: string; status?: DelegationStatus; live?: boolean }): Promise<DelegationRow[]>;
  insertDelegation(d: NewDelegation): Promise<void>;
  updateDelegation(
    id: string,
    set: Partial<Pick<DelegationRow, 'status' | 'vcStatus' | 'revokedAt' | 'revocationReason'>>,
    history: HistoryEntry[],
  ): Promise<boolean>;
  /** Many status moves in one statement each (cascade): status, updated_at and one history entry per row. */
  moveAgents(moves: { name: string; status: AgentStatus; history: HistoryEntry }[], at: string): Promise<void>;
  moveDelegations(
    moves: { id: string; status: DelegationStatus; vcStatus: DelegationRow['vcStatus']; revokedAt: string | null; reason: string; history: HistoryEntry }[],
  ): Promise<void>;
  appendLog(entries: LogEntry[]): Promise<void>;
  listLog(limit?: number): Promise<RevocationLogRecord[]>;
}

const LIVE = ['pending', 'approved', 'active'] as const;

export function governanceRepo(db: DbOrTx, tenantId: string): GovernanceRepo {
  const A = governedAgents;
  const D = authorityDelegations;
  const L = revocationLog;
  const appendJson = (col: typeof A.history | typeof D.history, h: HistoryEntry[]) => sql`${col} || ${JSON.stringify(h)}::jsonb`;
  return {
    tenantId,
    async lock() {
      await db.execute(sql`select pg_advisory_xact_lock(hashtext(${`${BRAND}.governance:${tenantId}`}))`);
    },
    async getAgent(name) {
      const rows = await db
        .select()
        .from(A)
        .where(and(eq(A.tenantId, tenantId), eq(A.agentName, name)))
        .limit(1);
      return rows[0];
    },
    listAgents(filter = {}) {
      const where = filter.status ? and(eq(A.tenantId, tenantId), eq(A.status, filter.status)) : eq(A.tenantId, tenantId);
      return db.select().from(A).where(where).orderBy(A.agentName);
    },
    async insertAgent(a) {
      await db.insert(A).values({ ...a, tenantId });
    },
    async updateAgent(name, set, history) {
      const r = await db
        .update(A)
        .set({ ...set, history: appendJson(A.history, history) })
        .where(and(eq(A.tenantId, tenantId), eq(A.agentName, name)))
        .returning({ n: A.agentName });
      return r.length > 0;
    },
    async getDelegation(id) {
      const rows = await db
        .select()
        .from(D)
        .where(and(eq(D.tenantId, tenantId), eq(D.delegationId, id)))
        .limit(1);
      return rows[0];
    },
    listDelegations(filter = {}) {
      const conds = [eq(D.tenantId, tenantId)];
      if (filter.agent !== undefined) conds.push(eq(D.agentId, filter.agent));
      if (filter.status !== undefined) conds.push(eq(D.status, filter.status));
      if (filter.live) conds.push(inArray(D.status, [...LIVE]));
      return db
        .select()
        .from(D)
        .where(and(...conds))
        .orderBy(desc(D.seq));
    },
    async insertDelegation(d) {
      await db.insert(D).values({ ...d, tenantId });
    },
    async updateDelegation(id, set, history) {
      const r = await db
        .update(D)
        .set({ ...set, history: appendJson(D.history, history) })
        .where(and(eq(D.tenantId, tenantId), eq(D.delegationId, id)))
        .returning({ n: D.delegationId });
      return r.length > 0;
    },
    async moveAgents(moves, at) {
      if (!moves.length) return;
      const payload = JSON.stringify(moves.map((m) => ({ n: m.name, s: m.status, h: [m.history] })));
      await db.execute(sql`
        update ${A} set status = m.s, updated_at = ${at}, history = ${A.history} || m.h
        from jsonb_to_recordset(${payload}::jsonb) as m(n text, s text, h jsonb)
        where ${A.tenantId} = ${tenantId} and ${A.agentName} = m.n`);
    },
    async moveDelegations(moves) {
      if (!moves.length) return;
      const payload = JSON.stringify(moves.map((m) => ({ i: m.id, s: m.status, v: m.vcStatus, r: m.revokedAt, c: m.reason, h: [m.history] })));
      await db.execute(sql`
        update ${D} set status = m.s, vc_status = m.v, revoked_at = m.r, revocation_reason = m.c, history = ${D.history} || m.h
        from jsonb_to_recordset(${payload}::jsonb) as m(i text, s text, v text, r timestamptz, c text, h jsonb)
        where ${D.tenantId} = ${tenantId} and ${D.delegationId} = m.i`);
    },
    async appendLog(entries) {
      if (!entries.length) return;
      await db.insert(L).values(entries.map((e) => ({ id: randomUUID(), tenantId, ...e })));
    },
    async listLog(limit = 500) {
      const rows = await db.select().from(L).where(eq(L.tenantId, tenantId)).orderBy(desc(L.seq)).limit(limit);
      return rows.map(logOut);
    },
  };
}

/** Tenant that holds a governed agent name (names are unique across tenants), if any. */
export async function tenantOfAgent(db: DbOrTx, name: string): Promise<string | undefined> {
  const rows = await db.select({ t: governedAgents.tenantId }).from(governedAgents).where(eq(governedAgents.agentName, name)).limit(1);
  return rows[0]?.t;
}

/**
 * The governed agents a producer manages, in every tenant (for its apply's prune): recorded
 * `managed_by = owner`, or, from before ownership was recorded, registered by it (`created_by`)
 * and managed by no one.
 */
export async function managedBy(db: DbOrTx, owner: string): Promise<{ tenantId: string; agentName: string }[]> {
  const A = governedAgents;
  return db
    .select({ tenantId: A.tenantId, agentName: A.agentName })
    .from(A)
    .where(or(eq(A.managedBy, owner), and(isNull(A.managedBy), eq(A.createdBy, owner))))
    .orderBy(A.agentName);
}

export async function tenantOfDelegation(db: DbOrTx, id: string): Promise<string | undefined> {
  const rows = await db.select({ t: authorityDelegations.tenantId }).from(authorityDelegations).where(eq(authorityDelegations.delegationId, id)).limit(1);
  return rows[0]?.t;
}

/** Tenants with any governance state, for list reads that name no tenant (assembled per tenant). */
export async function governanceTenants(db: DbOrTx): Promise<string[]> {
  const rows = await rowsOf<{ tenant_id: string }>(
    db as Db,
    sql`select tenant_id from ${governedAgents} union select tenant_id from ${authorityDelegations}
        union select tenant_id from ${revocationLog} order by 1`,
  );
  return rows.map((r) => r.tenant_id);
}
