/**
 * API-key service (SPEC 2.10, 4.5): create, rotate, revoke, list, get and verify. Every read and
 * write of a key goes through `keysRepo(db, tenant)`, bound to one tenant (or to the tenant-less
 * keys, `null`); routes addressed by key id first look up the key's tenant, then act in it.
 */
import { randomBytes } from 'node:crypto';
import { and, desc, eq, isNull, lt, or, sql } from 'drizzle-orm';
import { conflict, forbidden, notFound } from '../../../lib/errors.js';
import { logger } from '../../../lib/log.js';
import { rowsOf, type Db } from '../../../store/factory.js';
import { apiKeyPepper, apiKeys } from '../../../store/schema/keys.js';
import { iso } from '../directory/repo.js';
import type { ChangeFeed } from '../../change-feed.js';
import type { DbOrTx } from '../tenant.js';
import { createKeyCache } from './cache.js';
import { masked, mint, parseKey, pepperFromEnv, secretMatches, type KeyEnv } from './secret.js';

const log = logger('identity.keys');

export type KeyRow = typeof apiKeys.$inferSelect;

/** Safe view (SPEC 2.10): no plaintext, no hash, no salt. */
export interface KeyRecord {
  id: string;
  name: string;
  env: string;
  prefix: string;
  masked: string;
  last4: string;
  scopes: string[];
  status: string;
  tenantId: string | null;
  createdBy: string | null;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
  revokedBy: string | null;
  rotatedAt: string | null;
  rotatedFrom: string | null;
}

export function keyOut(r: KeyRow): KeyRecord {
  return {
    id: r.id,
    name: r.name,
    env: r.env,
    prefix: r.prefix,
    masked: masked(r.prefix, r.id, r.last4),
    last4: r.last4,
    scopes: r.scopes,
    status: r.status,
    tenantId: r.tenantId,
    createdBy: r.createdBy,
    createdAt: iso(r.createdAt),
    lastUsedAt: iso(r.lastUsedAt),
    revokedAt: iso(r.revokedAt),
    revokedBy: r.revokedBy,
    rotatedAt: iso(r.rotatedAt),
    rotatedFrom: r.rotatedFrom,
  };
}

/** Tenant-scoped key repository: every statement carries the bound tenant (or `tenant_id is null`). */
/** A caller may mint or rotate only a key whose scopes it holds itself (`admin` holds them all). */
export const scopeEscalation = (what: string) =>
  forbidden('scope_escalation', `cannot ${what}: a credential may mint or rotate only keys whose scopes it holds itself`);

export function keysRepo(db: DbOrTx, tenantId: string | null) {
  const K = apiKeys;
  const inTenant = tenantId === null ? isNull(K.tenantId) : eq(K.tenantId, tenantId);
  return {
    async get(id: string, lock = false): Promise<KeyRow | undefined> {
      const q = db
        .select()
        .from(K)
        .where(and(inTenant, eq(K.id, id)))
        .limit(1);
      return (await (lock ? q.for('update') : q))[0];
    },
    list: (): Promise<KeyRow[]> => db.select().from(K).where(inTenant).orderBy(desc(K.seq)),
    async insert(row: Omit<typeof K.$inferInsert, 'tenantId' | 'seq'>): Promise<KeyRow> {
      const r = await db
        .insert(K)
        .values({ ...row, tenantId })
        .returning();
      return r[0]!;
    },
    async update(id: string, set: Partial<Pick<KeyRow, 'status' | 'revokedAt' | 'revokedBy' | 'rotatedAt'>>): Promise<KeyRow | undefined> {
      return (
        await db
          .update(K)
          .set(set)
          .where(and(inTenant, eq(K.id, id)))
          .returning()
      )[0];
    },
    /** Moves last_used_at forward, at most once per `minGapMs` (verification stays a read most of the time). */
    async touch(id: string, at: string, minGapMs: number): Promise<void> {
      const cutoff = new Date(Date.parse(at) - minGapMs).toISOString();
      await db
        .update(K)
        .set({ lastUsedAt: at })
        .where(and(inTenant, eq(K.id, id), eq(K.status, 'active'), or(isNull(K.lastUsedAt), lt(K.lastUsedAt, cutoff))));
    },
  };
}

/** The key's tenant (`null` = a tenant-less key), or undefined when no such key: the only unscoped read. */
export async function tenantOfKey(db: DbOrTx, id: string): Promise<string | null | undefined> {
  const rows = await db.select({ t: apiKeys.tenantId }).from(apiKeys).where(eq(apiKeys.id, id)).limit(1);
  return rows.length ? (rows[0]!.t ?? null) : undefined;
}

