import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { ApiError } from '../../lib/errors.js';
import { rowsOf, type Store } from '../../store/factory.js';
import { openTestPostgres, testBackends, testSchema, TEST_DATABASE_URL } from '../../store/testing.js';
import type { AuditEntry } from '../types.js';
import { createApprovalQueue, type ApprovalQueue } from './queue.js';
import { loadConfig, parseDurationMs } from '../../lib/settings.js';

const approvalTimeoutOf = (env: Record<string, string>) => loadConfig(env).proxy.approvalTimeoutMs;
const maxPendingOf = (env: Record<string, string>) => loadConfig(env).proxy.maxPendingPerAgent;

function memoryAudit() {
  const rows: AuditEntry[] = [];
  return { rows, append: (e: AuditEntry) => void rows.push(e) };
}

const input = (over: Partial<Parameters<ApprovalQueue['create']>[0]> = {}) => ({
  actor: 'bot',
  actorDid: 'did:key:z6MkTest',
  target: 'example.com:443',
  service: 'external',
  action: 'http:connect',
  resource: 'https://example.com:443',
  reason: 'external host not in egressAllow',
  ...over,
});

async function apiError(p: Promise<unknown>): Promise<ApiError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof ApiError) return e;
    throw e;
  }
  throw new Error('expected an ApiError');
}

let replicaSeq = 0;
const replica = () => `r${++replicaSeq}`;

describe('approval timeout parsing', () => {
  it('accepts Go-style durations and bare seconds, rejects the rest', () => {
    expect(parseDurationMs('120')).toBe(120_000);
    expect(parseDurationMs('2m')).toBe(120_000);
    expect(parseDurationMs('1500ms')).toBe(1500);
    expect(approvalTimeoutOf({})).toBe(120_000);
    expect(approvalTimeoutOf({ EGRESS_APPROVAL_TIMEOUT: '30s' })).toBe(30_000);
    expect(() => parseDurationMs('soon')).toThrow(/duration/);
    expect(() => parseDurationMs('0')).toThrow(/between/);
    expect(() => parseDurationMs('48h')).toThrow(/between/);
  });
});

