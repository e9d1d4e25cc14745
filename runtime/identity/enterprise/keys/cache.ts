/**
 * API-key rows in memory, by id (bounded LRU), so a verification is an HMAC and a compare, not a
 * store read. Trusted only while the identity change feed is live and this cache was cleared in
 * the feed's current epoch; otherwise every lookup reads the store. A committed change to a key
 * (migration 0014's trigger) drops its row on every replica; the replica that made it drops it at
 * once. A read that raced a change is not cached (generation check).
 */
import type { ChangeFeed } from '../../change-feed.js';

export const KEY_CACHE_MAX = 10_000;

export interface KeyCache<Row> {
  /** The row for `id`: from memory when trusted, else `read()` (cached when nothing changed meanwhile). */
  get(id: string, read: () => Promise<Row | undefined>): Promise<Row | undefined>;
  /** This replica changed the key: drop it now. */
  forget(id: string): void;
}

export function createKeyCache<Row>(feed: ChangeFeed | undefined, max = KEY_CACHE_MAX): KeyCache<Row> {
  const rows = new Map<string, Row>();
  let gen = 0;
  let clearedEpoch = -1;
  const forget = (id: string) => {
    rows.delete(id);
    gen++;
  };
  feed?.subscribe({
    apply: (c) => {
      if (c.kind === 'key') forget(c.id);
    },
    resync: async () => {
      rows.clear();
      gen++;
      clearedEpoch = feed.epoch();
    },
  });
  const trusted = () => feed !== undefined && feed.live() && clearedEpoch === feed.epoch();

  return {
    async get(id, read) {
      if (trusted()) {
        const hit = rows.get(id);
        if (hit !== undefined) {
          rows.delete(id);
          rows.set(id, hit);
          return hit;
        }
      }
      const g = gen;
      const row = await read();
      if (row !== undefined && g === gen && trusted()) {
        if (rows.size >= max) rows.delete(rows.keys().next().value!);
        rows.set(id, row);
      }
      return row;
    },
    forget,
  };
}
