/**
 * Gateways in a cluster (issue 42 item 8): `/authz` over HTTP and gRPC, and the dry-run, decide an
 * MCP request from the body (Envoy's `with_request_body`) or the routable headers exactly as the
 * MCP gateway does, over a table of MCP fact sets.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { checkClient, checkRequest, asHttp, type CheckClient } from '../control-plane/grpc/testing.js';
import { startMcpHarness, type McpHarness } from './gateway-testing.js';

let h: McpHarness;
let grpc: CheckClient;
beforeAll(async () => {
  h = await startMcpHarness();
  await h.agent({
    name: 'summer',
    allowTools: ['everything/get-sum', 'everything/echo'],
    toolRules: [{ tool: 'everything/get-sum', when: 'args.a + args.b < 100' }],
  });
  grpc = checkClient(h.run.cp.grpcPort);
}, 120_000);
afterAll(async () => {
  grpc?.close();
  await h?.close();
});

const call = (name: string, args: object) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } });

interface Row {
  what: string;
  headers: Record<string, string>;
  body?: string;
  allow: boolean;
  reason: RegExp;
  /** What the gateway answers when it differs in words (it refuses a disagreeing header itself, 400 -32020). */
  gateway?: RegExp;
}

const ROWS: Row[] = [
  {
    what: 'an allowed call (body)',
    headers: {},
    body: call('get-sum', { a: 1, b: 2 }),
    allow: true,
    reason: /^everything\/get-sum allowed by summer\.allowTools everything\/get-sum and its tool rules/,
  },
  {
    what: 'a failing when (body)',
    headers: {},
    body: call('get-sum', { a: 60, b: 50 }),
    allow: false,
    reason: /^tool rule everything\/get-sum: when "args\.a \+ args\.b < 100" is false$/,
  },
  {
    what: 'an unlisted tool (headers)',
    headers: { 'mcp-method': 'tools/call', 'mcp-name': 'get-env' },
    allow: false,
    reason: /^everything\/get-env is not in summer\.allowTools$/,
  },
  {
    what: 'a tool with rules on its arguments (headers only)',
    headers: { 'mcp-method': 'tools/call', 'mcp-name': 'get-sum' },
    allow: false,
    reason: /^the check carries no arguments \(no body\) and everything\/get-sum has rules on them$/,
  },
  {
    what: 'a listed tool without rules (headers only)',
    headers: { 'mcp-method': 'tools/call', 'mcp-name': 'echo' },
    allow: true,
    reason: /^everything\/echo allowed/,
  },
  { what: 'tools/list (headers)', headers: { 'mcp-method': 'tools/list' }, allow: true, reason: /^tools\/list passes for an agent that may reach everything/ },
  {
    what: 'a body the routable header disagrees with',
    headers: { 'mcp-method': 'tools/call', 'mcp-name': 'echo' },
    body: call('get-env', {}),
    allow: false,
    reason: /^MCP message refused: Mcp-Name "echo" disagrees with the body's "get-env"$/,
    gateway: /^Mcp-Name "echo" disagrees with the body's "get-env"$/,
  },
  { what: 'no message at all', headers: {}, allow: false, reason: /^everything is an MCP service: a check must carry the message/ },
];

const identity = { [H.actor]: 'summer', [H.service]: 'everything' };

describe('/authz HTTP and gRPC and the dry-run decide MCP fact sets as the gateway does', () => {
  it.each(ROWS)('$what', async (row) => {
    const headers: Record<string, string> = { ...identity, ...row.headers, ...(row.body ? { 'content-type': 'application/json' } : {}) };
    const http = await fetch(`http://127.0.0.1:${h.run.cp.decisionPort}/authz/mcp`, { method: 'POST', headers, ...(row.body ? { body: row.body } : {}) });
    const viaHttp = (await http.json()) as { allow: boolean; reason: string };
    const viaGrpc = asHttp(await grpc.check(checkRequest({ method: 'POST', path: '/mcp', headers })));
    const grpcBody = row.body
      ? asHttp(
          await grpc.check({
            attributes: { request: { http: { method: 'POST', path: '/mcp', headers: { ':method': 'POST', ':path': '/mcp', ...headers }, body: row.body } } },
          }),
        )
      : viaGrpc;
    const dry = (await (
      await fetch(`${h.mgmt}/v1/decisions/dry-run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ headers, method: 'POST', path: '/mcp', ...(row.body ? { body: row.body } : {}) }),
      })
    ).json()) as { decision: { allow: boolean; reason: string } };
    for (const got of [viaHttp, grpcBody.body, dry.decision]) {
      expect(got.allow).toBe(row.allow);
      expect(got.reason).toMatch(row.reason);
    }
    // The gateway: a denial answers the same reason, and never reaches the server.
    if (!row.allow && (row.body || row.headers['mcp-method'])) {
      const before = h.everything.received.length;
      const g = await fetch(h.url, {
        method: 'POST',
        headers: { [H.actor]: 'summer', accept: 'application/json, text/event-stream', 'content-type': 'application/json', ...row.headers },
        body: row.body ?? call(row.headers['mcp-name'] ?? 'x', {}),
      });
      const answer = (await g.json()) as { error?: { message?: string; data?: { reason?: string } } };
      if (row.gateway) expect(answer.error?.message).toMatch(row.gateway);
      else if (row.body || row.reason.source.includes('not in')) expect(answer.error?.data?.reason).toMatch(row.reason);
      expect(h.everything.received.length).toBe(before);
    }
  });
});
