/**
 * The change feed's cross-replica barrier (`settled()`) against real PostgreSQL: when it resolves,
 * every other replica has applied the change or cannot be answering from memory. Replica b hears
 * every notification 150 ms late; in the second case its outbound queries are also held, so the
 * writer stops waiting for it, and b must stop trusting its memory no later than that. b starts
 * before the writer, so the writer begins without having heard b's pings.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../lib/log.js';
import { sql } from 'drizzle-orm';
import { rowsOf, type Store } from '../store/factory.js';
import { revocations } from '../store/schema/identity.js';
import { openTestPostgres, TEST_DATABASE_URL, testSchema } from '../store/testing.js';
import { eventually } from '../lib/poll-testing.js';
import { changeChannel, createChangeFeed, type ChangeFeed } from './change-feed.js';
import { slowReplica } from './change-feed-testing.js';

const LATE_MS = 150;

/** A feed whose consumer records every revoked jti it applied. */
function watched(store: Store) {
  const applied = new Set<string>();
  const feed = createChangeFeed(store);
  feed.subscribe({ apply: (c) => void (c.kind === 'revoked' && applied.add(c.jti)), resync: async () => {} });
  return { feed, applied };
}

beforeAll(() => setLogLevel('error'));

describe.skipIf(!TEST_DATABASE_URL)('change feed across two replicas on one PostgreSQL schema', () => {
  let sa: Store;
  let sb: Store;
  let a: ChangeFeed;
  let b: ReturnType<typeof watched>;
  let link: ReturnType<typeof slowReplica>;
  let i = 0;
  const revoke = async () => {
    const jti = `urn:uuid:j-${++i}`;
    await sa.db.insert(revocations).values({ jti, revokedAt: new Date().toISOString() } as never);
    return jti;
  };

  beforeAll(async () => {
    const schema = testSchema();
    sa = await openTestPostgres({ schema });
    sb = await openTestPostgres({ schema, keepSchema: true });
    link = slowReplica(sb, LATE_MS);
    b = watched(link.store);
    await eventually(() => b.feed.live(), 'b to go live', 10_000);
  }, 30_000);
  afterAll(async () => {
    link?.resume();
    await b?.feed.close();
    await a?.close();
    await sb?.close();
    await sa?.close();
  });

  it('a writer that has just started does not take its silence for the absence of replicas', async () => {
    // b's queries stall from now on: a never hears a ping from b, whose last one, sent before a
    // listened, keeps b trusting its memory for up to a second.
    link.hold();
    try {
      const jti = await revoke();
      a = createChangeFeed(sa); // settled() is called before it even listens
      await a.settled(3000);
      expect({ applied: b.applied.has(jti), live: b.feed.live() }).not.toEqual({ applied: false, live: true });
    } finally {
      link.resume();
    }
    await eventually(() => a.live() && b.feed.live(), 'a live, b live again', 5000);
  });

  it('settled() resolves once the other replica has applied the change', async () => {
    let waited = 0;
    for (let n = 0; n < 5; n++) {
      const jti = await revoke();
      const t0 = performance.now();
      await a.settled();
      // b has the change, or (a stopped hearing b: pings over a second apart under load) b is not trusting its memory.
      expect(b.applied.has(jti) || !b.feed.live()).toBe(true);
      // Waited for b, who heard the change at most a little before t0.
      if (b.applied.has(jti) && performance.now() - t0 > LATE_MS / 2) waited++;
    }
    expect(waited).toBeGreaterThan(0);
  });

  it('a replica the writer stopped waiting for is not answering from memory', async () => {
    link.hold();
    const samples: { applied: boolean; live: boolean; ms: number }[] = [];
    const end = performance.now() + 2500;
    try {
      while (performance.now() < end) {
        const jti = await revoke();
        const t0 = performance.now();
        await a.settled(3000);
        samples.push({ applied: b.applied.has(jti), live: b.feed.live(), ms: performance.now() - t0 });
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      link.resume();
    }
    // The writer gave up on b once b's pings stopped (about deadMs), not at its 3 s timeout...
    expect(samples.filter((s) => !s.applied).length).toBeGreaterThan(0);
    expect(Math.max(...samples.map((s) => s.ms))).toBeLessThan(2900);
    // ...and b trusted its memory at no moment it lacked a change the writer had settled.
    expect(samples.filter((s) => !s.applied && s.live)).toEqual([]);
    await eventually(() => b.feed.live(), 'b to go live again', 5000);
    const jti = await revoke();
    await a.settled();
    expect(b.applied.has(jti)).toBe(true);
  }, 30_000);

  it('a replica of an older release (pings without acks) is waited for until its pings report the change', async () => {
    const channel = await changeChannel(sa);
    const sequence = async () => Number((await rowsOf<{ v: string }>(sa.db, sql`select last_value as v from identity_change_seq`))[0]!.v);
    // What that release sends every ping: `ping:<id>:<k>:<applied here>:<the sequence's value>`.
    let applied = await sequence();
    let k = 0;
    const pinger = setInterval(() => void sa.notify(channel, `ping:old-1:${++k}:${applied}:${applied}`), 100);
    try {
      await new Promise((r) => setTimeout(r, 400)); // a has heard it
      // Its pings never report the next change: the writer waits for it until the timeout.
      await revoke();
      let t0 = performance.now();
      await a.settled(1500);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(1400);
      // Its pings report the change 300 ms on: the writer goes on then, without an ack from it.
      await revoke();
      const upTo = await sequence();
      setTimeout(() => (applied = upTo), 300);
      t0 = performance.now();
      await a.settled(5000);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(250);
      expect(performance.now() - t0).toBeLessThan(4000);
    } finally {
      clearInterval(pinger);
    }
  }, 30_000);
});
