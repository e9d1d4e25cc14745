/**
 * No pass-through upstream (issue 43 item 7): a recorder (real HTTP servers this test starts,
 * keeping every header and body they receive) stands upstream of the MCP gateway, the model
 * broker and the forward proxy. An agent calls through each with every credential it has (its
 * Writ access token in `Authorization`, its Membership VP in `X-Writ-Agent-VP` and as a bearer
 * token, `X-Writ-*` headers, `Proxy-Authorization`): none of them reaches an upstream, and the
 * upstream gets the credential its registry entry names instead (a Secret read from
 * UPSTREAM_SECRETS_DIR), or the broker's provider key. A Secret that cannot be read refuses the
 * call (fail closed).
 */
import http from 'node:http';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { close, listen } from '../lib/http.js';
import type { AccessTokenClaims } from '../lib/access-token.js';
import { mintAccessToken } from '../identity/oauth/token.js';
import { createTokenVerifier } from '../identity/oauth/verifier.js';
import { makeAgent, makeIssuer } from '../identity/testkit.js';
import { presentationFor } from '../identity/client.js';
import type { IdentityPort } from '../control-plane/identity-port.js';
import { createLocalDecisionClient } from '../broker/decision-local.js';
import { parseConfig } from '../broker/config.js';
import { startBroker, type RunningBroker } from '../broker/server.js';
import { createUpstreamSecrets } from '../lib/upstream-secrets.js';
import { startMcpHarness, type McpHarness } from './gateway-testing.js';

const ISS = 'http://idp.test';
const issuer = makeIssuer('idp.test');
const DID = 'did:key:zRecAgent';

interface Seen {
  port: number;
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}
const seen: Seen[] = [];

/** One recorder: keeps every request; answers as an OpenAI provider, an MCP server, or plain text. */
function recorder(): http.Server {
  return http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      seen.push({ port: (req.socket.localPort ?? 0) as number, method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      let answer: unknown = 'ok';
      if (req.url === '/v1/chat/completions') {
        answer = {
          id: 'c1',
          object: 'chat.completion',
          created: 1,
          model: 'm1',
          choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        };
      } else if (req.url === '/mcp' && body.includes('"refuse-me"')) {
        // The server refuses the gateway, with a challenge naming an authorization server of its own.
        res.writeHead(401, { 'www-authenticate': 'Bearer resource_metadata="http://elsewhere.example/.well-known/oauth-protected-resource"' }).end();
        return;
      } else if (req.url === '/mcp')
        answer = { jsonrpc: '2.0', id: (JSON.parse(body) as { id: number }).id, result: { content: [{ type: 'text', text: 'recorded' }] } };
      const text = typeof answer === 'string' ? answer : JSON.stringify(answer);
      res.writeHead(200, { 'content-type': typeof answer === 'string' ? 'text/plain' : 'application/json' }).end(text);
    });
  });
}

const token = (aud: string) => {
  const now = Math.floor(Date.now() / 1000);
  const c: AccessTokenClaims = {
    iss: ISS,
    sub: DID,
    aud,
    act: { sub: DID, name: 'rec-agent' },
    client_id: 'rec-agent',
    membership_jti: 'urn:uuid:membership-rec',
    scope: '',
    jti: `urn:uuid:rec-${aud}`,
    iat: now,
    exp: now + 300,
  };
  return mintAccessToken(issuer, c);
};

