import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Hono } from 'hono';
import type { Store } from '../../store/factory.js';
import { testBackends } from '../../store/testing.js';
import type { AuditEntry } from '../types.js';
import { createApprovalQueue, type ApprovalQueue } from './queue.js';
import { approvalRoutes } from './routes.js';
import { apiAuth, type Principal } from '../../lib/api-auth.js';

const post = (app: Hono, path: string, body: unknown) =>
  app.request(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });

describe('egress routes with the queue disabled', () => {
  it('answer 503 on every route', async () => {
    const app = new Hono();
    app.route('/', approvalRoutes({ queue: undefined }));
    const list = await app.request('/v1/egress/requests');
    expect(list.status).toBe(503);
    expect(((await list.json()) as { error: string }).error).toMatch(/disabled/);
    expect((await post(app, '/v1/egress/requests/x/approve', { approver: 'a' })).status).toBe(503);
    expect((await post(app, '/v1/egress/requests/x/deny', { approver: 'a', reason: 'r' })).status).toBe(503);
  });
});

describe.each(testBackends())('egress routes on $name', (b) => {
  let store: Store;
  let queue: ApprovalQueue;
  const audit: AuditEntry[] = [];
  const app = new Hono();
  beforeAll(async () => {
    store = await b.open();
    queue = await createApprovalQueue({ store, audit: { append: (e) => void audit.push(e) }, replicaId: 'routes', timeoutMs: 60_000 });
    app.route('/', approvalRoutes({ queue }));
  });
  afterAll(async () => {
    await queue.close();
    await store.close();
  });

  const create = () => queue.create({ actor: 'bot', target: 'x.example:443', service: 'external', reason: 'external host' });

  it('lists newest first, filters by status, rejects a bad filter', async () => {
    const r1 = await create();
    const r2 = await create();
    const res = await app.request('/v1/egress/requests?status=pending');
    expect(res.status).toBe(200);
    const list = (await res.json()) as { id: string; status: string }[];
    expect(list.map((r) => r.id).slice(0, 2)).toEqual([r2.id, r1.id]);
    expect(list.every((r) => r.status === 'pending')).toBe(true);
    expect((await app.request('/v1/egress/requests?status=approved')).status).toBe(200);
    const bad = await app.request('/v1/egress/requests?status=bogus');
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toMatch(/status must be one of/);
    expect((await app.request('/v1/egress/requests?limit=0')).status).toBe(400);
    expect(((await (await app.request('/v1/egress/requests?limit=1')).json()) as unknown[]).length).toBe(1);
  });

  it('approves: 200 with the record, wakes the hold, audits; a second decision is 409', async () => {
    const r = await create();
    const held = queue.hold(r.id);
    const res = await post(app, `/v1/egress/requests/${r.id}/approve`, { approver: 'alice' });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id: r.id, status: 'approved', approver: 'alice' });
    expect(await held).toBe('approved');
    expect(audit.at(-1)).toMatchObject({ action: 'egress.approval', allow: true, subject: 'alice' });
    const again = await post(app, `/v1/egress/requests/${r.id}/deny`, { approver: 'bob', reason: 'no' });
    expect(again.status).toBe(409);
    expect(await again.json()).toMatchObject({ status: 'approved' });
  });

  it('denies with a reason; the reason is required', async () => {
    const r = await create();
    const missing = await post(app, `/v1/egress/requests/${r.id}/deny`, { approver: 'bob' });
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { detail: { loc: unknown[] }[] }).detail[0]!.loc).toEqual(['body', 'reason']);
    const res = await post(app, `/v1/egress/requests/${r.id}/deny`, { approver: 'bob', reason: 'not needed' });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'denied', approver: 'bob', denyReason: 'not needed' });
  });

  it('bad bodies are 400 and change nothing; unknown ids are 404', async () => {
    const r = await create();
    for (const body of ['{', '[]', { approver: '' }, { approver: 7 }, { approver: 'a', extra: 1 }, 'null']) {
      const res = await post(app, `/v1/egress/requests/${r.id}/approve`, body);
      expect(res.status).toBe(400);
      expect(typeof ((await res.json()) as { error: unknown }).error).toBe('string');
    }
    expect((await queue.get(r.id))?.status).toBe('pending');
    expect((await post(app, '/v1/egress/requests/00000000-0000-4000-8000-000000000000/approve', { approver: 'a' })).status).toBe(404);
    expect((await post(app, '/v1/egress/requests/nope/deny', { approver: 'a', reason: 'r' })).status).toBe(404);
  });
});