export async function keyTenants(db: Db): Promise<(string | null)[]> {
  const rows = await rowsOf<{ t: string | null }>(db, sql`select distinct tenant_id as t from ${apiKeys} order by 1 nulls first`);
  return rows.map((r) => r.t);
}

export interface KeyServiceDeps {
  db: Db;
  now: () => number;
  /** IDP_API_KEY_PEPPER; unset: a random pepper kept in the database. */
  pepper?: string;
  /** Smallest step of last_used_at updates (default 60 s). */
  touchGapMs?: number;
  /** Committed key changes: with it, verified rows are kept in memory (see cache.ts); without, every verify reads the store. */
  changes?: ChangeFeed;
}

/** A key row as verification uses it: salt and hash decoded, the safe record built once. */
interface Verifiable {
  row: KeyRow;
  salt: Buffer;
  hash: Buffer;
  rec: KeyRecord;
  /** last_used_at in epoch ms (NaN when never used). */
  usedAt: number;
}

export interface VerifyResult {
  valid: boolean;
  reason: 'ok' | 'malformed' | 'invalid_key' | 'key_revoked' | 'key_rotated' | 'tenant_mismatch' | 'scope_not_granted';
  key?: KeyRecord;
}

export type KeyService = ReturnType<typeof keyService>;