let h: McpHarness;
let broker: RunningBroker;
let mcpUp: http.Server;
let httpUp: http.Server;
let ports: { mcp: number; http: number };
let dir: string;
let vp: string;
const tokens: Record<string, string> = {};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'writ-secrets-'));
  mkdirSync(join(dir, 'mcp-cred'));
  writeFileSync(join(dir, 'mcp-cred', 'token'), 'upstream-secret-mcp\n');
  mkdirSync(join(dir, 'http-cred'));
  writeFileSync(join(dir, 'http-cred', 'api-key'), 'upstream-secret-http');
  mcpUp = recorder();
  httpUp = recorder();
  ports = { mcp: await listen(mcpUp, '127.0.0.1:0'), http: await listen(httpUp, '127.0.0.1:0') };
  const me = await makeAgent(issuer, { name: 'rec-agent' });
  vp = await presentationFor(me, { audience: 'writ' });
  const verifier = createTokenVerifier({
    issuer: ISS,
    keyFor: (kid) => (kid === issuer.kid ? issuer.publicKey : undefined),
    state: { isRevoked: () => false, agentDenial: () => undefined },
  });
  // The VP's own verification is not under test here (the authority's); it proves the same agent as the token.
  const identity: IdentityPort = {
    verifyPresentation: async (p) => (p === vp ? { ok: true, reason: 'ok', agentName: 'rec-agent', agentDid: DID } : { ok: false, reason: 'unknown VP' }),
    checkDelegation: async () => ({ ok: false, reason: 'no approved delegation' }),
    tokens: () => verifier,
  };
  h = await startMcpHarness({ identity, env: { UPSTREAM_SECRETS_DIR: dir }, gateway: { upstreamSecrets: createUpstreamSecrets(dir) } });
  const reg = h.run.cp.plane.registry;
  await reg.upsert({
    name: 'rec-mcp',
    upstream: `127.0.0.1:${ports.mcp}`,
    kind: 'tool',
    protocol: 'mcp',
    upstreamAuth: { secretRef: { name: 'mcp-cred', key: 'token' } },
  });
  await reg.upsert({
    name: 'rec-nosecret',
    upstream: 'nosecret.svc:80',
    kind: 'tool',
    protocol: 'mcp',
    upstreamAuth: { secretRef: { name: 'absent', key: 'token' } },
  });
  await reg.upsert({
    name: 'rec-http',
    upstream: `127.0.0.1:${ports.http}`,
    kind: 'tool',
    upstreamAuth: { secretRef: { name: 'http-cred', key: 'api-key' }, header: 'X-Api-Key', scheme: '' },
  });
  await reg.upsert({ name: 'rec-model', upstream: 'model.svc:80', kind: 'model' });
  await h.agent({ name: 'rec-agent', allowTools: ['rec-mcp', 'rec-nosecret', 'rec-http'], allowModels: ['rec-model'], egressAllow: ['rec-http'] });
  const engine = h.run.cp.plane.engine;
  broker = await startBroker({
    addr: '127.0.0.1:0',
    config: parseConfig({ models: [{ name: 'rec-model', provider: 'openai', model: 'm1', apiBase: `http://127.0.0.1:${ports.mcp}/v1` }] }),
    localDecisions: (timeoutMs) => createLocalDecisionClient(engine, { timeoutMs }),
    usageUrl: `http://127.0.0.1:${h.run.cp.mgmtPort}/v1/usage`,
    providerKey: 'sk-provider-key',
  });
  for (const aud of ['rec-mcp', 'rec-nosecret', 'rec-http', 'rec-model']) tokens[aud] = await token(aud);
});
afterAll(async () => {
  await broker?.close(0);
  await h?.close();
  await Promise.all([mcpUp && close(mcpUp), httpUp && close(httpUp)]);
  rmSync(dir, { recursive: true, force: true });
});

/** Every credential the agent has, for the entry `aud`. */
const agentHeaders = (aud: string) => ({
  authorization: `Bearer ${tokens[aud]}`,
  'x-writ-agent-vp': vp,
  'x-writ-actor': 'rec-agent',
  'x-writ-task': 'T-rec',
  'x-writ-on-behalf-of': 'rec-agent',
});