describe.each(testBackends())('approval queue on $name', (b) => {
  let store: Store;
  beforeAll(async () => {
    store = await b.open();
  });
  afterAll(async () => {
    await store.close();
  });

  it('creates pending records (SPEC 2.4 fields) and lists them newest first with a status filter', async () => {
    const audit = memoryAudit();
    const q = await createApprovalQueue({ store, audit, replicaId: replica(), timeoutMs: 60_000 });
    try {
      const a = await q.create(input({ target: 'a.example:443' }));
      const c = await q.create(input({ target: 'c.example:443' }));
      expect(a).toMatchObject({
        status: 'pending',
        actor: 'bot',
        actorDid: 'did:key:z6MkTest',
        target: 'a.example:443',
        service: 'external',
        approver: null,
        decidedAt: null,
      });
      expect(a.id).toMatch(/^[0-9a-f-]{36}$/);
      expect(new Date(a.requestedAt).toISOString()).toBe(a.requestedAt);
      expect(Date.parse(a.expiresAt) - Date.parse(a.requestedAt)).toBe(60_000);
      await q.deny(a.id, 'alice', 'not today');
      const all = await q.list();
      const ids = all.map((r) => r.id);
      expect(ids.indexOf(c.id)).toBeLessThan(ids.indexOf(a.id));
      const pending = await q.list({ status: 'pending' });
      expect(pending.map((r) => r.id)).toContain(c.id);
      expect(pending.map((r) => r.id)).not.toContain(a.id);
      expect((await q.list({ status: 'denied' })).find((r) => r.id === a.id)).toMatchObject({ approver: 'alice', denyReason: 'not today' });
      expect(await q.list({ limit: 1 })).toHaveLength(1);
    } finally {
      await q.close();
    }
  });

  it('hold then approve: the hold wakes approved, one egress.approval audit row, second decision is 409', async () => {
    const audit = memoryAudit();
    const q = await createApprovalQueue({ store, audit, replicaId: replica(), timeoutMs: 60_000, pollMs: 60_000 });
    try {
      const r = await q.create(input());
      const held = q.hold(r.id);
      await new Promise((res) => setTimeout(res, 20));
      expect(q.holding()).toBe(1);
      const approved = await q.approve(r.id, 'alice');
      expect(await held).toBe('approved');
      expect(q.holding()).toBe(0);
      expect(approved).toMatchObject({ status: 'approved', approver: 'alice', denyReason: null });
      expect(approved.decidedAt).not.toBeNull();
      // (Rows left pending by earlier tests' closed queues are expired with egress.proxy records.)
      const approvals = () => audit.rows.filter((x) => x.action === 'egress.approval');
      expect(approvals()).toEqual([expect.objectContaining({ action: 'egress.approval', subject: 'alice', actor: 'bot', service: 'external', allow: true })]);
      expect((await apiError(q.approve(r.id, 'bob'))).status).toBe(409);
      expect((await apiError(q.deny(r.id, 'bob', 'late'))).status).toBe(409);
      expect(approvals()).toHaveLength(1);
      // The decision was used by the connection it released: once.
      expect(await q.get(r.id)).toMatchObject({ usedAt: expect.any(String), held: true });
      expect(await q.hold(r.id)).toBe('expired');
    } finally {
      await q.close();
    }
  });

  it('hold then deny: the hold wakes denied with the reason stored and audited', async () => {
    const audit = memoryAudit();
    const q = await createApprovalQueue({ store, audit, replicaId: replica(), timeoutMs: 60_000, pollMs: 60_000 });
    try {
      const r = await q.create(input());
      const held = q.hold(r.id);
      const denied = await q.deny(r.id, 'carol', 'exfiltration risk');
      expect(await held).toBe('denied');
      expect(denied).toMatchObject({ status: 'denied', approver: 'carol', denyReason: 'exfiltration risk' });
      expect(audit.rows[0]).toMatchObject({ action: 'egress.approval', allow: false, subject: 'carol' });
      expect(audit.rows[0]!.reason).toContain('exfiltration risk');
    } finally {
      await q.close();
    }
  });

  it('unknown or malformed ids are 404', async () => {
    const q = await createApprovalQueue({ store, audit: memoryAudit(), replicaId: replica(), timeoutMs: 60_000 });
    try {
      expect((await apiError(q.approve('00000000-0000-4000-8000-000000000000', 'a'))).status).toBe(404);
      expect((await apiError(q.deny('not-a-uuid', 'a', 'r'))).status).toBe(404);
      expect((await apiError(q.hold('00000000-0000-4000-8000-000000000000'))).status).toBe(404);
      expect(await q.get('nope')).toBeUndefined();
      expect(q.holding()).toBe(0);
    } finally {
      await q.close();
    }
  });

  it('a hold past the timeout expires the request in the store (fail closed); a late approve is 409', async () => {
    const audit = memoryAudit();
    const q = await createApprovalQueue({ store, audit, replicaId: replica(), timeoutMs: 150 });
    try {
      const r = await q.create(input());
      expect(await q.hold(r.id)).toBe('expired');
      expect(await q.get(r.id)).toMatchObject({ status: 'expired', denyReason: 'approval timed out', approver: null });
      expect((await apiError(q.approve(r.id, 'alice'))).status).toBe(409);
      expect(audit.rows).toHaveLength(0);
    } finally {
      await q.close();
    }
  });

  it('past its deadline a request cannot be approved, even before a sweep has marked it expired', async () => {
    const audit = memoryAudit();
    const q = await createApprovalQueue({ store, audit, replicaId: replica(), timeoutMs: 100, pollMs: 600_000 });
    try {
      const r = await q.create(input({ target: 'late.example:443' }));
      await new Promise((res) => setTimeout(res, 250));
      const e = await apiError(q.approve(r.id, 'alice'));
      expect(e.status).toBe(409);
      expect(e.message).toMatch(/expired/);
      expect(await q.get(r.id)).toMatchObject({ status: 'expired', approver: null });
      expect(audit.rows).toHaveLength(0);
    } finally {
      await q.close();
    }
  });

  it('one agent has at most maxPendingPerAgent requests waiting; other agents are not counted against it, and a decision makes room', async () => {
    const q = await createApprovalQueue({ store, audit: memoryAudit(), replicaId: replica(), timeoutMs: 60_000, maxPendingPerAgent: 2 });
    try {
      const a = await q.create(input({ actor: 'greedy', target: 'g1.example:443' }));
      await q.create(input({ actor: 'greedy', target: 'g2.example:443' }));
      const third = await apiError(q.create(input({ actor: 'greedy', target: 'g3.example:443' })));
      expect(third.status).toBe(429);
      expect(third.message).toMatch(/at most 2/);
      expect((await q.create(input({ actor: 'modest', target: 'g3.example:443' }))).status).toBe('pending');
      // Decided: room again.
      await q.deny(a.id, 'alice', 'no');
      expect((await q.create(input({ actor: 'greedy', target: 'g3.example:443' }))).status).toBe('pending');
      expect(() => maxPendingOf({ EGRESS_MAX_PENDING_PER_AGENT: '0' })).toThrow(/positive integer/);
    } finally {
      await q.close();
    }
  });

  it('a request too long to show an approver in full is not held (no clipped URL to approve)', async () => {
    const q = await createApprovalQueue({ store, audit: memoryAudit(), replicaId: replica(), timeoutMs: 60_000 });
    try {
      const long = `https://long.example/${'a'.repeat(5000)}`;
      expect((await apiError(q.create(input({ target: 'long.example:443', resource: long })))).status).toBe(400);
      expect((await q.list()).some((r) => r.target === 'long.example:443')).toBe(false);
    } finally {
      await q.close();
    }
  });

  it('the client disconnecting while held expires the request', async () => {
    const q = await createApprovalQueue({ store, audit: memoryAudit(), replicaId: replica(), timeoutMs: 60_000 });
    try {
      const r = await q.create(input());
      const ac = new AbortController();
      const held = q.hold(r.id, ac.signal);
      await new Promise((res) => setTimeout(res, 20));
      ac.abort();
      expect(await held).toBe('expired');
      expect(await q.get(r.id)).toMatchObject({ status: 'expired', denyReason: 'client disconnected while held' });
    } finally {
      await q.close();
    }
  });

  it('exactly one of concurrent decisions wins', async () => {
    const audit = memoryAudit();
    const q = await createApprovalQueue({ store, audit, replicaId: replica(), timeoutMs: 60_000 });
    try {
      const r = await q.create(input());
      const held = q.hold(r.id);
      const results = await Promise.allSettled([q.approve(r.id, 'a'), q.deny(r.id, 'b', 'no'), q.approve(r.id, 'c'), q.deny(r.id, 'd', 'no')]);
      const won = results.filter((x) => x.status === 'fulfilled');
      expect(won).toHaveLength(1);
      for (const x of results) if (x.status === 'rejected') expect((x.reason as ApiError).status).toBe(409);
      const final = (won[0] as PromiseFulfilledResult<{ status: string }>).value.status;
      expect(await held).toBe(final);
      expect(audit.rows).toHaveLength(1);
    } finally {
      await q.close();
    }
  });

  it('a refused audit append rolls the decision back (503, still pending)', async () => {
    const q = await createApprovalQueue({
      store,
      audit: {
        append: () => {
          throw new Error('backpressure');
        },
      },
      replicaId: replica(),
      timeoutMs: 60_000,
    });
    try {
      const r = await q.create(input());
      const e = await apiError(q.approve(r.id, 'alice'));
      expect(e.status).toBe(503);
      expect((await q.get(r.id))?.status).toBe('pending');
    } finally {
      await q.close();
    }
  });

  /** A process that dies without close(): its heartbeat stops, its rows stay held by it. */
  async function crashed(q: ApprovalQueue, id: string) {
    const [row] = await rowsOf<{ holder_instance: string }>(store.db, sql`select holder_instance from egress_requests where id = ${id}`);
    await q.close();
    await store.db.execute(sql`update egress_requests set holder_instance = ${row!.holder_instance} where id = ${id}`);
  }

  it('on start, releases what a crashed process held (with its egress.proxy record), expires what is past deadline, leaves live holds alone', async () => {
    const peer = await createApprovalQueue({ store, audit: memoryAudit(), replicaId: replica(), timeoutMs: 60_000, holderTtlMs: 60_000 });
    const first = await createApprovalQueue({ store, audit: memoryAudit(), replicaId: replica(), timeoutMs: 60_000 });
    const mine = await first.create(input({ target: 'crash.example:443' }));
    await crashed(first, mine.id);
    const theirs = await peer.create(input({ target: 'live.example:443' }));
    const theirsOld = await peer.create(input({ target: 'old.example:443' }));
    await store.db.execute(sql`update egress_requests set expires_at = now() - interval '1 second' where id = ${theirsOld.id}`);
    const audit = memoryAudit();
    const restarted = await createApprovalQueue({ store, audit, replicaId: replica(), timeoutMs: 60_000 });
    try {
      expect(await restarted.get(mine.id)).toMatchObject({ status: 'pending', held: false });
      expect(audit.rows).toContainEqual(
        expect.objectContaining({
          action: 'egress.proxy',
          actor: 'bot',
          allow: false,
          rule: 'delegation',
          reason: expect.stringContaining(`${mine.id} to crash.example:443: connection lost`),
        }),
      );
      expect((await restarted.get(theirsOld.id))?.status).toBe('expired');
      expect(await restarted.get(theirs.id)).toMatchObject({ status: 'pending', held: true });
    } finally {
      await restarted.close();
      await peer.close();
    }
  });

  it('a released request is adopted by the retry of the same request and released by the approval; another request is not', async () => {
    const first = await createApprovalQueue({ store, audit: memoryAudit(), replicaId: replica(), timeoutMs: 60_000 });
    const r = await first.create(input({ target: 'adopt.example:443' }));
    await crashed(first, r.id);
    const q = await createApprovalQueue({ store, audit: memoryAudit(), replicaId: replica(), timeoutMs: 60_000, pollMs: 60_000 });
    try {
      // Another resource, another DID: new requests.
      expect((await q.create(input({ target: 'adopt.example:443', resource: 'https://adopt.example/other' }))).id).not.toBe(r.id);
      expect((await q.create(input({ target: 'adopt.example:443', actorDid: 'did:key:z6MkOther' }))).id).not.toBe(r.id);
      const again = await q.create(input({ target: 'adopt.example:443' }));
      expect(again).toMatchObject({ id: r.id, status: 'pending', held: true, requestedAt: r.requestedAt, digest: r.digest });
      const held = q.hold(again.id);
      await new Promise((res) => setTimeout(res, 20));
      await q.approve(r.id, 'alice');
      expect(await held).toBe('approved');
      expect((await q.get(r.id))?.usedAt).not.toBeNull();
    } finally {
      await q.close();
    }
  });

  it('a decision made while no connection waits reaches the next identical request once; expiry always denies', async () => {
    const audit = memoryAudit();
    const q = await createApprovalQueue({ store, audit, replicaId: replica(), timeoutMs: 60_000 });
    const [ok, no, late] = [
      (await q.create(input({ target: 'retry-ok.example:443' }))).id,
      (await q.create(input({ target: 'retry-no.example:443' }))).id,
      (await q.create(input({ target: 'retry-late.example:443' }))).id,
    ];
    await q.close();
    const next = await createApprovalQueue({ store, audit, replicaId: replica(), timeoutMs: 60_000 });
    try {
      expect(await next.approve(ok, 'alice')).toMatchObject({ status: 'approved', held: false, usedAt: null });
      await next.deny(no, 'bob', 'not there');
      await store.db.execute(sql`update egress_requests set expires_at = now() - interval '1 second' where id = ${late}`);

      const a = await next.create(input({ target: 'retry-ok.example:443' }));
      expect(a).toMatchObject({ id: ok, status: 'approved' });
      expect(await next.hold(a.id)).toBe('approved');
      const d = await next.create(input({ target: 'retry-no.example:443' }));
      expect(d).toMatchObject({ id: no, status: 'denied', denyReason: 'not there' });
      expect(await next.hold(d.id)).toBe('denied');
      // Used: the next retry is a new request for a human.
      expect(await next.create(input({ target: 'retry-ok.example:443' }))).toMatchObject({ status: 'pending' });
      expect((await next.create(input({ target: 'retry-ok.example:443' }))).id).not.toBe(ok);
      // Past its deadline: expired, never adopted.
      const l = await next.create(input({ target: 'retry-late.example:443' }));
      expect(l.id).not.toBe(late);
      await next.sweep();
      expect((await next.get(late))?.status).toBe('expired');
    } finally {
      await next.close();
    }
  });

  it('close() releases the holds of this process: they answer released, the requests stay pending', async () => {
    const q = await createApprovalQueue({ store, audit: memoryAudit(), replicaId: replica(), timeoutMs: 60_000 });
    const r = await q.create(input());
    const held = q.hold(r.id);
    await new Promise((res) => setTimeout(res, 20));
    await q.close();
    expect(await held).toBe('released');
    const [row] = await rowsOf<{ status: string; holder_instance: string | null }>(
      store.db,
      sql`select status, holder_instance from egress_requests where id = ${r.id}`,
    );
    expect(row).toEqual({ status: 'pending', holder_instance: null });
    expect((await apiError(q.create(input()))).status).toBe(503);
  });
});

