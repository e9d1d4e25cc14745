import type { Server } from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import { Counter, Registry as PromRegistry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../lib/brand.js';
import { close, listen } from '../lib/http.js';
import { setLogLevel } from '../lib/log.js';
import type { Store } from '../store/factory.js';
import { openTestPglite } from '../store/testing.js';
import { openAuditChain, type AuditChain } from './audit/chain.js';
import { createMgmtApp, METRICS_CONTENT_TYPE, MGMT_BODY_LIMIT, type MgmtDeps } from './mgmt.js';
import { createRegistry, type Registry } from './registry/registry.js';
import { MAX_CALL_TOKENS } from '../lib/reservation-header.js';
import { USAGE_BATCH_MAX, USAGE_COST_MAX, type UsageReport } from './types.js';
import { createReadiness } from '../lib/readiness.js';

setLogLevel('error');

/** Response whose JSON body the assertions inspect freely. */
type Res = Omit<Response, 'json'> & { json(): Promise<any> };
const req = (url: string, init?: RequestInit) => fetch(url, init) as Promise<Res>;

async function serveApp(deps: MgmtDeps): Promise<{ base: string; server: Server }> {
  const server = createAdaptorServer({ fetch: createMgmtApp(deps).fetch }) as Server;
  const port = await listen(server, '127.0.0.1:0');
  return { base: `http://127.0.0.1:${port}`, server };
}

describe('management API over HTTP', () => {
  let store: Store;
  let audit: AuditChain;
  let registry: Registry;
  let server: Server;
  let base: string;
  const readiness = createReadiness();
  const started = readiness.gate('starting');
  const usage: UsageReport[] = [];
  const prom = new PromRegistry();
  const decisions = new Counter({ name: metric('authz_decisions_total'), help: 'decisions', labelNames: ['service', 'decision', 'rule'], registers: [prom] });

  beforeAll(async () => {
    store = await openTestPglite();
    audit = await openAuditChain(store);
    registry = await createRegistry(store, { audit });
    ({ base, server } = await serveApp({
      registry,
      audit,
      // A settlement of reservation `down` fails, as when the ledger cannot be written.
      usage: (r) => (r.reservation === 'down' ? Promise.reject(new Error('ledger down')) : usage.push(r)),
      metricsText: () => prom.metrics(),
      readiness,
      routes: [new Hono().get('/v1/egress/requests', (c) => c.json([]))],
    }));
  });
  afterAll(async () => {
    await close(server);
    await registry.close();
    await audit.close();
    await store.close();
  });

  const get = (path: string) => req(base + path);
  const post = (path: string, body: string, headers: Record<string, string> = { 'content-type': 'application/json' }) =>
    req(base + path, { method: 'POST', body, headers });
  const postJson = (path: string, body: unknown) => post(path, JSON.stringify(body));

  it('GET /healthz is 200; /readyz is 503 with its reasons until ready', async () => {
    const h = await get('/healthz');
    expect(h.status).toBe(200);
    expect(await h.json()).toEqual({ ok: true });
    const notYet = await get('/readyz');
    expect(notYet.status).toBe(503);
    expect(await notYet.json()).toEqual({ ready: false, error: 'not ready', reasons: ['starting'] });
    started();
    const r = await get('/readyz');
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ ready: true });
  });

  it('registry: POST echoes the stored service, GET lists sorted, GET by name or 404', async () => {
    expect(await (await get('/v1/registry/services')).json()).toEqual([]);
    const p = await postJson('/v1/registry/services', { name: 'orders', upstream: 'orders.svc:8080', owner: 'shop' });
    expect(p.status).toBe(200);
    const stored = await p.json();
    expect(stored).toMatchObject({ name: 'orders', upstream: 'orders.svc:8080', owner: 'shop', requireScope: '', public: false });
    expect(typeof stored.registeredAt).toBe('string');
    expect((await postJson('/v1/registry/services', { name: 'agent/alpha', upstream: 'alpha.svc:80', kind: 'agent', allowModels: ['gpt'] })).status).toBe(200);
    expect((await postJson('/v1/registry/services', { name: 'billing', upstream: 'billing.svc:80' })).status).toBe(200);
    const list = await (await get('/v1/registry/services')).json();
    expect(list.map((s: { name: string }) => s.name)).toEqual(['agent/alpha', 'billing', 'orders']);
    const one = await get('/v1/registry/services/orders');
    expect(one.status).toBe(200);
    expect(await one.json()).toEqual(stored);
    const slashed = await get('/v1/registry/services/agent/alpha');
    expect(slashed.status).toBe(200);
    expect((await slashed.json()).allowModels).toEqual(['gpt']);
    const missing = await get('/v1/registry/services/nope');
    expect(missing.status).toBe(404);
    expect((await missing.json()).error).toMatch(/not found/);
    // Each upsert is audited.
    const upserts = audit.recent(1000).filter((r) => r.action === 'registry.upsert');
    expect(upserts.map((r) => r.service)).toEqual(['orders', 'agent/alpha', 'billing']);
    expect(upserts[0]!.subject).toBe('mgmt-api');
  });

  it('registry: every bad input is a 400 naming the field, and changes nothing', async () => {
    const before = await (await get('/v1/registry/services')).json();
    const seq = audit.stats().lastSeq;
    const cases: [string, RegExp][] = [
      ['{"name": "orders", "upstream": ', /malformed JSON/],
      ['', /malformed JSON/],
      ['null', /expected object/],
      ['[1,2]', /expected object/],
      ['"orders"', /expected object/],
      [JSON.stringify({ name: 'orders', upstream: 'x.svc:1', colour: 'red' }), /colour/],
      [JSON.stringify({ name: 'orders', upstream: 'x.svc' }), /upstream/],
      [JSON.stringify({ name: 'orders', upstream: 'x.svc:99999' }), /upstream/],
      [JSON.stringify({ name: 'orders', upstream: 'x.svc:1', kind: 'robot' }), /kind/],
      [JSON.stringify({ name: 'orders', upstream: 'x.svc:1', dataClass: 'top-secret' }), /dataClass/],
      [JSON.stringify({ name: 'orders', upstream: 'x.svc:1', budget: { tokensPerHour: -5 } }), /budget\.tokensPerHour/],
      [JSON.stringify({ name: 'orders', upstream: 'x.svc:1', public: 'true' }), /public/],
      [JSON.stringify({ name: 7, upstream: 'x.svc:1' }), /name/],
      [JSON.stringify({ upstream: 'x.svc:1' }), /name/],
    ];
    for (const [body, message] of cases) {
      const r = await post('/v1/registry/services', body);
      expect(r.status, body).toBe(400);
      const j = await r.json();
      expect(j.error, body).toMatch(message);
    }
    const detailed = await (await postJson('/v1/registry/services', { name: 'orders', upstream: 'x.svc:1', kind: 'robot' })).json();
    expect(detailed.detail[0].loc).toEqual(['body', 'kind']);
    expect(await (await get('/v1/registry/services')).json()).toEqual(before);
    expect(audit.stats().lastSeq).toBe(seq);
  });

  it('a write a web page could make a browser send from another site is refused, and changes nothing', async () => {
    const svc = JSON.stringify({ name: 'csrf-demo', upstream: 'evil.example:443', public: true });
    const bytes = new TextEncoder().encode(svc);
    // A body that does not say it is JSON: what a cross-site form, text/plain or no-cors fetch sends.
    for (const headers of <Record<string, string>[]>[
      { 'content-type': 'text/plain' },
      { 'content-type': 'application/x-www-form-urlencoded' },
      { 'content-type': 'multipart/form-data; boundary=x' },
      {}, // a Uint8Array body goes out with no Content-Type unless one is given
      // JSON in another charset is not read as UTF-8 (JSON text is UTF-8, RFC 8259).
      { 'content-type': 'application/json; charset=utf-16' },
      { 'content-type': 'application/json; charset="iso-8859-1"' },
    ]) {
      const r = await req(base + '/v1/registry/services', { method: 'POST', body: bytes, headers });
      expect(r.status, JSON.stringify(headers)).toBe(415);
      expect(await r.json()).toEqual({ error: 'Content-Type must be application/json in UTF-8' });
      const u = await req(base + '/v1/usage', {
        method: 'POST',
        body: new TextEncoder().encode(JSON.stringify({ agent: 'a', model: 'm', tokens: 1 })),
        headers,
      });
      expect(u.status).toBe(400);
      expect(await u.json()).toEqual({ error: 'invalid body' });
    }
    // A browser's cross-origin write, JSON or not, body or none (Go's CrossOriginProtection rules).
    const host = new URL(base).host;
    for (const headers of <Record<string, string>[]>[
      { 'sec-fetch-site': 'cross-site' },
      { 'sec-fetch-site': 'same-site', origin: 'http://localhost:3000' },
      { origin: 'http://evil.example' },
      { origin: 'null' },
    ]) {
      const json = await req(base + '/v1/registry/services', { method: 'POST', body: svc, headers: { ...headers, 'content-type': 'application/json' } });
      expect(json.status, JSON.stringify(headers)).toBe(403);
      expect(await json.json()).toEqual({ error: 'cross-origin request refused: a web page may not write to this API' });
      expect((await req(base + '/v1/registry/services/csrf-demo', { method: 'DELETE', headers })).status).toBe(403);
    }
    expect((await get('/v1/registry/services/csrf-demo')).status).toBe(404);
    // The portal's own calls (same origin, or the Origin of this host), and any client that is no
    // browser; JSON with parameters and a +json type are JSON.
    for (const headers of <Record<string, string>[]>[
      { 'content-type': 'application/json; charset=utf-8', 'sec-fetch-site': 'same-origin', origin: base },
      { 'content-type': 'application/json', origin: `http://${host}` },
      { 'content-type': 'application/merge-patch+json' },
    ])
      expect((await post('/v1/registry/services', svc, headers)).status, JSON.stringify(headers)).toBe(200);
    // Reads are never refused.
    expect((await req(base + '/v1/registry/services/csrf-demo', { headers: { 'sec-fetch-site': 'cross-site' } })).status).toBe(200);
  });

  it('oversize bodies are refused with 413 (declared or streamed), nothing stored', async () => {
    const big = JSON.stringify({ name: 'huge', upstream: 'h.svc:1', owner: 'x'.repeat(MGMT_BODY_LIMIT) });
    const declared = await post('/v1/registry/services', big);
    expect(declared.status).toBe(413);
    expect((await declared.json()).error).toBe(`body too large: limit ${MGMT_BODY_LIMIT} bytes`);
    const chunk = new TextEncoder().encode('x'.repeat(64 * 1024));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(c) {
        if (sent > MGMT_BODY_LIMIT + chunk.length) return c.close();
        sent += chunk.length;
        c.enqueue(chunk);
      },
    });
    const streamed = await fetch(base + '/v1/usage', { method: 'POST', body: stream, duplex: 'half' } as RequestInit);
    expect(streamed.status).toBe(413);
    expect(registry.get('huge')).toBeUndefined();
    expect(usage).toHaveLength(0);
  });

  it('POST /v1/usage: 200 {ok:true} and feeds the meter; any bad body is exactly 400 {error:"invalid body"}; no audit row', async () => {
    const seq = audit.stats().lastSeq;
    const ok = await postJson('/v1/usage', { agent: 'agent-a', model: 'gpt', tokens: 120, costUsd: 0.25 });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ ok: true });
    expect(usage).toEqual([{ agent: 'agent-a', model: 'gpt', tokens: 120, costUsd: 0.25 }]);
    const bad = [
      '{"agent":',
      '',
      'null',
      '[]',
      JSON.stringify({ model: 'gpt', tokens: 1, costUsd: 0 }),
      JSON.stringify({ agent: 'a', model: 'gpt', tokens: -1, costUsd: 0 }),
      JSON.stringify({ agent: 'a', model: 'gpt', tokens: 1.5, costUsd: 0 }),
      JSON.stringify({ agent: 'a', model: 'gpt', tokens: '10', costUsd: 0 }),
      JSON.stringify({ agent: 'a', model: 'gpt', tokens: 1, costUsd: -1 }),
      JSON.stringify({ agent: 'a', model: 'gpt', tokens: 1, costUsd: 0, extra: true }),
      JSON.stringify({ agent: '', model: 'gpt', tokens: 1, costUsd: 0 }),
      // Figures no call makes, which the meters would add up to Infinity (or past exact integers).
      '{"agent":"a","model":"gpt","tokens":1,"costUsd":1e308}',
      JSON.stringify({ agent: 'a', model: 'gpt', tokens: MAX_CALL_TOKENS + 1, costUsd: 0 }),
      JSON.stringify({ agent: 'a', model: 'gpt', tokens: 1, costUsd: USAGE_COST_MAX * 2 }),
      // A batch with one bad report records none of it; an oversize batch is refused whole.
      JSON.stringify([
        { agent: 'a', model: 'gpt', tokens: 1, costUsd: 0 },
        { agent: 'a', model: 'gpt', tokens: -1, costUsd: 0 },
      ]),
      JSON.stringify(Array.from({ length: USAGE_BATCH_MAX + 1 }, () => ({ agent: 'a', model: 'gpt', tokens: 1, costUsd: 0 }))),
      JSON.stringify([[{ agent: 'a', model: 'gpt', tokens: 1, costUsd: 0 }]]),
    ];
    for (const body of bad) {
      const r = await post('/v1/usage', body);
      expect(r.status, body).toBe(400);
      expect(await r.json(), body).toEqual({ error: 'invalid body' });
    }
    expect(usage).toHaveLength(1);
    expect(audit.stats().lastSeq).toBe(seq);
  });

  it('POST /v1/usage with a batch: every report recorded; settlements the store cannot write are a 503 naming them, the rest recorded', async () => {
    usage.length = 0;
    const batch = [
      { agent: 'agent-a', model: 'gpt', tokens: 5, costUsd: 0 },
      { agent: 'agent-b', model: 'gpt', tokens: 7, costUsd: 0.5, reservation: 'r1' },
      { agent: 'agent-a', model: 'gpt', tokens: 9, costUsd: 0, reservation: 'r2' },
    ];
    const ok = await postJson('/v1/usage', batch);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ ok: true });
    expect(usage).toEqual([batch[0], batch[1], batch[2]]);
    // A settlement that cannot be written (the store down) is a 503 naming it by index, the
    // reporter posts only it again; the plain report needs no store and is recorded once.
    usage.length = 0;
    const failed = await postJson('/v1/usage', [batch[0], { ...batch[1], reservation: 'down' }, batch[2]]);
    expect(failed.status).toBe(503);
    expect(await failed.json()).toEqual({ error: 'budget store unavailable', unsettled: [1] });
    expect(usage).toEqual([batch[0], batch[2]]);
    const lone = await postJson('/v1/usage', { ...batch[1], reservation: 'down' });
    expect(lone.status).toBe(503);
    expect(await lone.json()).toEqual({ error: 'budget store unavailable', unsettled: [0] });
  });

  it('GET /v1/audit: newest last, default 200, capped at 1000, bad limits are 400', async () => {
    for (let i = 0; i < 1100; i++) audit.append({ action: 'authz', subject: `u${i}`, service: 'orders', allow: i % 2 === 0, reason: 'test', rule: 'registry' });
    const last = audit.stats().lastSeq;
    const def = await (await get('/v1/audit')).json();
    expect(def).toHaveLength(200);
    expect(def[199].seq).toBe(last);
    expect(def[0].seq).toBe(last - 199);
    const five = await (await get('/v1/audit?limit=5')).json();
    expect(five.map((r: { seq: number }) => r.seq)).toEqual([last - 4, last - 3, last - 2, last - 1, last]);
    expect(five[4]).toEqual(audit.recent(1)[0]);
    expect(await (await get('/v1/audit?limit=5000')).json()).toHaveLength(1000);
    expect(await (await get('/v1/audit?limit=99999999999999999999999')).json()).toHaveLength(1000);
    for (const q of ['0', '-1', 'abc', '1.5', '', '1e3', ' 5']) {
      const r = await get(`/v1/audit?limit=${encodeURIComponent(q)}`);
      expect(r.status, q).toBe(400);
      expect((await r.json()).error, q).toMatch(/limit/);
    }
  });

  it('GET /v1/audit/verify: ok on the live chain', async () => {
    const r = await get('/v1/audit/verify');
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ ok: true, brokenAtSeq: -1 });
  });

  it('GET /v1/audit/verify: reports the seq of a record altered in the store', async () => {
    const c = await openAuditChain(store, { chain: 'tampered' });
    for (let i = 0; i < 10; i++) c.append({ action: 'egress', actor: 'a', subject: 's', service: 'x', allow: true, reason: 'ok' });
    await c.close();
    await store.exec(`update audit_log set allow = false where chain = 'tampered' and seq = 4`);
    const reopened = await openAuditChain(store, { chain: 'tampered' });
    const other = await serveApp({ registry, audit: reopened, usage: () => {}, metricsText: async () => '', readiness: createReadiness() });
    try {
      expect(await (await req(other.base + '/v1/audit/verify')).json()).toEqual({ ok: false, brokenAtSeq: 4 });
    } finally {
      await close(other.server);
      await reopened.close();
    }
  });

  it('apply, delete and version: owners never take over each other; unchanged re-apply bumps nothing', async () => {
    const v0 = (await (await get('/v1/registry/version')).json()).version;
    const desired = {
      owner: 'folder:/gitops',
      services: [
        { name: 'g1', upstream: 'g1.svc:80' },
        { name: 'g2', upstream: 'nope' },
        { name: 'orders', upstream: 'o.svc:1' },
      ],
    };
    const dry = await (await postJson('/v1/registry/apply', { ...desired, dryRun: true })).json();
    expect(dry).toMatchObject({ version: v0, created: ['g1'], conflicts: ['orders'], conflictOwners: { orders: 'api' } });
    expect(registry.get('g1')).toBeUndefined();
    const r = await postJson('/v1/registry/apply', desired);
    expect(r.status).toBe(200);
    const applied = await r.json();
    expect(applied).toMatchObject({ version: v0 + 1, created: ['g1'], updated: [], deleted: [], unchanged: [], conflicts: ['orders'] });
    expect(applied.invalid.map((i: { name: string }) => i.name)).toEqual(['g2']);
    const again = await (await postJson('/v1/registry/apply', desired)).json();
    expect(again).toMatchObject({ version: v0 + 1, created: [], unchanged: ['g1'] });
    const ver = await (await get('/v1/registry/version')).json();
    expect(ver.version).toBe(v0 + 1);
    expect(ver.hash).toMatch(/^[0-9a-f]{64}$/);
    // The API owner cannot overwrite or delete a folder-owned entry.
    expect((await postJson('/v1/registry/services', { name: 'g1', upstream: 'x.svc:1' })).status).toBe(409);
    const del = await req(base + '/v1/registry/services/g1', { method: 'DELETE' });
    expect(del.status).toBe(409);
    expect((await del.json()).error).toMatch(/folder:\/gitops/);
    // Its own entries it deletes; unknown is 404.
    await postJson('/v1/registry/services', { name: 'tmp/one', upstream: 't.svc:1' });
    const gone = await req(base + '/v1/registry/services/tmp/one', { method: 'DELETE' });
    expect(gone.status).toBe(200);
    expect((await gone.json()).deleted).toBe('tmp/one');
    expect((await req(base + '/v1/registry/services/tmp/one', { method: 'DELETE' })).status).toBe(404);
    // The folder withdraws what it granted by applying an empty desired state.
    const pruned = await (await postJson('/v1/registry/apply', { owner: 'folder:/gitops', services: [] })).json();
    expect(pruned.deleted).toEqual(['g1']);
    for (const bad of [{ services: [] }, { owner: '', services: [] }, { owner: 'x', services: 'no' }, { owner: 'x', services: [], extra: 1 }]) {
      const b = await postJson('/v1/registry/apply', bad);
      expect(b.status, JSON.stringify(bad)).toBe(400);
      expect((await b.json()).error).toMatch(/invalid request/);
    }
  });

  it('GET /openapi.json documents the routes from the validating schemas', async () => {
    const doc = await (await get('/openapi.json')).json();
    expect(doc.openapi).toBe('3.1.0');
    for (const p of ['/v1/registry/services', '/v1/registry/services/{name}', '/v1/registry/apply', '/v1/registry/version', '/v1/usage'])
      expect(Object.keys(doc.paths)).toContain(p);
    expect(doc.components.schemas.Service.properties.upstream).toBeDefined();
    expect(doc.paths['/v1/registry/services/{name}'].delete.responses['409']).toBeDefined();
  });

  it('a registry store that is down answers 503, not 500', async () => {
    const down = await openTestPglite();
    const reg = await createRegistry(down);
    await down.close();
    const other = await serveApp({ registry: reg, audit, usage: () => {}, metricsText: async () => '', readiness: createReadiness() });
    try {
      const r = await req(other.base + '/v1/registry/services', {
        method: 'POST',
        body: JSON.stringify({ name: 'x', upstream: 'x.svc:1' }),
        headers: { 'content-type': 'application/json' },
      });
      expect(r.status).toBe(503);
      expect(await r.json()).toEqual({ error: 'registry store unavailable' });
    } finally {
      await close(other.server);
      await reg.close().catch(() => {});
    }
  });

  it('GET /metrics serves the Prometheus exposition', async () => {
    decisions.inc({ service: 'orders', decision: 'allow', rule: 'registry' });
    const r = await get('/metrics');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe(METRICS_CONTENT_TYPE);
    expect(await r.text()).toContain(`${metric('authz_decisions_total')}{service="orders",decision="allow",rule="registry"} 1`);
  });

  it('extra routes are mounted; unknown routes are 404 JSON, a known path with another method 405 with Allow', async () => {
    const extra = await get('/v1/egress/requests');
    expect(extra.status).toBe(200);
    expect(await extra.json()).toEqual([]);
    const r = await get('/v1/nothing-here');
    expect(r.status).toBe(404);
    expect(await r.json()).toEqual({ error: 'not found' });
    const wrongMethod = await fetch(base + '/v1/audit', { method: 'DELETE' });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('GET, HEAD');
    expect(await wrongMethod.json()).toEqual({ error: 'DELETE is not allowed on /v1/audit; allowed: GET, HEAD' });
    const put = await fetch(base + '/v1/registry/services/some/name', { method: 'PUT' });
    expect(put.status).toBe(405);
    expect(put.headers.get('allow')).toBe('DELETE, GET, HEAD');
    expect((await fetch(base + '/v1/registry/services', { method: 'PATCH' })).headers.get('allow')).toMatch(/^GET, HEAD, POST$/);
    expect((await fetch(base + '/v1/nothing-here', { method: 'PUT' })).status).toBe(404);
  });
});