/** A plain-HTTP request through the forward proxy (absolute URI). */
function viaProxy(target: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(target);
    const req = http.request({ host: '127.0.0.1', port: h.run.gateway.port, method: 'GET', path: target, headers: { host: u.host, ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('no agent credential reaches an upstream', () => {
  it('through the MCP gateway, the broker and the forward proxy: the configured credential does', async () => {
    const call = { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'echo', arguments: { note: 'x' } } };
    const g = await fetch(`http://127.0.0.1:${h.broker.port}/mcp/rec-mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...agentHeaders('rec-mcp') },
      body: JSON.stringify(call),
    });
    expect([g.status, await g.json()]).toEqual([200, { jsonrpc: '2.0', id: 7, result: { content: [{ type: 'text', text: 'recorded' }] } }]);

    const b = await fetch(`http://127.0.0.1:${broker.port}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...agentHeaders('rec-model') },
      body: JSON.stringify({ model: 'rec-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(b.status).toBe(200);
    await b.arrayBuffer();

    const p = await viaProxy(`http://127.0.0.1:${ports.http}/data`, {
      'proxy-authorization': `Bearer ${tokens['rec-http']}`,
      ...agentHeaders('rec-http'),
    });
    expect(p).toEqual({ status: 200, body: 'ok' });

    // What each upstream got: the path it was sent to and the credential its entry names.
    const got = seen.map((s) => [
      s.port === ports.mcp ? 'mcp-recorder' : 'http-recorder',
      s.method,
      s.url,
      s.headers.authorization ?? null,
      s.headers['x-api-key'] ?? null,
    ]);
    expect(got).toEqual([
      ['mcp-recorder', 'POST', '/mcp', 'Bearer upstream-secret-mcp', null],
      ['mcp-recorder', 'POST', '/v1/chat/completions', 'Bearer sk-provider-key', null],
      ['http-recorder', 'GET', '/data', null, 'upstream-secret-http'],
    ]);
    const secrets = [vp, ...Object.values(tokens)];
    for (const s of seen) {
      const text = JSON.stringify(s.headers) + s.body;
      for (const secret of secrets) expect(text.includes(secret), `${s.url} carried an agent credential`).toBe(false);
      for (const name of ['proxy-authorization', 'x-writ-agent-vp', 'x-writ-task', 'x-writ-on-behalf-of'])
        expect([s.url, name, s.headers[name]]).toEqual([s.url, name, undefined]);
    }
  });

  it('a Secret that cannot be read refuses the call; the upstream is not called', async () => {
    const before = seen.length;
    const r = await fetch(`http://127.0.0.1:${h.broker.port}/mcp/rec-nosecret`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...agentHeaders('rec-nosecret') },
      body: JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'ping' }),
    });
    const why = 'upstream credential absent/token is not readable';
    const body = (await r.json()) as { error: { data: { auditSeq: number } } };
    const seq = body.error.data.auditSeq;
    expect([r.status, body]).toEqual([
      502,
      { jsonrpc: '2.0', id: 8, error: { code: -32002, message: `${why} (audit record ${seq})`, data: { rule: 'registry', reason: why, auditSeq: seq } } },
    ]);
    expect(seen.length).toBe(before);
    // Recorded as the deny it is: nothing was sent.
    const records = (await (await fetch(`${h.mgmt}/v1/audit?limit=1000`)).json()) as { seq: number; allow: boolean; rule: string; reason: string }[];
    expect(records.find((x) => x.seq === seq)).toMatchObject({ allow: false, rule: 'registry', reason: why });
  });

  it("an MCP server refusing the gateway's credential is a 502, and its challenge never reaches the client", async () => {
    const r = await fetch(`http://127.0.0.1:${h.broker.port}/mcp/rec-mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...agentHeaders('rec-mcp') },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'refuse-me', arguments: {} } }),
    });
    expect([r.status, r.headers.get('www-authenticate'), await r.json()]).toEqual([
      502,
      null,
      { jsonrpc: '2.0', id: 9, error: { code: -32002, message: "the MCP server of rec-mcp refused the gateway's credential (HTTP 401)" } },
    ]);
    expect(seen.at(-1)?.headers.authorization).toBe('Bearer upstream-secret-mcp');
  });
});
