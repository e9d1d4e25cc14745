/**
 * The decision feed (GET /v1/governance/standing, ETag) and the credential consequence of losing
 * standing: a manual suspension and a cascade suspension each revoke the agent's Membership VC
 * with a `vc_revoke` log row. The standing is served from memory, kept current by the change
 * feed, so a long transaction never holds the control plane's poll. Real HTTP on PGlite (and
 * PostgreSQL with TEST_DATABASE_URL).
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { eq, sql } from 'drizzle-orm';
import { createChangeFeed, type ChangeFeed } from '../../change-feed.js';
import { governedAgents } from '../../../store/schema/governance.js';
import type { Store } from '../../../store/factory.js';
import { revocations } from '../../../store/schema/identity.js';
import { testBackends } from '../../../store/testing.js';
import { seedAgent, seedEmployee, seedIdentity, serveEnterprise, setEmployee, subjectOf } from './testkit.js';

const T = 'standing-t';

describe.each(testBackends())('governance standing on $name', (b) => {
  let store: Store;
  let api: Awaited<ReturnType<typeof serveEnterprise>>;
  let changes: ChangeFeed;
  beforeAll(async () => {
    store = await b.open();
    changes = createChangeFeed(store);
    api = await serveEnterprise(store, () => Date.now(), { changes });
    const owner = await seedEmployee(store.db, { tenant: T, ext: 'own' });
    const sponsor = await seedEmployee(store.db, { tenant: T, ext: 'spon' });
    for (const name of ['bot-a', 'bot-b']) {
      await seedAgent(store.db, T, {
        agentName: name,
        ownerRef: owner,
        businessSponsor: sponsor,
        status: 'active',
        riskTier: 'low',
        approvedRuntime: 'local_dev',
      });
      await seedIdentity(store.db, name);
    }
  });
  afterAll(async () => {
    await api?.close();
    await changes?.close();
    await store?.close();
  });

  const json = async (path: string, init?: RequestInit): Promise<any> => (await fetch(`${api.base}${path}`, init)).json();
  const revoked = async (jti: string) => (await store.db.select().from(revocations).where(eq(revocations.jti, jti))).length === 1;

  it('serves every status with an ETag; an unchanged feed answers 304', async () => {
    const r = await fetch(`${api.base}/v1/governance/standing`);
    expect(r.status).toBe(200);
    expect(((await r.json()) as any).agents).toMatchObject({ 'bot-a': 'active', 'bot-b': 'active' });
    const etag = r.headers.get('etag')!;
    expect(etag).toBeTruthy();
    expect((await fetch(`${api.base}/v1/governance/standing`, { headers: { 'if-none-match': etag } })).status).toBe(304);
  });

  it('answers at once while a long transaction holds the store, and shows its change once it commits', async () => {
    const owner = await seedEmployee(store.db, { tenant: T, ext: 'own-c' });
    await seedAgent(store.db, T, { agentName: 'bot-c', ownerRef: owner, status: 'active', riskTier: 'low', approvedRuntime: 'local_dev' });
    await vi.waitFor(() => expect(changes.live()).toBe(true));
    await store.db.execute(sql`select 1`); // the view's load, queued before it, has run
    expect((await json('/v1/governance/standing')).agents['bot-c']).toBe('active'); // its own write, at once
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let holding!: () => void;
    const held = new Promise<void>((r) => (holding = r));
    // A directory sync holds PGlite's only connection like this for seconds.
    const tx = store.db.transaction(async (t) => {
      await t.update(governedAgents).set({ status: 'quarantined' }).where(eq(governedAgents.agentName, 'bot-c'));
      holding();
      await gate;
    });
    try {
      await held;
      const t0 = performance.now();
      const during = await fetch(`${api.base}/v1/governance/standing`, { signal: AbortSignal.timeout(5000) });
      expect(performance.now() - t0).toBeLessThan(1000);
      expect(((await during.json()) as any).agents['bot-c']).toBe('active'); // not committed yet
    } finally {
      release();
      await tx;
    }
    expect((await json('/v1/governance/standing')).agents['bot-c']).toBe('quarantined');
  });

  it('a manual suspension revokes the Membership VC (vc_revoke) and changes the feed', async () => {
    const before = (await fetch(`${api.base}/v1/governance/standing`)).headers.get('etag')!;
    const t = await api.post('/v1/governance/agents/bot-a/transition', { status: 'suspended', by: 'admin@x' });
    expect(t.status).toBe(200);
    expect(await revoked('urn:uuid:m-bot-a')).toBe(true);
    expect(await revoked('urn:uuid:m-bot-b')).toBe(false);
    const log = await json(`/v1/revocation/log?tenant=${T}`);
    expect(log.find((l: { kind: string; agent_id: string }) => l.kind === 'vc_revoke' && l.agent_id === 'bot-a')).toMatchObject({
      reason_code: 'agent_inactive',
      source: 'admin',
    });
    const after = await fetch(`${api.base}/v1/governance/standing`, { headers: { 'if-none-match': before } });
    expect(after.status).toBe(200);
    expect(((await after.json()) as any).agents['bot-a']).toBe('suspended');
  });

  it('a cascade suspension (owner deactivated) revokes the Membership VC too', async () => {
    await setEmployee(store.db, T, 'own', { active: false });
    const r = await api.post(`/v1/revocation/cascade?tenant=${T}`, {});
    expect(r.status).toBe(200);
    expect(await revoked('urn:uuid:m-bot-b')).toBe(true);
    const log = await json(`/v1/revocation/log?tenant=${T}`);
    expect(log.find((l: { kind: string; agent_id: string }) => l.kind === 'vc_revoke' && l.agent_id === 'bot-b')).toMatchObject({
      reason_code: 'owner_inactive',
    });
    expect((await json('/v1/governance/standing')).agents['bot-b']).toBe('suspended');
    void subjectOf;
  });
});
