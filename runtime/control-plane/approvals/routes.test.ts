import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Hono } from 'hono';
import type { Store } from '../../store/factory.js';
import { testBackends } from '../../store/testing.js';
import type { AuditEntry } from '../types.js';
import { createApprovalQueue, type ApprovalQueue } from './queue.js';
import { registerEgressRoutes } from './routes.js';

const post = (app: Hono, path: string, body: unknown) =>
  app.request(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });

describe('egress routes with the queue disabled', () => {
  it('answer 503 on every route', async () => {
    const app = new Hono();
    registerEgressRoutes(app, { queue: undefined });
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
    registerEgressRoutes(app, { queue });
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