describe.skipIf(!TEST_DATABASE_URL)('approval queue across replicas on postgres', () => {
  const schema = testSchema();
  let a: Store;
  let b: Store;
  beforeAll(async () => {
    a = await openTestPostgres({ schema, keepSchema: true });
    b = await openTestPostgres({ schema });
  });
  afterAll(async () => {
    await a.close();
    await b.close();
  });

  it('an approval made on one replica wakes the hold on another through NOTIFY', async () => {
    // Polls far longer than the test: only the notification can wake the hold.
    const qa = await createApprovalQueue({ store: a, audit: memoryAudit(), replicaId: 'replica-a', timeoutMs: 60_000, pollMs: 600_000 });
    const auditB = memoryAudit();
    const qb = await createApprovalQueue({ store: b, audit: auditB, replicaId: 'replica-b', timeoutMs: 60_000, pollMs: 600_000 });
    try {
      const r1 = await qa.create(input());
      const h1 = qa.hold(r1.id);
      await new Promise((res) => setTimeout(res, 50));
      await qb.approve(r1.id, 'alice');
      expect(await h1).toBe('approved');
      expect(auditB.rows).toHaveLength(1);

      const r2 = await qa.create(input());
      const h2 = qa.hold(r2.id);
      await new Promise((res) => setTimeout(res, 50));
      await qb.deny(r2.id, 'bob', 'no');
      expect(await h2).toBe('denied');
      // Replica b sees replica a's rows (one store), and a's in-deadline hold survived b's start.
      expect((await qb.list()).map((r) => r.id)).toEqual(expect.arrayContaining([r1.id, r2.id]));
    } finally {
      await qa.close();
      await qb.close();
    }
  });

  it('a lost notification is covered by the poll of held ids', async () => {
    const qa = await createApprovalQueue({ store: a, audit: memoryAudit(), replicaId: 'replica-a2', timeoutMs: 60_000, pollMs: 100 });
    try {
      const r = await qa.create(input());
      const held = qa.hold(r.id);
      // A decision written behind the queue's back: no NOTIFY at all.
      await b.db.execute(sql`update egress_requests set status = 'approved', approver = 'dba' where id = ${r.id}`);
      expect(await held).toBe('approved');
    } finally {
      await qa.close();
    }
  });
});
