/**
 * HTTP /authz and gRPC Check give the same answer: one real control plane (in-memory store, an
 * in-test OPA data API, an in-process identity authority port), each fact set sent to both
 * listeners over their sockets, the answers compared as HTTP: status, `{allow, reason, rule}`
 * and the X-Writ-* headers.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H, header } from '../../lib/brand.js';
import { close, listen } from '../../lib/http.js';
import { openStore, type Store } from '../../store/factory.js';
import type { IdentityPort } from '../identity-port.js';
import { startControlPlane, type RunningControlPlane } from '../server.js';
import { RPC_OK, RPC_PERMISSION_DENIED, RPC_UNAUTHENTICATED } from './check.js';
import { asHttp, checkClient, checkRequest, type AsHttp, type CheckClient } from './testing.js';
import { loadConfig } from '../../lib/settings.js';

const identity: IdentityPort = {
  async verifyPresentation(vp) {
    if (vp === 'vp-bot') return { ok: true, agentName: 'bot', agentDid: 'did:key:z6Mkbot', reason: 'verified' };
    if (vp === 'vp-other') return { ok: true, agentName: 'other', agentDid: 'did:key:z6Mkother', reason: 'verified' };
    return { ok: false, reason: 'signature does not verify' };
  },
  async checkDelegation(q) {
    return q.task === 'approved' ? { ok: true, reason: 'approved delegation', delegationId: 'd-1' } : { ok: false, reason: 'no approved delegation' };
  },
};

const services = [
  { name: 'web', upstream: 'web.default.svc:80', public: true },
  { name: 'orders', upstream: 'orders.default.svc:8080' },
  { name: 'vetoed', upstream: 'vetoed.default.svc:80', public: true },
  { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowModels: ['gpt'], allowTools: ['search', 'ledger'], allowAgents: ['planner'] },
  { name: 'tight', upstream: 'tight.agents.svc:8080', kind: 'agent', allowTools: ['search'], budget: { callsPerHour: 1 } },
  { name: 'planner', upstream: 'planner.agents.svc:8080', kind: 'agent' },
  { name: 'gpt', upstream: 'broker.default.svc:8080', kind: 'model' },
  { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' },
  { name: 'notes', upstream: 'notes.tools.svc:8080', kind: 'tool' },
  { name: 'ledger', upstream: 'ledger.tools.svc:8080', kind: 'tool', dataClass: 'regulated' },
];

interface Case {
  name: string;
  headers: Record<string, string>;
  method?: string;
  path?: string;
  /** The request's host (Envoy always has one); default `gateway.example`. */
  host?: string;
  status: number;
  rule: string;
}

const egress = (h: Record<string, string>) => ({ [H.actor]: 'bot', ...h });
const regulated = { [H.service]: 'ledger', [H.action]: 'ledger:read', [H.resource]: 'acct/7' };

const CASES: Case[] = [
  { name: 'public service by X-Writ-Service', headers: { [H.service]: 'web' }, status: 200, rule: 'inline' },
  { name: 'public service by host:port', host: 'web.default.svc:80', headers: {}, status: 200, rule: 'inline' },
  { name: 'public service by registry name as host', host: 'web', headers: {}, status: 200, rule: 'inline' },
  {
    name: 'public service, POST with a path and query',
    method: 'POST',
    path: '/api/items?page=2',
    headers: { [H.service]: 'web' },
    status: 200,
    rule: 'inline',
  },
  { name: 'private service without credentials', headers: { [H.service]: 'orders' }, status: 403, rule: 'inline' },
  { name: 'private service with a bearer (OIDC off)', headers: { [H.service]: 'orders', authorization: 'Bearer opaque-token' }, status: 200, rule: 'inline' },
  {
    name: 'private service with a non-bearer credential',
    headers: { [H.service]: 'orders', authorization: 'Basic dXNlcjpwdw==' },
    status: 403,
    rule: 'inline',
  },
  { name: 'unknown service', headers: { [H.service]: 'nowhere' }, status: 403, rule: 'registry' },
  { name: 'unknown host', host: 'nowhere.example:443', headers: {}, status: 403, rule: 'registry' },
  { name: 'policy-engine veto', headers: { [H.service]: 'vetoed' }, path: '/admin', status: 403, rule: 'opa' },
  { name: 'x-forwarded-host from an untrusted peer is ignored', host: 'orders', headers: { 'x-forwarded-host': 'web' }, status: 403, rule: 'inline' },
  { name: 'egress to an allowed tool', headers: egress({ [H.service]: 'search' }), status: 200, rule: 'inline' },
  {
    name: 'egress on behalf of a human, with a task',
    headers: egress({ [H.service]: 'search', [H.onBehalfOf]: 'alice@example.com', [H.task]: 't-9' }),
    status: 200,
    rule: 'inline',
  },
  { name: 'egress to an allowed model', method: 'POST', path: '/v1/chat/completions', headers: egress({ [H.service]: 'gpt' }), status: 200, rule: 'inline' },
  { name: 'egress to an allowed agent', headers: egress({ [H.service]: 'planner', [H.targetKind]: 'agent' }), status: 200, rule: 'inline' },
  { name: 'egress to a tool not in the allow list', headers: egress({ [H.service]: 'notes' }), status: 403, rule: 'inline' },
  { name: 'egress to an unknown target', headers: egress({ [H.service]: 'nothing' }), status: 403, rule: 'registry' },
  { name: 'egress without a target', headers: egress({}), status: 403, rule: 'registry' },
  { name: 'egress target kind mismatch', headers: egress({ [H.service]: 'search', [H.targetKind]: 'model' }), status: 403, rule: 'registry' },
  { name: 'unknown agent', headers: { [H.actor]: 'ghost', [H.service]: 'search' }, status: 403, rule: 'registry' },
  { name: 'empty actor', headers: { [H.actor]: '', [H.service]: 'search' }, status: 403, rule: 'identity' },
  { name: 'agent VP verified: DID stamped', headers: egress({ [H.service]: 'search', [H.agentVp]: 'vp-bot' }), status: 200, rule: 'inline' },
  { name: 'agent VP that does not verify', headers: egress({ [H.service]: 'search', [H.agentVp]: 'vp-forged' }), status: 403, rule: 'identity' },
  { name: 'agent VP of another agent', headers: egress({ [H.service]: 'search', [H.agentVp]: 'vp-other' }), status: 403, rule: 'identity' },
  { name: 'regulated target without a delegation: needs approval', headers: egress({ ...regulated, [H.task]: 't-1' }), status: 401, rule: 'delegation' },
  { name: 'regulated target with an approved delegation', headers: egress({ ...regulated, [H.task]: 'approved' }), status: 200, rule: 'delegation' },
  { name: 'regulated target without action and resource', headers: egress({ [H.service]: 'ledger', [H.task]: 'approved' }), status: 403, rule: 'delegation' },
  { name: 'agent over its call budget', headers: { [H.actor]: 'tight', [H.service]: 'search' }, status: 403, rule: 'inline' },
];