describe.each(testBackends())('egress routes with WRIT_API_AUTH=keys on $name', (b) => {
  let store: Store;
  let queue: ApprovalQueue;
  const app = new Hono();
  // Two principals: the key behind each bearer token (what the identity authority would answer).
  const principals: Record<string, Principal> = {
    'alice-token': { kind: 'key', id: 'key:alice', scopes: new Set(['approvals:decide', 'approvals:read']) },
    'viewer-token': { kind: 'key', id: 'key:viewer', scopes: new Set(['approvals:read']) },
  };
  beforeAll(async () => {
    store = await b.open();
    queue = await createApprovalQueue({ store, audit: { append: () => {} }, replicaId: 'auth', timeoutMs: 60_000 });
    app.use('*', apiAuth({ mode: 'keys', check: async (t) => principals[t], deny: (c, status, message) => c.json({ error: message }, status) }));
    app.route('/', approvalRoutes({ queue }));
  });
  afterAll(async () => {
    await queue.close();
    await store.close();
  });
  const as = (token: string, path: string, body: unknown) =>
    app.request(path, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
  const create = () => queue.create({ actor: 'bot', target: 'x.example:443', service: 'external', reason: 'external host' });

  it('the approver is the authenticated caller, never the body; the approval names the digest of exactly that request, once', async () => {
    const r = await create();
    const other = await create();
    const listed = (await (await app.request('/v1/egress/requests', { headers: { authorization: 'Bearer viewer-token' } })).json()) as {
      id: string;
      digest: string;
    }[];
    const digest = listed.find((x) => x.id === r.id)!.digest;
    expect(digest).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(listed.find((x) => x.id === other.id)!.digest).not.toBe(digest);
    // Without the scope, or without a credential: refused before the queue is touched.
    expect((await as('viewer-token', `/v1/egress/requests/${r.id}/approve`, { digest })).status).toBe(403);
    expect((await post(app, `/v1/egress/requests/${r.id}/approve`, { approver: 'alice', digest })).status).toBe(401);
    // No digest, or another request's digest: not approved.
    expect((await as('alice-token', `/v1/egress/requests/${r.id}/approve`, {})).status).toBe(400);
    expect((await as('alice-token', `/v1/egress/requests/${other.id}/approve`, { digest })).status).toBe(409);
    expect((await queue.get(other.id))!.status).toBe('pending');
    const held = queue.hold(r.id);
    const ok = await as('alice-token', `/v1/egress/requests/${r.id}/approve`, { approver: 'mallory', digest });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ id: r.id, status: 'approved', approver: 'key:alice' });
    expect(await held).toBe('approved');
    // Used once: a second approval (or a deny) of the same request is a conflict.
    expect((await as('alice-token', `/v1/egress/requests/${r.id}/approve`, { digest })).status).toBe(409);
    const denied = await as('alice-token', `/v1/egress/requests/${other.id}/deny`, { approver: 'mallory', reason: 'no' });
    expect(await denied.json()).toMatchObject({ status: 'denied', approver: 'key:alice' });
  });

  it('an expired request cannot be approved', async () => {
    const short = await createApprovalQueue({ store, audit: { append: () => {} }, replicaId: 'auth-short', timeoutMs: 50 });
    try {
      const r = await short.create({ actor: 'bot', target: 'y.example:443', service: 'external', reason: 'external host' });
      expect(await short.hold(r.id)).toBe('expired');
      const digest = (await short.get(r.id))!.digest;
      const late = await as('alice-token', `/v1/egress/requests/${r.id}/approve`, { digest });
      expect(late.status).toBe(409);
      expect((await queue.get(r.id))!.status).toBe('expired');
    } finally {
      await short.close();
    }
  });
});
