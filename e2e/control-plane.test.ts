/**
 * End to end: the real control plane (registry snapshot, audit chain on the store, budgets,
 * metrics, /authz and the management listener) on ephemeral loopback ports, driven over HTTP.
 * Runs on PGlite in memory, and on PostgreSQL too when TEST_DATABASE_URL is set.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H, metric } from '../runtime/lib/brand.js';
import { close, listen } from '../runtime/lib/http.js';
import { startControlPlane, type RunningControlPlane } from '../runtime/control-plane/server.js';
import type { IdentityPort } from '../runtime/control-plane/identity-port.js';
import type { AuditRecord } from '../runtime/control-plane/types.js';
import type { Store } from '../runtime/store/factory.js';
import { testBackends } from '../runtime/store/testing.js';
import { loadConfig } from '../runtime/lib/settings.js';

/** An in-process identity authority: one agent VP, delegations approved for task "t-ok". */
const identity: IdentityPort = {
  async verifyPresentation(vp) {
    return vp === 'vp-bot' ? { ok: true, agentName: 'bot', agentDid: 'did:key:zBot', reason: 'ok' } : { ok: false, reason: 'bad signature' };
  },
  async checkDelegation(q) {
    return q.task === 't-ok'
      ? { ok: true, reason: 'ok', vcJti: 'jti-9', notAfter: Math.floor(Date.now() / 1000) + 600 }
      : { ok: false, reason: 'no approved delegation' };
  },
};

