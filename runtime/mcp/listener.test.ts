/**
 * The control plane process as the chart runs it (`startControlPlaneProcess`, memory store) with
 * MCP_GATEWAY_ADDR: its own listener serves the MCP gateway, so a cluster, where the broker runs
 * apart from the decision engine, has one too. The official SDK client lists and calls tools of a
 * real MCP server (server-everything) through it, as an agent the management API registered.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { loadConfig } from '../lib/settings.js';
import type { Closable } from '../lib/process.js';
import { startControlPlaneProcess } from '../control-plane/main.js';
import { startEverything, type Everything } from './everything-testing.js';

const ANY = '127.0.0.1:0';
let cp: Closable;
let everything: Everything;
let base: string;

beforeAll(async () => {
  everything = await startEverything();
  cp = await startControlPlaneProcess(
    loadConfig({ REGISTRY_BACKEND: 'memory', DECISION_ADDR: ANY, DECISION_GRPC_ADDR: ANY, MGMT_ADDR: ANY, MCP_GATEWAY_ADDR: ANY }),
  );
  const mgmt = `http://127.0.0.1:${cp.ports!.mgmt}`;
  const put = (body: object) =>
    fetch(`${mgmt}/v1/registry/services`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  expect((await put({ name: 'everything', upstream: everything.upstream, kind: 'tool', protocol: 'mcp' })).status).toBeLessThan(300);
  expect(
    (await put({ name: 'cluster-agent', upstream: 'cluster-agent.agents.svc:8080', kind: 'agent', allowTools: ['everything/echo', 'everything/get-sum'] }))
      .status,
  ).toBeLessThan(300);
  base = `http://127.0.0.1:${cp.ports!.mcp}`;
}, 60_000);
afterAll(async () => {
  await cp?.close();
  await everything?.close();
});

describe('the control plane process serves the MCP gateway on MCP_GATEWAY_ADDR', () => {
  it('lists the allowed tools, answers an allowed call, refuses another before the server', async () => {
    const client = new Client({ name: 'cluster-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp/everything`), { requestInit: { headers: { [H.actor]: 'cluster-agent' } } }));
    try {
      expect((await client.listTools()).tools.map((t) => t.name).sort()).toEqual(['echo', 'get-sum']);
      expect(await client.callTool({ name: 'echo', arguments: { message: 'from the cluster' } })).toEqual({
        content: [{ type: 'text', text: 'Echo: from the cluster' }],
      });
      await expect(client.callTool({ name: 'get-env', arguments: {} })).rejects.toThrow(/denied by policy: .*get-env/);
      expect(everything.received.filter((m) => m.method === 'tools/call').map((m) => m.params?.name)).toEqual(['echo']);
    } finally {
      await client.close();
    }
  });

  it('serves nothing else: another path is a 404', async () => {
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST' });
    expect([r.status, ((await r.json()) as { error: string }).error]).toEqual([404, 'not_found']);
  });
});
