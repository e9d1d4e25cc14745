/**
 * The Envoy snippet of README.md ("Envoy in front of an MCP server", issue 42 item 8), tested as
 * grpc/readme.test.ts tests the ext_authz ones: the YAML is read from the README, and Writ's real
 * `/authz` (the MCP harness: control plane on PGlite, the reference server) is sent exactly the
 * check request that snippet makes Envoy send for an agent's MCP request, body included:
 * Envoy's HTTP ext_authz client keeps the method, puts `path_prefix` before the path, forwards
 * Host, Method, Path, Content-Length, Authorization and the headers `allowed_headers` matches,
 * sets `authorization_request.headers_to_add` over the client's own, and (with
 * `with_request_body`) sends the buffered body. Envoy itself is not on this machine: the test that
 * has it validate the file skips unless `envoy` is on the PATH.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { H } from '../lib/brand.js';
import { findObjects, yamlBlocks, type Doc } from '../lib/readme-yaml-testing.js';
import { startMcpHarness, type McpHarness } from './gateway-testing.js';

const text = readFileSync(new URL('./README.md', import.meta.url), 'utf8');
const section = text.slice(text.indexOf('### Envoy in front of an MCP server'));
const block = yamlBlocks(section)[0]!;
const config = parseAllDocuments(block)[0]!.toJS() as Doc;
const find = (pred: (v: Doc) => boolean): Doc[] => findObjects(config, pred);

const extAuthz = find((v) => v.with_request_body !== undefined)[0]!;
const httpService = extAuthz.http_service as Doc;

interface Matcher {
  exact?: string;
  prefix?: string;
  suffix?: string;
  contains?: string;
  ignore_case?: boolean;
}

/** Envoy's StringMatcher, on lower-cased header names (only the kinds a snippet may use here). */
function matches(m: Matcher, name: string): boolean {
  const kinds = Object.keys(m).filter((k) => k !== 'ignore_case');
  if (kinds.length !== 1 || !['exact', 'prefix', 'suffix', 'contains'].includes(kinds[0]!)) throw new Error(`matcher not modelled: ${JSON.stringify(m)}`);
  const norm = (s: string) => (m.ignore_case ? s.toLowerCase() : s);
  const n = norm(name);
  if (m.exact !== undefined) return n === norm(m.exact);
  if (m.prefix !== undefined) return n.startsWith(norm(m.prefix));
  if (m.suffix !== undefined) return n.endsWith(norm(m.suffix));
  return n.includes(norm(m.contains!));
}

interface Downstream {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
}

/** The check Envoy's HTTP ext_authz client sends for `req` under the snippet's filter config. */
function envoyCheck(req: Downstream): Downstream {
  const patterns = ((extAuthz.allowed_headers as Doc).patterns as Matcher[]) ?? [];
  const always = ['host', 'content-length', 'authorization'];
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    const name = k.toLowerCase();
    if (name !== 'content-length' && (always.includes(name) || patterns.some((m) => matches(m, name)))) headers[name] = v;
  }
  for (const h of ((httpService.authorization_request as Doc | undefined)?.headers_to_add as { key: string; value: string }[]) ?? [])
    headers[h.key.toLowerCase()] = h.value;
  const limit = (extAuthz.with_request_body as Doc).max_request_bytes as number;
  if (Buffer.byteLength(req.body) > limit) throw new Error('body over max_request_bytes: Envoy answers 413 itself (allow_partial_message false)');
  return { method: req.method, path: `${String(httpService.path_prefix)}${req.path}`, headers, body: req.body };
}

let h: McpHarness;
beforeAll(async () => {
  h = await startMcpHarness();
  await h.agent({
    name: 'summer',
    allowTools: ['everything/get-sum', 'everything/echo'],
    toolRules: [{ tool: 'everything/get-sum', when: 'args.a + args.b < 100' }],
  });
}, 120_000);
afterAll(async () => h?.close());

const call = (name: string, args: object) => JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name, arguments: args } });

/** An agent's MCP request to Envoy's listener, as the SDK client sends it. */
const agentRequest = (body: string, extra: Record<string, string> = {}): Downstream => ({
  method: 'POST',
  path: '/mcp',
  headers: {
    host: 'mcp.example:10000',
    [H.actor]: 'summer',
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-session-id': 'f3b0c0de-0000-4000-8000-000000000001',
    'mcp-protocol-version': '2025-11-25',
    ...extra,
  },
  body,
});

/** Sends `c` as it is (Host and Content-Length included: fetch would set its own) to Writ's /authz. */
function send(c: Downstream): Promise<{ status: number; allow: boolean; reason: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: h.run.cp.decisionPort, method: c.method, path: c.path, headers: c.headers }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, ...(JSON.parse(text) as { allow: boolean; reason: string }) }));
    });
    req.on('error', reject);
    req.end(c.body);
  });
}

/** The check Envoy makes of `req`, sent to Writ's /authz (the snippet's :9191 is this test's decision port). */
const check = (req: Downstream) => {
  const c = envoyCheck(req);
  return send({ ...c, headers: { ...c.headers, 'content-length': String(Buffer.byteLength(c.body)) } });
};

