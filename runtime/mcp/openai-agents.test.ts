/**
 * A real agent framework end to end (issue 42's must-show): an agent built with the OpenAI
 * Agents SDK (`@openai/agents`), its model served through Writ's broker (`/v1/chat/completions`)
 * by a scripted OpenAI-compatible provider this test owns, and its tools through Writ's MCP
 * gateway (`MCPServerStreamableHttp` at `/mcp/everything`, the same listener), both as one agent
 * in header mode. The provider's script: call `echo` (allowed), then `get-sum` with arguments its
 * `when` refuses, then answer in text. The denied call is one the agent can see listed: a tool
 * outside the allowlist is filtered out of `tools/list`, so the SDK would never call it; a call
 * refused at call time is what reaches an agent as a tool error.
 */
import http from 'node:http';
import OpenAI from 'openai';
import { Agent, MCPServerStreamableHttp, OpenAIChatCompletionsModel, run, setTracingDisabled } from '@openai/agents';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { listen } from '../lib/http.js';
import { parseConfig } from '../broker/config.js';
import { startMcpHarness, type McpHarness } from './gateway-testing.js';

const PROVIDER_KEY = 'sk-scripted-provider-key';
const AGENT = 'assistant';

interface Message {
  role: string;
  content?: unknown;
  tool_call_id?: string;
  tool_calls?: { id: string; function: { name: string; arguments: string } }[];
}

/** The scripted turns, by how many tool answers the request already carries (the SDK offers `get-sum` to a model as `get_sum`). */
const TURNS = [
  { tool: 'echo', arguments: { message: 'hello from an agent' } },
  { tool: 'get_sum', arguments: { a: 200, b: 3 } },
];
const FINAL = 'Echoed the greeting; the sum was refused by policy.';

/** A tiny OpenAI-compatible provider: records every request (body and Authorization) and answers from the script. */
async function scriptedProvider() {
  const seen: { auth?: string; model: string; messages: Message[]; tools?: { function: { name: string } }[] }[] = [];
  const server = http.createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      const body = JSON.parse(text) as (typeof seen)[number];
      seen.push({ ...body, auth: req.headers.authorization });
      const answered = body.messages.filter((m) => m.role === 'tool').length;
      const turn = TURNS[answered];
      const message = turn
        ? {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: `call_${answered}`, type: 'function', function: { name: turn.tool, arguments: JSON.stringify(turn.arguments) } }],
          }
        : { role: 'assistant', content: FINAL };
      const out = {
        id: `c${seen.length}`,
        object: 'chat.completion',
        created: 1,
        model: body.model,
        choices: [{ index: 0, message, finish_reason: turn ? 'tool_calls' : 'stop' }],
        usage: { prompt_tokens: 20, completion_tokens: 10, total_tokens: 30 },
      };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(out));
    });
  });
  const port = await listen(server, '127.0.0.1:0');
  return {
    seen,
    apiBase: `http://127.0.0.1:${port}/v1`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

let provider: Awaited<ReturnType<typeof scriptedProvider>>;
let h: McpHarness;
beforeAll(async () => {
  setTracingDisabled(true);
  provider = await scriptedProvider();
  h = await startMcpHarness({
    models: parseConfig({ models: [{ name: 'scripted', model: 'scripted-1', apiBase: provider.apiBase }] }).models,
    providerKey: PROVIDER_KEY,
  });
  await h.run.cp.plane.registry.upsert({ name: 'scripted', upstream: 'broker.default.svc:8080', kind: 'model' });
  await h.agent({
    name: AGENT,
    allowModels: ['scripted'],
    allowTools: ['everything/echo', 'everything/get-sum'],
    toolRules: [{ tool: 'everything/get-sum', when: 'args.a + args.b < 100' }],
  });
}, 120_000);
afterAll(async () => {
  await h?.close();
  await provider?.close();
});

describe('OpenAI Agents SDK -> Writ (broker and MCP gateway)', () => {
  it('runs a task: the allowed tool answers, the denied one is a tool error the agent reads, both are in the audit chain', async () => {
    const base = `http://127.0.0.1:${h.broker.port}`;
    const identity = { [H.actor]: AGENT };
    const mcp = new MCPServerStreamableHttp({ url: `${base}/mcp/everything`, name: 'everything', requestInit: { headers: identity } });
    await mcp.connect();
    try {
      const client = new OpenAI({ apiKey: 'sk-agent-own-key', baseURL: `${base}/v1`, maxRetries: 0, defaultHeaders: identity });
      const agent = new Agent({
        name: AGENT,
        instructions: 'Use the tools you are given.',
        model: new OpenAIChatCompletionsModel(client, 'scripted'),
        mcpServers: [mcp],
      });
      const result = await run(agent, 'Echo a greeting, then add 200 and 3.');
      expect(result.finalOutput).toBe(FINAL);

      // Three model calls reached the provider through the broker, with its key, never the agent's.
      expect(provider.seen.map((r) => [r.model, r.auth])).toEqual(Array(3).fill(['scripted-1', `Bearer ${PROVIDER_KEY}`]));
      // The tools the model was offered are the ones the gateway listed: exactly the allowed two (named as the SDK offers them).
      expect((provider.seen[0]!.tools ?? []).map((t) => t.function.name).sort()).toEqual(['echo', 'get_sum']);
      // The allowed tool's real answer reached the model in the very next request.
      expect(provider.seen[1]!.messages.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id, String(m.content)])).toEqual([
        ['call_0', expect.stringContaining('Echo: hello from an agent')],
      ]);
      const toolAnswers = provider.seen[2]!.messages.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id, String(m.content)]);
      expect(toolAnswers[0]).toEqual(['call_0', expect.stringContaining('Echo: hello from an agent')]);
      expect(toolAnswers[1]![0]).toBe('call_1');
      expect(toolAnswers[1]![1]).toMatch(
        /^An error occurred while running the tool\. Please try again\. Error: McpError: MCP error -32001: denied by policy: tool rule everything\/get-sum: when "args\.a \+ args\.b < 100" is false \(audit record \d+\)$/,
      );
      // What the agent itself holds: the same outputs among its run items.
      const outputs = result.newItems.filter((i) => i.type === 'tool_call_output_item').map((i) => JSON.stringify((i as { output: unknown }).output));
      expect(outputs).toHaveLength(2);
      expect(outputs[1]).toContain('denied by policy');
      // The server saw the allowed call only.
      const calls = h.everything.received.filter((m) => m.method === 'tools/call').map((m) => m.params?.name);
      expect(calls).toEqual(['echo']);
    } finally {
      await mcp.close();
    }
  });

  it('both tool calls and every model call are in the audit chain, and the chain verifies', async () => {
    type Rec = { action: string; actor?: string; allow: boolean; tool?: string; reason: string; argsDigest?: string };
    const records = (await (await fetch(`${h.mgmt}/v1/audit?limit=1000`)).json()) as Rec[];
    const mine = records.filter((r) => r.actor === AGENT);
    const toolCalls = mine.filter((r) => r.action === 'tool.call' && r.argsDigest !== undefined).map((r) => [r.tool, r.allow]);
    expect(toolCalls.sort()).toEqual([
      ['echo', true],
      ['get-sum', false],
    ]);
    expect(mine.filter((r) => r.action === 'model.invoke').map((r) => r.allow)).toEqual([true, true, true]);
    expect(((await (await fetch(`${h.mgmt}/v1/audit/verify`)).json()) as { ok: boolean }).ok).toBe(true);
  });
});
