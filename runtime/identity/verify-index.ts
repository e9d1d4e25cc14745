/**
 * In-memory step 3 of verify-presentation (SPEC 4.4): the revoked jtis and the did:key -> agent
 * map of one tenant, a feed view (feed-view.ts): it answers only while it can be trusted;
 * otherwise `lookup` returns undefined and the caller reads the store. The replica that writes a change notes it
 * here at once (`noteRevoked`, `noteProvisioned`); the others learn it from the feed.
 */
import { and, eq, isNotNull } from 'drizzle-orm';
import type { Store } from '../store/factory.js';
import { agents, revocations } from '../store/schema/identity.js';
import type { ChangeFeed } from './change-feed.js';
import { feedView } from './feed-view.js';
import { DEFAULT_TENANT } from './repo.js';

export interface Step3 {
  revoked: boolean;
  /** The registered agent holding the did:key, if any. */
  agent: string | undefined;
}

export interface VerifyIndex {
  /** Step 3 from memory, or undefined when the view cannot be trusted right now. */
  lookup(membershipJti: string, holderDid: string): Step3 | undefined;
  /** This replica committed a revocation. */
  noteRevoked(jti: string): void;
  /** This replica bound `did` to agent `name` (its previous key no longer maps to it). */
  noteProvisioned(name: string, did: string): void;
  /** Counts for tests and logs. */
  size(): { revoked: number; agents: number; current: boolean };
}

interface View {
  revoked: Set<string>;
  byDid: Map<string, string>;
  didOf: Map<string, string>;
}

const emptyView = (): View => ({ revoked: new Set(), byDid: new Map(), didOf: new Map() });

function bind(v: View, name: string, did: string | null): void {
  const old = v.didOf.get(name);
  if (old !== undefined && v.byDid.get(old) === name) v.byDid.delete(old);
  if (did === null) v.didOf.delete(name);
  else {
    v.didOf.set(name, did);
    v.byDid.set(did, name);
  }
}

export function createVerifyIndex(store: Store, feed: ChangeFeed, tenant = DEFAULT_TENANT): VerifyIndex {
  const index = feedView<View>(feed, {
    empty: emptyView,
    async load() {
      const [revs, ags] = await Promise.all([
        store.db.select({ jti: revocations.jti }).from(revocations).where(eq(revocations.tenantId, tenant)),
        store.db
          .select({ name: agents.name, did: agents.did })
          .from(agents)
          .where(and(eq(agents.tenantId, tenant), isNotNull(agents.did))),
      ]);
      const next = emptyView();
      for (const r of revs) next.revoked.add(r.jti);
      for (const a of ags) bind(next, a.name, a.did);
      return next;
    },
    apply(v, c) {
      if (c.kind === 'revoked' && c.tenant === tenant) v.revoked.add(c.jti);
      else if (c.kind === 'agent' && c.tenant === tenant) {
        if (c.oldDid !== null && v.byDid.get(c.oldDid) === c.name) v.byDid.delete(c.oldDid);
        bind(v, c.name, c.did);
      }
    },
  });

  return {
    lookup(jti, did) {
      const v = index.get();
      return v && { revoked: v.revoked.has(jti), agent: v.byDid.get(did) };
    },
    noteRevoked(jti) {
      index.apply({ kind: 'revoked', jti, tenant });
    },
    noteProvisioned(name, did) {
      index.apply({ kind: 'agent', name, tenant, did, oldDid: null });
    },
    size: () => ({ revoked: index.peek().revoked.size, agents: index.peek().byDid.size, current: index.current() }),
  };
}