describe('runtime/mcp/README.md: Envoy in front of an MCP server', () => {
  it('the snippet parses: ext_authz over HTTP at /authz on :9191, fail closed, whole body, the agent credential stripped upstream', () => {
    expect(parseAllDocuments(block).map((d) => d.errors)).toEqual([[]]);
    expect(extAuthz['@type']).toBe('type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz');
    expect(extAuthz).toMatchObject({ transport_api_version: 'V3', failure_mode_allow: false });
    expect(extAuthz.with_request_body).toEqual({ max_request_bytes: 1048576, allow_partial_message: false });
    expect(httpService.path_prefix).toBe('/authz');
    expect((httpService.server_uri as Doc).uri).toMatch(/:9191$/);
    const [authzCluster] = find((v) => v.name === (httpService.server_uri as Doc).cluster && v.load_assignment !== undefined);
    expect(JSON.stringify(authzCluster)).toContain('"port_value":9191');
    const [route] = find((v) => v.request_headers_to_remove !== undefined);
    expect(route!.request_headers_to_remove).toEqual(expect.arrayContaining(['authorization', 'x-writ-agent-vp']));
    // The MCP server's cluster is the route's, on the reference server's port.
    const [mcpCluster] = find((v) => v.name === (route!.route as Doc).cluster && v.load_assignment !== undefined);
    expect(JSON.stringify(mcpCluster)).toContain('"port_value":3001');
  });

  it('the check Envoy sends carries the body, content-type, the Mcp-* headers and the listener service, and drops the rest', () => {
    const c = envoyCheck(agentRequest(call('echo', { message: 'hi' }), { [H.service]: 'ledger', cookie: 'x=1' }));
    expect(c).toMatchObject({ method: 'POST', path: '/authz/mcp', body: call('echo', { message: 'hi' }) });
    expect(c.headers).toEqual({
      host: 'mcp.example:10000',
      [H.actor]: 'summer',
      [H.service]: 'everything',
      'content-type': 'application/json',
      'mcp-session-id': 'f3b0c0de-0000-4000-8000-000000000001',
      'mcp-protocol-version': '2025-11-25',
    });
  });

  // Expected answers, literal: status, allow, reason.
  const ROWS: [string, Downstream, number, boolean, RegExp][] = [
    ['an allowed tool', agentRequest(call('echo', { message: 'hi' })), 200, true, /^everything\/echo allowed by summer\.allowTools everything\/echo/],
    ['an allowed tool whose when holds', agentRequest(call('get-sum', { a: 1, b: 2 })), 200, true, /^everything\/get-sum allowed by summer\.allowTools/],
    ['a tool outside allowTools', agentRequest(call('get-env', {})), 403, false, /^everything\/get-env is not in summer\.allowTools$/],
    [
      'a when that fails',
      agentRequest(call('get-sum', { a: 60, b: 50 })),
      403,
      false,
      /^tool rule everything\/get-sum: when "args\.a \+ args\.b < 100" is false$/,
    ],
    [
      'the routable headers disagreeing with the body',
      agentRequest(call('get-env', {}), { 'mcp-method': 'tools/call', 'mcp-name': 'echo' }),
      403,
      false,
      /disagrees with the body's "get-env"/,
    ],
    [
      'a client naming another service (the listener sets its own)',
      agentRequest(call('get-env', {}), { [H.service]: 'search' }),
      403,
      false,
      /^everything\/get-env is not in summer\.allowTools$/,
    ],
  ];

  it.each(ROWS)('%s', async (_what, req, status, allow, reason) => {
    const before = h.everything.received.length;
    const got = await check(req);
    expect(got.status).toBe(status);
    expect(got.allow).toBe(allow);
    expect(got.reason).toMatch(reason);
    expect(h.everything.received.length).toBe(before); // a check never reaches the MCP server
  });

  it('without content-type in allowed_headers the body would not be read, and the check is denied', async () => {
    const c = envoyCheck(agentRequest(call('echo', { message: 'hi' })));
    delete c.headers['content-type'];
    const got = await send({ ...c, headers: { ...c.headers, 'content-length': String(Buffer.byteLength(c.body)) } });
    expect(got.status).toBe(403);
    expect(got.reason).toMatch(/^everything is an MCP service: a check must carry the message/);
  });

  const envoy = spawnSync('envoy', ['--version'], { encoding: 'utf8' });
  const hasEnvoy = envoy.status === 0;
  it.skipIf(!hasEnvoy)('envoy --mode validate accepts the snippet as a whole configuration', () => {
    const dir = mkdtempSync(join(tmpdir(), 'writ-envoy-mcp-'));
    try {
      writeFileSync(join(dir, 'envoy.yaml'), block);
      const r = spawnSync('envoy', ['--mode', 'validate', '-c', join(dir, 'envoy.yaml')], { encoding: 'utf8' });
      expect(r.status, r.stderr + r.stdout).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  if (!hasEnvoy) console.warn('envoy-readme.test.ts: `envoy` is not on the PATH: the snippet is not validated by Envoy here (the checks above run without it)');
});