describe.each(testBackends())('control plane end to end on $name', (b) => {
  let store: Store;
  let cp: RunningControlPlane;
  let opa: http.Server;
  let mgmt: string;
  let authz: string;

  const post = (url: string, body: unknown) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const decide = (headers: Record<string, string>, path = '/authz', method = 'GET') => fetch(`${authz}${path}`, { method, headers });
  const auditRows = async (): Promise<AuditRecord[]> => (await (await fetch(`${mgmt}/v1/audit?limit=1000`)).json()) as AuditRecord[];

  beforeAll(async () => {
    // OPA data API: vetoes anything that targets "vetoed".
    opa = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const input = (JSON.parse(body) as { input: { target?: string; service?: string } }).input;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ result: input.target !== 'vetoed' && input.service !== 'vetoed' }));
      });
    });
    const opaPort = await listen(opa, '127.0.0.1:0');
    store = await b.open();
    cp = await startControlPlane({
      store,
      // OPA's fail-closed timeout (500 ms) is opa.test.ts's subject; here a loaded CI machine's
      // stall must not turn an allow into a deny.
      config: loadConfig({ OPA_URL: `http://127.0.0.1:${opaPort}/v1/data/writ/allow`, OPA_TIMEOUT_MS: '10000', TRUSTED_PROXIES: '127.0.0.1, ::1' }),
      identity,
      decisionAddr: '127.0.0.1:0',
      mgmtAddr: '127.0.0.1:0',
    });
    mgmt = `http://127.0.0.1:${cp.mgmtPort}`;
    authz = `http://127.0.0.1:${cp.decisionPort}`;
  });
  afterAll(async () => {
    await cp?.close();
    await store?.close();
    if (opa) await close(opa);
  });

  it('registers services through the management listener', async () => {
    const services = [
      { name: 'web', upstream: 'web.default.svc:80', public: true, kind: 'service' },
      { name: 'orders', upstream: 'orders.default.svc:8080' },
      { name: 'vetoed', upstream: 'vetoed.default.svc:80', public: true },
      { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowModels: ['gpt'], allowTools: ['search', 'ledger'], budget: { tokensPerHour: 1000 } },
      { name: 'tight', upstream: 'tight.agents.svc:8080', kind: 'agent', allowTools: ['search'], budget: { callsPerHour: 2 } },
      { name: 'gpt', upstream: 'broker.default.svc:8080', kind: 'model' },
      { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' },
      { name: 'notes', upstream: 'notes.tools.svc:8080', kind: 'tool' },
      { name: 'ledger', upstream: 'ledger.tools.svc:8080', kind: 'tool', dataClass: 'regulated' },
    ];
    for (const s of services) {
      const r = await post(`${mgmt}/v1/registry/services`, s);
      expect(r.status).toBe(200);
      expect(await r.json()).toMatchObject({ name: s.name, upstream: s.upstream });
    }
    const list = (await (await fetch(`${mgmt}/v1/registry/services`)).json()) as { name: string }[];
    expect(list.map((s) => s.name)).toEqual([...services.map((s) => s.name)].sort());
  });

  it('ingress: public 200, private 403, unknown 403, bearer in development posture 200', async () => {
    const pub = await decide({ [H.service]: 'web' });
    expect(pub.status).toBe(200);
    expect(pub.headers.get(H.upstream)).toBe('web.default.svc:80');
    expect(pub.headers.get(H.subject)).toBe('anonymous');
    expect((await decide({ [H.service]: 'orders' })).status).toBe(403);
    const unknown = await decide({ [H.service]: 'nope' });
    expect(unknown.status).toBe(403);
    expect(await unknown.json()).toMatchObject({ allow: false, rule: 'registry' });
    expect((await decide({ [H.service]: 'orders', authorization: 'Bearer dev' })).status).toBe(200);
    // fetch cannot set Host; x-forwarded-host counts because this peer is a trusted proxy.
    expect((await decide({ 'x-forwarded-host': 'orders.default.svc:8080', authorization: 'Bearer dev' })).status).toBe(200);
  });

  it('/authz/<path> answers for several methods', async () => {
    for (const method of ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS']) {
      const r = await decide({ [H.service]: 'web' }, '/authz/some/path?q=1', method);
      expect(r.status, method).toBe(200);
      if (method !== 'HEAD') expect(await r.json()).toMatchObject({ allow: true });
    }
    expect((await decide({ [H.service]: 'web' }, '/nope')).status).toBe(404);
  });

  it('egress: allowlists per kind, VP stamping, unknown actor and target', async () => {
    const ok = await decide({ [H.actor]: 'bot', [H.service]: 'gpt', [H.agentVp]: 'vp-bot', [H.onBehalfOf]: 'alice' });
    expect(ok.status).toBe(200);
    expect(ok.headers.get(H.actor)).toBe('bot');
    expect(ok.headers.get(H.agentDid)).toBe('did:key:zBot');
    expect(ok.headers.get(H.subject)).toBe('alice');
    expect(ok.headers.get(H.upstream)).toBe('broker.default.svc:8080');
    const notListed = await decide({ [H.actor]: 'bot', [H.service]: 'notes' });
    expect(notListed.status).toBe(403);
    expect(await notListed.json()).toMatchObject({ rule: 'inline', reason: expect.stringContaining('allowTools') });
    expect((await decide({ [H.actor]: 'ghost', [H.service]: 'gpt' })).status).toBe(403);
    expect((await decide({ [H.actor]: 'bot', [H.service]: 'nowhere' })).status).toBe(403);
    expect((await decide({ [H.actor]: 'bot', [H.service]: 'gpt', [H.agentVp]: 'forged' })).status).toBe(403);
  });

  it('regulated egress: 401 needs approval without a delegation, 200 with one', async () => {
    const h = { [H.actor]: 'bot', [H.service]: 'ledger', [H.action]: 'ledger:read', [H.resource]: 'acct/1' };
    const no = await decide({ ...h, [H.task]: 't-none' });
    expect(no.status).toBe(401);
    expect(no.headers.get(H.needsApproval)).toBe('true');
    const yes = await decide({ ...h, [H.task]: 't-ok' });
    expect(yes.status).toBe(200);
    const rows = await auditRows();
    const last = rows.filter((r) => r.service === 'ledger').at(-1);
    expect(last).toMatchObject({ action: 'tool.read', allow: true, rule: 'delegation', delegationId: 'jti-9' });
    expect(typeof last?.delegationExp).toBe('number');
  });

  it('OPA vetoes after the inline rules allow', async () => {
    const r = await decide({ [H.service]: 'vetoed' });
    expect(r.status).toBe(403);
    expect(await r.json()).toMatchObject({ rule: 'opa' });
  });

  it('usage reports feed the token budget; calls per hour count allowed decisions', async () => {
    const h = { [H.actor]: 'bot', [H.service]: 'gpt' };
    expect((await decide(h)).status).toBe(200);
    const u = await post(`${mgmt}/v1/usage`, { agent: 'bot', model: 'gpt', tokens: 1000, costUsd: 0.25 });
    expect(u.status).toBe(200);
    expect(await u.json()).toEqual({ ok: true });
    expect((await post(`${mgmt}/v1/usage`, { agent: 'bot', tokens: 'many' })).status).toBe(400);
    const over = await decide(h);
    expect(over.status).toBe(403);
    expect(await over.json()).toMatchObject({ rule: 'inline', reason: expect.stringContaining('token budget exceeded') });

    const t = { [H.actor]: 'tight', [H.service]: 'search' };
    for (const call of [1, 2]) {
      const r = await decide(t);
      expect(r.status, `call ${call}: ${await r.text()}`).toBe(200);
    }
    const third = await decide(t);
    expect(third.status).toBe(403);
    expect(await third.json()).toMatchObject({ reason: expect.stringContaining('call budget exceeded') });
  });

  it('/metrics shows the decision, duration, token and cost series', async () => {
    const text = await (await fetch(`${mgmt}/metrics`)).text();
    expect(text).toMatch(new RegExp(`${metric('authz_decisions_total')}\\{service="web",decision="allow",rule="inline"\\} \\d+`));
    expect(text).toMatch(new RegExp(`${metric('authz_decisions_total')}\\{service="unknown",decision="deny",rule="registry"\\} \\d+`));
    expect(text).toContain(`${metric('authz_decisions_total')}{service="vetoed",decision="deny",rule="opa"} 1`);
    expect(text).toMatch(new RegExp(`${metric('authz_duration_seconds')}_count\\{service="gpt"\\} \\d+`));
    expect(text).toContain(`${metric('token_usage_total')}{agent="bot",model="gpt"} 1000`);
    expect(text).toContain(`${metric('agent_cost_usd_total')}{agent="bot"} 0.25`);
  });

  it('audit rows appear for every decision and the chain verifies', async () => {
    const rows = await auditRows();
    const actions = new Set(rows.map((r) => r.action));
    for (const a of ['registry.upsert', 'authz', 'model.invoke', 'tool.read']) expect(actions.has(a as AuditRecord['action'])).toBe(true);
    const denied = rows.find((r) => r.action === 'authz' && r.service === 'nope');
    expect(denied).toMatchObject({ allow: false, rule: 'registry' });
    const egress = rows.find((r) => r.action === 'model.invoke' && r.allow);
    expect(egress).toMatchObject({ actor: 'bot', subject: 'alice', service: 'gpt' });
    expect(await (await fetch(`${mgmt}/v1/audit/verify`)).json()).toEqual({ ok: true, brokenAtSeq: -1 });
  });

  it('close() flushes the audit chain to the store', async () => {
    const seq = cp.plane.audit.stats().lastSeq;
    await cp.plane.audit.flush(10_000);
    expect(cp.plane.audit.stats().shippedSeq).toBe(seq);
  });
});
