/**
 * The broker's reservation riding on its /authz call, over real sockets against a control plane
 * on PGlite: an allow carries the reservation and charges the budget; a worst case that does not
 * fit turns the allow into a deny the audit records (and the call is not counted); a partial ask
 * gets what is left; the header is refused off model targets and when malformed; the dry-run
 * reserves nothing.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { formatReserve, parseReservation, type ReserveAsk } from '../lib/reservation-header.js';
import type { Store } from '../store/factory.js';
import { openTestPglite } from '../store/testing.js';
import { startControlPlane, type RunningControlPlane } from './server.js';

describe('X-Writ-Reserve on /authz', () => {
  let store: Store;
  let cp: RunningControlPlane;
  let mgmt = '';
  let authz = '';
  const ask = (promptTokens: number, outputTokens: number, partial = false): ReserveAsk => ({
    promptTokens,
    outputTokens,
    priceInputPer1k: 0.01,
    priceOutputPer1k: 0.02,
    ...(partial ? { partial } : {}),
  });
  const decide = async (actor: string, service: string, reserve: string) => {
    const r = await fetch(`${authz}/authz`, { headers: { [H.actor]: actor, [H.service]: service, [H.reserve]: reserve } });
    const body = (await r.json()) as { allow: boolean; reason: string };
    return { status: r.status, body, reservation: parseReservation(r.headers.get(H.reservation) ?? undefined, r.headers.get('retry-after') ?? undefined) };
  };
  const used = async (agent: string) => {
    const d = ((await (await fetch(`${mgmt}/v1/budgets/${agent}`)).json()) as { dimensions: Record<string, { used: number }> }).dimensions;
    return { tokens: d.tokensPerHour!.used, calls: d.callsPerHour!.used };
  };

  beforeAll(async () => {
    store = await openTestPglite();
    cp = await startControlPlane({ store, durableAudit: false, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    mgmt = `http://127.0.0.1:${cp.mgmtPort}`;
    authz = `http://127.0.0.1:${cp.decisionPort}`;
    await cp.plane.registry.upsert({ name: 'm', upstream: 'broker.svc:8080', kind: 'model' });
    await cp.plane.registry.upsert({ name: 'search', upstream: 'search.svc:8080', kind: 'tool' });
    const agent = { kind: 'agent' as const, allowModels: ['m'], allowTools: ['search'] };
    await cp.plane.registry.upsert({ name: 'capped', upstream: 'capped.svc:8080', ...agent, budget: { tokensPerHour: 1000, callsPerHour: 50 } });
    await cp.plane.registry.upsert({ name: 'dry', upstream: 'dry.svc:8080', ...agent, budget: { tokensPerHour: 1000, callsPerHour: 50 } });
    await cp.plane.registry.upsert({ name: 'free', upstream: 'free.svc:8080', ...agent });
  }, 180_000);
  afterAll(async () => {
    await cp?.close();
    await store?.close();
  });

  it('an allow carries the reservation and the budget is charged its worst case', async () => {
    const r = await decide('capped', 'm', formatReserve(ask(100, 300)));
    expect(r.status).toBe(200);
    expect(r.reservation).toMatchObject({ kind: 'reserved', outputTokens: 300 });
    expect((r.reservation as { id: string }).id).toMatch(/^[0-9a-f-]{36}$/);
    expect(await used('capped')).toEqual({ tokens: 400, calls: 1 });
  });

  it('a worst case over the whole budget never fits: refused with no retry-after', async () => {
    const r = await decide('capped', 'm', formatReserve(ask(100, 1000)));
    expect(r.status).toBe(403);
    expect(r.body.reason).toMatch(/this call needs up to 1100 of 1000 tokens per hour, more than the whole budget: it never fits/);
    expect(r.reservation).toEqual({ kind: 'refused' });
  });

  it('a worst case that does not fit is a recorded deny, the call not counted; a partial ask gets what is left', async () => {
    const r = await decide('capped', 'm', formatReserve(ask(100, 600)));
    expect(r.status).toBe(403);
    expect(r.body.allow).toBe(false);
    expect(r.body.reason).toMatch(/^tokensPerHour budget of agent capped: this call needs up to 700 of 1000 tokens per hour and 400 are used or reserved/);
    expect(r.reservation).toEqual({ kind: 'refused', retryAfterSeconds: expect.any(Number) });
    expect(await used('capped')).toEqual({ tokens: 400, calls: 1 });
    const rows = (await (await fetch(`${mgmt}/v1/audit?limit=1000`)).json()) as { actor?: string; allow: boolean; reason: string }[];
    const last = rows.filter((x) => x.actor === 'capped').at(-1)!;
    expect(last).toMatchObject({ allow: false, reason: r.body.reason });

    const p = await decide('capped', 'm', formatReserve(ask(100, 600, true)));
    expect(p.status).toBe(200);
    expect(p.reservation).toMatchObject({ kind: 'reserved', outputTokens: 500 });
    expect(await used('capped')).toEqual({ tokens: 1000, calls: 2 });
  });

  it('no token or cost ceiling: allowed with no reservation to settle', async () => {
    const r = await decide('free', 'm', formatReserve(ask(10, 20)));
    expect(r.status).toBe(200);
    expect(r.reservation).toEqual({ kind: 'reserved', id: null, outputTokens: 20 });
  });

  it('refused off model targets and when malformed', async () => {
    const tool = await decide('free', 'search', formatReserve(ask(10, 20)));
    expect(tool.status).toBe(403);
    expect(tool.body.reason).toBe(`${H.reserve} applies to model calls only`);
    const bad = await decide('free', 'm', 'prompt=10; output=0; input-price=0; output-price=0');
    expect(bad.status).toBe(403);
    expect(bad.body.reason).toMatch(new RegExp(`^malformed ${H.reserve}: output must be an integer`));
    expect(bad.reservation).toBeUndefined();
  });

  it('the dry-run allows the same ask and reserves nothing', async () => {
    const r = await fetch(`${mgmt}/v1/decisions/dry-run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ headers: { [H.actor]: 'dry', [H.service]: 'm', [H.reserve]: formatReserve(ask(100, 300)) } }),
    });
    expect(r.status).toBe(200);
    const d = ((await r.json()) as { decision: { allow: boolean; headers: Record<string, string> } }).decision;
    expect(d.allow).toBe(true);
    expect(d.headers[H.reservation]).toBeUndefined();
    expect(await used('dry')).toEqual({ tokens: 0, calls: 0 });
  });

  it('the dry-run takes a header sent twice as a list, and decides it as /authz does', async () => {
    const dry = async (headers: Record<string, string | string[]>) => {
      const r = await fetch(`${mgmt}/v1/decisions/dry-run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ headers }),
      });
      expect(r.status).toBe(200);
      return ((await r.json()) as { decision: { allow: boolean; reason: string } }).decision;
    };
    // undici's request sends each line as given (fetch would join the two into one).
    const live = await request(`${authz}/authz`, { headers: [H.actor, 'free', H.service, 'search', H.task, 't1', H.task, 't2'] });
    expect(live.statusCode).toBe(403);
    const said = ((await live.body.json()) as { reason: string }).reason;
    expect(said).toBe(`${H.task} sent more than once: the call is scoped by one value`);
    expect(await dry({ [H.actor]: 'free', [H.service]: 'search', [H.task]: ['t1', 't2'] })).toMatchObject({ allow: false, reason: said });
    expect(await dry({ [H.actor]: 'free', [H.service]: 'search', [H.task]: ['t1'] })).toMatchObject({ allow: true });
    expect(await dry({ [H.actor]: 'free', [H.service]: 'search', authorization: ['Bearer a.b.c', 'Bearer d.e.f'] })).toMatchObject({
      allow: false,
      reason: 'authorization sent more than once: one credential speaks for the agent',
    });
  });

  it('the dry-run reads a proxy host as the proxy does: a host that is none is a 400', async () => {
    const dry = (host: string) =>
      fetch(`${mgmt}/v1/decisions/dry-run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ headers: {}, proxy: { host, port: 80 } }),
      });
    for (const host of ['-', 'a..b', '*.example.com', '256.0.0.1']) {
      const r = await dry(host);
      expect(r.status, host).toBe(400);
      expect(((await r.json()) as { error: string }).error).toMatch(/proxy\.host/);
    }
    // An address in any spelling is decided (here: no VP, so the proxy's challenge: 407, as the proxy answers it).
    const ok = await dry('0x7f.1');
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { decision: { allow: boolean; status: number } }).decision).toMatchObject({ allow: false, status: 407 });
  });
});