export function keyService(deps: KeyServiceDeps) {
  const { db, now } = deps;
  const gap = deps.touchGapMs ?? 60_000;
  const envPepper = deps.pepper ? pepperFromEnv(deps.pepper) : undefined;
  let pepperP: Promise<Buffer> | undefined;
  let pepperNow: Buffer | undefined;
  const cache = createKeyCache<Verifiable>(deps.changes);
  const verifiable = (row: KeyRow): Verifiable => {
    const rec = keyOut(row);
    return {
      row,
      salt: Buffer.from(row.salt, 'base64url'),
      hash: Buffer.from(row.hash, 'base64url'),
      rec,
      usedAt: rec.lastUsedAt === null ? NaN : Date.parse(rec.lastUsedAt),
    };
  };
  const readKey = async (id: string) => {
    const row = (await db.select().from(apiKeys).where(eq(apiKeys.id, id)).limit(1))[0];
    return row && verifiable(row);
  };

  /** IDP_API_KEY_PEPPER, else a random pepper generated once and kept in the store (development). */
  const pepper = (): Promise<Buffer> =>
    (pepperP ??= (async () => {
      if (envPepper) return (pepperNow = envPepper);
      await db
        .insert(apiKeyPepper)
        .values({ id: 'pepper', pepper: randomBytes(32).toString('base64url') })
        .onConflictDoNothing();
      const row = (await db.select().from(apiKeyPepper).where(eq(apiKeyPepper.id, 'pepper')))[0];
      if (!row) throw new Error('api key pepper row missing');
      log.warn('IDP_API_KEY_PEPPER is unset: API-key hashes use a pepper stored in the database; set it in production');
      return (pepperNow = Buffer.from(row.pepper, 'base64url'));
    })().catch((e) => {
      pepperP = undefined;
      throw e;
    }));
  const stamp = () => new Date(now()).toISOString();

  /** Resolves a key id to its tenant-scoped repo, honouring an optional `?tenant=` guard (mismatch = 404). */
  async function scoped(tx: DbOrTx, id: string, guard?: string) {
    const t = await tenantOfKey(tx, id);
    if (t === undefined || (guard !== undefined && guard !== t)) throw notFound('key', id);
    return keysRepo(tx, t);
  }

  return {
    pepper,
    async create(b: { name: string; env: KeyEnv; scopes: string[]; tenantId?: string; createdBy?: string }) {
      const m = mint(b.env, await pepper());
      const row = await keysRepo(db, b.tenantId ?? null).insert({
        id: m.id,
        name: b.name,
        env: b.env,
        prefix: m.prefix,
        last4: m.last4,
        salt: m.salt,
        hash: m.hash,
        scopes: b.scopes,
        status: 'active',
        createdBy: b.createdBy ?? null,
        createdAt: stamp(),
      });
      log.info('api key created', { keyId: row.id, env: row.env, tenantId: row.tenantId });
      return { key: keyOut(row), plaintext: m.plaintext };
    },

    /** New secret in a new record (`rotatedFrom` = old id); the old record turns `rotated` in the same transaction. */
    async rotate(id: string, by: string, guard?: string, mayRotate: (scopes: readonly string[]) => boolean = () => true) {
      const p = await pepper();
      const out = await db.transaction(async (tx) => {
        const repo = await scoped(tx, id, guard);
        const old = await repo.get(id, true);
        if (!old) throw notFound('key', id);
        if (old.status !== 'active') throw conflict('key_not_active', `key ${id} is ${old.status}; only an active key can be rotated`);
        // Its new secret is handed to the caller: only one who holds every scope of the key.
        if (!mayRotate(old.scopes)) throw scopeEscalation(`rotate key ${id}`);
        const at = stamp();
        await repo.update(id, { status: 'rotated', rotatedAt: at });
        const m = mint(old.env, p);
        const row = await repo.insert({
          id: m.id,
          name: old.name,
          env: old.env,
          prefix: m.prefix,
          last4: m.last4,
          salt: m.salt,
          hash: m.hash,
          scopes: old.scopes,
          status: 'active',
          createdBy: by,
          createdAt: at,
          rotatedFrom: old.id,
        });
        return { key: keyOut(row), plaintext: m.plaintext };
      });
      cache.forget(id); // at once here; other replicas through the change feed
      await deps.changes?.settled(); // answer once the change has gone out to every replica
      log.info('api key rotated', { keyId: out.key.id, rotatedFrom: id });
      return out;
    },

    /** Active or rotated -> revoked; revoking a revoked key returns it unchanged. */
    async revoke(id: string, by: string | undefined, guard?: string): Promise<KeyRecord> {
      const out = await db.transaction(async (tx) => {
        const repo = await scoped(tx, id, guard);
        const cur = await repo.get(id, true);
        if (!cur) throw notFound('key', id);
        if (cur.status === 'revoked') return keyOut(cur);
        const row = await repo.update(id, { status: 'revoked', revokedAt: stamp(), revokedBy: by ?? null });
        log.info('api key revoked', { keyId: id });
        return keyOut(row!);
      });
      cache.forget(id); // at once here; other replicas through the change feed
      await deps.changes?.settled(); // answer once the change has gone out to every replica
      return out;
    },

    async get(id: string, guard?: string): Promise<KeyRecord> {
      const row = await (await scoped(db, id, guard)).get(id);
      if (!row) throw notFound('key', id);
      return keyOut(row);
    },

    async list(tenant?: string): Promise<KeyRecord[]> {
      const tenants = tenant !== undefined ? [tenant] : await keyTenants(db);
      const out: KeyRecord[] = [];
      for (const t of tenants) out.push(...(await keysRepo(db, t).list()).map(keyOut));
      // Across tenants: newest first by creation time (each tenant's list already is, by sequence).
      if (tenant === undefined) out.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
      return out;
    },

    /**
     * The one verification path (route and bench). Status is disclosed only to a caller who
     * proved the secret; everything else is `invalid_key`. Scopes deny by default: a scope is
     * granted only when it is literally in the key's list.
     */
    async verify(key: string, o: { scope?: string; tenantId?: string } = {}): Promise<VerifyResult> {
      const p = pepperNow ?? (await pepper());
      const parsed = parseKey(key);
      if (!parsed) {
        secretMatches(p, '', undefined);
        return { valid: false, reason: 'malformed' };
      }
      // The presented key names its own row: from memory while the cache is current, else one read by id.
      const k = await cache.get(parsed.id, () => readKey(parsed.id));
      const ok = secretMatches(p, parsed.secret, k) && k!.row.env === parsed.env;
      if (!ok || !k) return { valid: false, reason: 'invalid_key' };
      const row = k.row;
      if (row.status === 'revoked') return { valid: false, reason: 'key_revoked' };
      if (row.status !== 'active') return { valid: false, reason: 'key_rotated' };
      if (o.tenantId !== undefined && o.tenantId !== row.tenantId) return { valid: false, reason: 'tenant_mismatch' };
      let rec = k.rec;
      // last_used_at moves at most once per gap (per replica), so verification is rarely a write.
      const nowMs = now();
      if (!(k.usedAt >= nowMs - gap)) {
        const at = new Date(nowMs).toISOString();
        k.usedAt = nowMs;
        await keysRepo(db, row.tenantId).touch(row.id, at, gap);
        rec = k.rec = { ...rec, lastUsedAt: at };
      }
      if (o.scope !== undefined && !row.scopes.includes(o.scope)) return { valid: false, reason: 'scope_not_granted', key: rec };
      return { valid: true, reason: 'ok', key: rec };
    },
  };
}
