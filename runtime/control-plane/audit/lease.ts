/**
 * One live writer per audit chain: a lease row (`audit_leases`) renewed by its holder every
 * ttl/3. A start that finds the chain leased by someone else waits (an explicit chain id: the
 * holder may have just crashed) or tries the next default id (`host`, `host-2`, ...), so replicas
 * sharing a database get distinct chains by default and two writers on one chain are refused.
 *
 * PGlite is embedded: one process owns the data folder, so a lease left by another process
 * (a crash) is dead for sure and is taken over at once; within this process the owner id tells
 * two planes on one store apart.
 *
 * On PostgreSQL a lease also records its holder (identity, boot, namespaces, pid:
 * predecessor.ts). A process restarting under the same identity (a container restarted in its
 * pod, keeping the pod name) takes its chain back at once when the holder is provably its own dead
 * predecessor, instead of waiting up to a whole time-to-live with no listener; any other holder,
 * and every live one, is waited for or refused as before.
 */
import { randomUUID } from 'node:crypto';
import { and, eq, lt, or, sql } from 'drizzle-orm';
import { errMsg, logger } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import { auditLeases } from '../../store/schema/audit.js';
import { isOwnDeadPredecessor, parseHolder, thisHolder, type Holder } from './predecessor.js';

const log = logger('audit.lease');
/** This process; a PGlite lease of another process is from a process that is gone. */
const PROCESS = randomUUID();
let counter = 0;

export const DEFAULT_LEASE_TTL_MS = 15_000;

export class ChainLeasedError extends Error {
  constructor(chain: string) {
    super(
      `audit chain ${JSON.stringify(chain)} is being written by another live process (two writers on one chain are refused); give each replica its own AUDIT_CHAIN_ID`,
    );
    this.name = 'ChainLeasedError';
  }
}

export interface ChainLease {
  readonly chain: string;
  /** False once the lease was lost (another owner took it): appends must stop. */
  held(): boolean;
  release(): Promise<void>;
}

export interface AcquireOptions {
  ttlMs?: number;
  /** This process's identity (pod or host name): a holder under it may be its own dead predecessor. */
  identity?: string;
  /** How long to wait for a live lease to lapse (explicit ids); 0 = refuse at once. */
  waitMs?: number;
  onLost?: () => void;
}

/**
 * Takes the lease when it is free, expired, ours, (PGlite) left by another process, or held by
 * this process's own dead predecessor (a compare-and-set on the owner that was seen).
 */
async function tryTake(store: Store, chain: string, owner: string, ttlMs: number, me: Holder | undefined): Promise<boolean> {
  const exp = sql`now() + make_interval(secs => ${ttlMs / 1000})` as unknown as string;
  const holder = me ? JSON.stringify(me) : null;
  const free =
    store.kind === 'pglite'
      ? or(lt(auditLeases.expiresAt, sql`now()`), eq(auditLeases.owner, owner), sql`${auditLeases.owner} not like ${PROCESS + ':%'}`)
      : or(lt(auditLeases.expiresAt, sql`now()`), eq(auditLeases.owner, owner));
  const rows = await store.db
    .insert(auditLeases)
    .values({ chain, owner, expiresAt: exp, holder })
    .onConflictDoUpdate({ target: auditLeases.chain, set: { owner, expiresAt: exp, holder }, setWhere: free })
    .returning({ owner: auditLeases.owner });
  if (rows[0]?.owner === owner) return true;
  const [held] = await store.db.select({ owner: auditLeases.owner, holder: auditLeases.holder }).from(auditLeases).where(eq(auditLeases.chain, chain));
  // A holder in this process is alive (another plane of it), whatever its pid says.
  if (!held || held.owner.startsWith(`${PROCESS}:`) || !isOwnDeadPredecessor(parseHolder(held.holder), me)) return false;
  const taken = await store.db
    .update(auditLeases)
    .set({ owner, expiresAt: exp, holder })
    .where(and(eq(auditLeases.chain, chain), eq(auditLeases.owner, held.owner)))
    .returning({ owner: auditLeases.owner });
  if (taken.length === 0) return false;
  log.info("audit chain taken back from this process's own dead predecessor (same identity, its process gone)", { chain, previous: parseHolder(held.holder) });
  return true;
}

export async function acquireChainLease(store: Store, chain: string, o: AcquireOptions = {}): Promise<ChainLease> {
  const ttlMs = o.ttlMs ?? DEFAULT_LEASE_TTL_MS;
  const owner = `${PROCESS}:${++counter}`;
  const me = o.identity !== undefined ? thisHolder(o.identity) : undefined;
  const deadline = Date.now() + (o.waitMs ?? 0);
  while (!(await tryTake(store, chain, owner, ttlMs, me))) {
    if (Date.now() >= deadline) throw new ChainLeasedError(chain);
    await new Promise((r) => setTimeout(r, Math.min(1000, ttlMs / 3)));
  }
  let held = true;
  let released = false;
  const timer = setInterval(
    () => {
      void store.db
        .update(auditLeases)
        .set({ expiresAt: sql`now() + make_interval(secs => ${ttlMs / 1000})` as unknown as string })
        .where(and(eq(auditLeases.chain, chain), eq(auditLeases.owner, owner)))
        .returning({ chain: auditLeases.chain })
        .then(
          (rows) => {
            if (rows.length === 0 && held && !released) {
              held = false;
              clearInterval(timer);
              log.error('audit chain lease lost to another writer; appends stop', { chain });
              o.onLost?.();
            }
          },
          // The store is down: nobody else can take the lease through it either; retry next tick.
          (e: unknown) => log.warn('audit chain lease renewal failed', { chain, err: errMsg(e) }),
        );
    },
    Math.max(50, ttlMs / 3),
  );
  timer.unref();
  return {
    chain,
    held: () => held,
    async release() {
      if (released) return;
      released = true;
      clearInterval(timer);
      try {
        await store.db.delete(auditLeases).where(and(eq(auditLeases.chain, chain), eq(auditLeases.owner, owner)));
      } catch (e) {
        log.warn('audit chain lease release failed (it lapses by itself)', { chain, err: errMsg(e) });
      }
    },
  };
}

/**
 * The default chain: `base` (pod or host name) if free, else `base-2`, `base-3`, ...: replicas
 * on one host sharing a database (or a restart while the old lease still lives) get their own.
 */
export async function acquireDefaultChain(store: Store, base: string, o: AcquireOptions = {}): Promise<ChainLease> {
  for (let i = 1; i <= 64; i++) {
    const chain = i === 1 ? base : `${base}-${i}`;
    try {
      return await acquireChainLease(store, chain, { ...o, waitMs: 0 });
    } catch (e) {
      if (!(e instanceof ChainLeasedError)) throw e;
    }
  }
  throw new ChainLeasedError(`${base}-*`);
}
