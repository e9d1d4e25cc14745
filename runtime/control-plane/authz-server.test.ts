/** The /authz listener over a real socket, with in-memory registry and audit fakes. */
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { close, listen } from '../lib/http.js';
import { createAuthzServer } from './authz-server.js';
import { engineOf } from './decision/testkit.js';
import type { AuditEntry, Service } from './types.js';

const services: Service[] = [
  { name: 'web', upstream: 'web.svc:80', public: true },
  { name: 'orders', upstream: 'orders.svc:8080' },
  { name: 'bot', upstream: 'bot.svc:80', kind: 'agent', allowTools: ['search', 'ledger'] },
  { name: 'search', upstream: 'search.svc:80', kind: 'tool' },
  { name: 'ledger', upstream: 'ledger.svc:80', kind: 'tool', dataClass: 'regulated' },
];

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

function call(port: number, method: string, path: string, headers: Record<string, string | string[]> = {}, body?: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

describe('/authz listener', () => {
  let server: http.Server;
  let port: number;
  let audit: AuditEntry[] = [];

  beforeAll(async () => {
    const engine = engineOf(services, {
      identity: {
        verifyPresentation: async () => ({ ok: false, reason: 'unused' }),
        checkDelegation: async () => ({ ok: false, reason: 'no approved delegation' }),
      },
    });
    audit = engine.audit;
    server = createAuthzServer(engine, { maxBodyBytes: 1024 });
    port = await listen(server, '127.0.0.1:0');
  });
  afterAll(() => close(server));

  it('every answer carries the policy version; a forwarded host from an untrusted peer cannot pick the target', async () => {
    const r = await call(port, 'GET', '/authz', { [H.service]: 'web' });
    expect(r.headers[H.policyVersion]).toBe('1');
    // Host names the private service; X-Forwarded-Host tries to pass as the public one.
    const spoof = await call(port, 'GET', '/authz', { host: 'orders', 'x-forwarded-host': 'web' });
    expect(spoof.status).toBe(403);
    expect(JSON.parse(spoof.body)).toMatchObject({ allow: false, rule: 'inline', reason: 'private service needs credentials' });
  });

  it.each(['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'])('%s /authz and /authz/<path> decide', async (method) => {
    for (const path of ['/authz', '/authz/api/v1/things?x=1', '/authz?probe']) {
      const r = await call(port, method, path, { [H.service]: 'web' });
      expect(r.status).toBe(200);
      expect(r.headers[H.upstream]).toBe('web.svc:80');
      expect(r.headers[H.subject]).toBe('anonymous');
      expect(JSON.parse(r.body)).toEqual({ allow: true, reason: 'public service', rule: 'inline' });
    }
  });

  it('HEAD gets the status and headers without a body', async () => {
    const r = await call(port, 'HEAD', '/authz/x', { [H.service]: 'orders' });
    expect(r.status).toBe(403);
    expect(r.body).toBe('');
  });

  it('private service without credentials: 403 JSON deny', async () => {
    const r = await call(port, 'GET', '/authz', { [H.service]: 'orders' });
    expect(r.status).toBe(403);
    expect(r.headers['content-type']).toBe('application/json');
    expect(JSON.parse(r.body)).toMatchObject({ allow: false, rule: 'inline' });
    expect(r.headers[H.upstream]).toBeUndefined();
  });

  it('ingress by host header', async () => {
    expect((await call(port, 'GET', '/authz', { host: 'web.svc:80' })).status).toBe(200);
    expect((await call(port, 'GET', '/authz', { host: 'nowhere:1' })).status).toBe(403);
  });

  it('egress allow stamps actor, subject and upstream; audit action by kind', async () => {
    const before = audit.length;
    const r = await call(port, 'POST', '/authz/v1/search', { [H.actor]: 'bot', [H.service]: 'search', [H.onBehalfOf]: 'alice' }, '{"q":"x"}');
    expect(r.status).toBe(200);
    expect(r.headers[H.actor]).toBe('bot');
    expect(r.headers[H.subject]).toBe('alice');
    expect(r.headers[H.upstream]).toBe('search.svc:80');
    expect(r.headers[H.agentDid]).toBeUndefined();
    expect(audit.slice(before)).toMatchObject([{ action: 'tool.read', actor: 'bot', allow: true }]);
  });

  it('two on-behalf-of header lines are ambiguous: 403, the call is for one human', async () => {
    const before = audit.length;
    const r = await call(port, 'GET', '/authz/v1/search', { [H.actor]: 'bot', [H.service]: 'search', [H.onBehalfOf]: ['alice', 'mallory'] });
    expect(r.status).toBe(403);
    expect(JSON.parse(r.body)).toMatchObject({ allow: false, rule: 'identity', reason: expect.stringMatching(/more than one/) });
    expect(audit.slice(before)).toMatchObject([{ allow: false, actor: 'bot' }]);
  });

  it('a scoping header on two lines is denied; one line with a comma in it is a value like any other', async () => {
    const twice = await call(port, 'GET', '/authz/v1/search', { [H.actor]: 'bot', [H.service]: 'search', [H.task]: ['t-1', 't-2'] });
    expect(twice.status).toBe(403);
    expect(JSON.parse(twice.body)).toMatchObject({ allow: false, rule: 'inline', reason: `${H.task} sent more than once: the call is scoped by one value` });
    const comma = await call(port, 'GET', '/authz/v1/search', { [H.actor]: 'bot', [H.service]: 'search', [H.task]: 't-1, part 2' });
    expect(comma.status).toBe(200);
  });

  it('regulated egress without a delegation: 401 with the needs-approval header', async () => {
    const r = await call(port, 'GET', '/authz', { [H.actor]: 'bot', [H.service]: 'ledger', [H.task]: 't', [H.action]: 'ledger:read', [H.resource]: 'acct/1' });
    expect(r.status).toBe(401);
    expect(r.headers[H.needsApproval]).toBe('true');
    expect(JSON.parse(r.body)).toMatchObject({ allow: false, rule: 'delegation' });
  });

  it('drains bodies (chunked too) and keeps the connection usable', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < 3; i++) {
        const r = await new Promise<number>((resolve, reject) => {
          const req = http.request(
            { host: '127.0.0.1', port, method: 'POST', path: '/authz', agent, headers: { [H.service]: 'web', 'transfer-encoding': 'chunked' } },
            (res) => {
              res.resume();
              res.on('end', () => resolve(res.statusCode ?? 0));
            },
          );
          req.on('error', reject);
          req.write('a'.repeat(300));
          req.end('b'.repeat(300));
        });
        expect(r).toBe(200);
      }
    } finally {
      agent.destroy();
    }
  });

  it('oversized body: 413 and no decision recorded', async () => {
    const before = audit.length;
    const r = await call(port, 'POST', '/authz', { [H.service]: 'web' }, 'x'.repeat(5000));
    expect(r.status).toBe(413);
    expect(audit.length).toBe(before);
  });

  it('a request whose body never finishes gets 408 and loses its connection (request deadline)', async () => {
    const quick = createAuthzServer(engineOf(services), { requestTimeoutMs: 300 });
    const quickPort = await listen(quick, '127.0.0.1:0');
    try {
      const socket = net.connect(quickPort, '127.0.0.1');
      let answer = '';
      socket.on('data', (c: Buffer) => (answer += c.toString()));
      socket.write(`POST /authz HTTP/1.1\r\nhost: x\r\n${H.service}: web\r\ncontent-length: 100\r\n\r\nabc`);
      await new Promise((resolve) => socket.once('close', resolve));
      expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    } finally {
      await close(quick);
    }
  });

  it('other paths are 404; /healthz answers', async () => {
    expect((await call(port, 'GET', '/authzx')).status).toBe(404);
    expect((await call(port, 'GET', '/')).status).toBe(404);
    expect((await call(port, 'GET', '/v1/registry/services')).status).toBe(404);
    const h = await call(port, 'GET', '/healthz');
    expect(h.status).toBe(200);
    expect(JSON.parse(h.body)).toEqual({ ok: true });
  });
});
