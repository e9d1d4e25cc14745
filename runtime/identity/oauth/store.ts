/** The OAuth tables (migrations 0025, 0026): issued tokens (never their values) and seen client assertions. */
import { lt } from 'drizzle-orm';
import type { Store } from '../../store/factory.js';
import { oauthAssertionJtis, oauthTokens } from '../../store/schema/oauth.js';
import { DEFAULT_TENANT } from '../repo.js';

export type IssuedToken = Omit<typeof oauthTokens.$inferInsert, 'tenantId'>;

export function oauthStore(store: Store, tenant = DEFAULT_TENANT) {
  const db = store.db;
  return {
    async recordToken(t: IssuedToken): Promise<void> {
      await db.insert(oauthTokens).values({ ...t, tenantId: tenant });
    },

    /**
     * Records the (agent, jti) of a client assertion; false when it was seen before (a replay).
     * Assertions whose exp has passed are pruned in the same transaction.
     */
    async firstUse(agentName: string, jti: string, exp: number, nowSec: number): Promise<boolean> {
      return db.transaction(async (tx) => {
        await tx.delete(oauthAssertionJtis).where(lt(oauthAssertionJtis.exp, nowSec - 60));
        const rows = await tx
          .insert(oauthAssertionJtis)
          .values({ tenantId: tenant, agentName, jti, exp })
          .onConflictDoNothing()
          .returning({ jti: oauthAssertionJtis.jti });
        return rows.length === 1;
      });
    },
  };
}