interface HttpAnswer extends AsHttp {
  raw: string;
}

function viaHttp(port: number, c: Case): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const headers = { host: c.host ?? 'gateway.example', ...c.headers };
    const req = http.request({ host: '127.0.0.1', port, method: c.method ?? 'GET', path: `/authz${c.path ?? '/'}`, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (b: Buffer) => chunks.push(b));
      res.on('end', () => {
        const raw = Buffer.concat(chunks).toString();
        const out: Record<string, string> = {};
        for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') out[k] = v;
        resolve({ status: res.statusCode ?? 0, headers: out, body: JSON.parse(raw) as AsHttp['body'], raw });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/** The X-Writ-* headers of an answer; the deny reason is gRPC's addition and compared separately. */
function writHeaders(h: Record<string, string>): Record<string, string> {
  const prefix = header('').toLowerCase();
  return Object.fromEntries(Object.entries(h).filter(([k]) => k.startsWith(prefix) && k !== H.denyReason));
}

describe('HTTP /authz and gRPC Check: one control plane, the same answers', () => {
  let store: Store;
  let cp: RunningControlPlane;
  let opa: http.Server;
  let client: CheckClient;

  beforeAll(async () => {
    opa = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const input = (JSON.parse(body) as { input: { service?: string } }).input;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ result: input.service !== 'vetoed' }));
      });
    });
    const opaPort = await listen(opa, '127.0.0.1:0');
    store = await openStore({ backend: 'memory' });
    cp = await startControlPlane({
      store,
      // A loaded CI machine's stall must not hit OPA's fail-closed timeout (opa.test.ts's subject).
      config: loadConfig({ OPA_URL: `http://127.0.0.1:${opaPort}/v1/data/writ/allow`, OPA_TIMEOUT_MS: '10000' }),
      identity,
      decisionAddr: '127.0.0.1:0',
      mgmtAddr: '127.0.0.1:0',
      durableAudit: false,
    });
    for (const s of services) await cp.plane.registry.upsert(s);
    client = checkClient(cp.grpcPort);
    // Spend tight's one call per hour, so its case is over budget on both transports.
    expect(
      (await viaHttp(cp.decisionPort, { name: 'spend', headers: { [H.actor]: 'tight', [H.service]: 'search' }, status: 200, rule: 'inline' })).status,
    ).toBe(200);
  });
  afterAll(async () => {
    client?.close();
    await cp?.close();
    await store?.close();
    if (opa) await close(opa);
  });

  it('the table covers at least 20 fact sets, allows and both deny statuses', () => {
    expect(CASES.length).toBeGreaterThanOrEqual(20);
    expect(new Set(CASES.map((c) => c.status))).toEqual(new Set([200, 401, 403]));
  });

  it.each(CASES)('$name', async (c) => {
    const h = await viaHttp(cp.decisionPort, c);
    const r = await client.check(checkRequest({ method: c.method ?? 'GET', path: c.path ?? '/', host: c.host ?? 'gateway.example', headers: c.headers }));
    const g = asHttp(r);

    expect({ status: h.status, rule: h.body.rule }).toEqual({ status: c.status, rule: c.rule });
    expect(g.status).toBe(h.status);
    expect(g.body).toEqual(h.body);
    expect(writHeaders(g.headers)).toEqual(writHeaders(h.headers));
    expect(g.headers[H.policyVersion]).toBe(String(cp.plane.registry.version));

    const code = r.status?.code ?? RPC_OK;
    if (h.status === 200) {
      expect(code).toBe(RPC_OK);
      return;
    }
    expect(code).toBe(h.status === 401 ? RPC_UNAUTHENTICATED : RPC_PERMISSION_DENIED);
    expect(JSON.parse(r.denied_response!.body!)).toEqual(JSON.parse(h.raw));
    expect(g.headers[H.denyReason]).toBe(h.body.reason);
    expect(g.headers['content-type']).toBe(h.headers['content-type']);
  });
});
