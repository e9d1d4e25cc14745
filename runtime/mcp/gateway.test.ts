/**
 * The MCP gateway with real parts (issue 42's must-show): the official SDK client -> the broker
 * listener's `/mcp/everything` -> the reference server in streamable HTTP mode, decided by the
 * control plane's engine with its audit chain, budgets and approval queue.
 */
import http from 'node:http';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMcpHarness, type McpHarness } from './gateway-testing.js';

let h: McpHarness;
beforeAll(async () => {
  h = await startMcpHarness();
  await h.agent({ name: 'lister', allowTools: ['everything/echo', 'everything/get-sum', 'everything/get-tiny*'] });
  await h.agent({ name: 'summer', allowTools: ['everything/get-sum'], toolRules: [{ tool: 'everything/get-sum', when: 'args.a + args.b < 100' }] });
  await h.agent({ name: 'careful', allowTools: ['everything/echo'], toolRules: [{ tool: 'everything/echo', approval: 'required' }] });
  await h.agent({ name: 'metered', allowTools: ['everything'], budget: { callsPerHour: 5 } });
}, 120_000);
afterAll(async () => h?.close());

const toolCalls = (name: string) => h.everything.received.filter((m) => m.method === 'tools/call' && m.params?.name === name);
const text = (r: unknown) => ((r as { content: { text: string }[] }).content[0] ?? { text: '' }).text;

async function rejection(p: Promise<unknown>): Promise<McpError> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  if (!(e instanceof McpError)) throw new Error(`expected an McpError, got ${String(e)}`);
  return e;
}

describe('MCP gateway: SDK client -> gateway -> server-everything', () => {
  it('lists exactly the allowed tools and passes an allowed call through; the credential never reaches the server', async () => {
    const c = await h.client('lister', { authorization: 'Bearer agent-own-secret' });
    const { tools } = await c.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['echo', 'get-sum', 'get-tiny-image']);
    const r = await c.callTool({ name: 'echo', arguments: { message: 'hello through Writ' } });
    expect(text(r)).toBe('Echo: hello through Writ');
    for (const seen of h.everything.headers) {
      expect(seen.authorization).toBeUndefined();
      expect(seen['x-writ-actor']).toBeUndefined();
    }
  });

  it('a tool outside the allowlist gets the error naming the reason and the audit record; the server never sees it', async () => {
    const c = await h.client('lister');
    const e = await rejection(c.callTool({ name: 'get-env', arguments: {} }));
    expect(e.code).toBe(-32001);
    expect(e.message).toMatch(/everything\/get-env is not in lister\.allowTools \(audit record \d+\)/);
    expect(toolCalls('get-env')).toEqual([]);
  });

  it('an allowed tool whose `when` fails is refused before the server; one whose `when` holds is answered', async () => {
    const c = await h.client('summer');
    const e = await rejection(c.callTool({ name: 'get-sum', arguments: { a: 60, b: 50 } }));
    expect(e.message).toContain('tool rule everything/get-sum: when "args.a + args.b < 100" is false');
    expect(toolCalls('get-sum').some((m) => (m.params?.arguments as { a: number }).a === 60)).toBe(false);
    expect(text(await c.callTool({ name: 'get-sum', arguments: { a: 1, b: 2 } }))).toBe('The sum of 1 and 2 is 3.');
  });

  it('a held call appears in the approval queue bound to its arguments digest; approved there, it completes in the client', async () => {
    const c = await h.client('careful');
    const pending = c.callTool({ name: 'echo', arguments: { message: 'please hold' } }, undefined, { timeout: 20_000 });
    let held: { id: string; resource: string; reason: string } | undefined;
    for (const until = Date.now() + 10_000; !held && Date.now() < until;) {
      const list = (await (await fetch(`${h.mgmt}/v1/egress/requests?status=pending`)).json()) as {
        id: string;
        actor: string;
        resource: string;
        reason: string;
      }[];
      held = list.find((r) => r.actor === 'careful');
      if (!held) await new Promise((r) => setTimeout(r, 25));
    }
    expect(held?.resource).toBe('everything/echo sha256:5a1e27ee56848ec126dfa7581c16ed67199e8b177f676bd4740d992de9942a47');
    expect(held?.reason).toContain('arguments {"message":"please hold"}');
    expect(toolCalls('echo').some((m) => (m.params?.arguments as { message: string }).message === 'please hold')).toBe(false);
    const ok = await fetch(`${h.mgmt}/v1/egress/requests/${held!.id}/approve`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"approver":"alice"}',
    });
    expect(ok.status).toBe(200);
    expect(text(await pending)).toBe('Echo: please hold');
  });

  it('20 concurrent calls against room for 5 let exactly 5 through', async () => {
    const c = await h.client('metered');
    const before = toolCalls('echo').length;
    const results = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => c.callTool({ name: 'echo', arguments: { message: `n${i}` } })));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(5);
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(refused).toHaveLength(15);
    for (const r of refused) expect(String((r.reason as Error).message)).toMatch(/call budget exceeded: 5 of 5 calls per hour/);
    expect(toolCalls('echo').length - before).toBe(5);
    // Listing is not a call: still answered with the budget spent.
    expect((await c.listTools()).tools.length).toBeGreaterThan(5);
  });

  it('every decided message has its tool.call audit record (digest, never arguments), and the chain verifies', async () => {
    type Rec = { action: string; actor?: string; allow: boolean; reason: string; tool?: string; argsDigest?: string; session?: string };
    const records = (await (await fetch(`${h.mgmt}/v1/audit?limit=1000`)).json()) as Rec[];
    const calls = records.filter((r) => r.action === 'tool.call' && r.argsDigest !== undefined);
    expect(calls.filter((r) => r.actor === 'metered')).toHaveLength(20);
    expect(calls.filter((r) => r.actor === 'metered' && r.allow)).toHaveLength(5);
    const echoed = calls.find((r) => r.actor === 'lister' && r.allow)!;
    // sha256 of {"message":"hello through Writ"}
    expect(echoed).toMatchObject({
      tool: 'echo',
      argsDigest: '149c132272015fefd1f9c069f353777b381198835fa5261707476a9ad101a841',
      reason: expect.stringMatching(/^everything\/echo allowed by lister\.allowTools everything\/echo; /),
    });
    expect(echoed.session).toMatch(/^[0-9a-f-]{36}$/);
    expect(records.some((r) => r.reason.includes('hello through Writ'))).toBe(false);
    const verified = (await (await fetch(`${h.mgmt}/v1/audit/verify`)).json()) as { ok: boolean };
    expect(verified.ok).toBe(true);
  });
});

describe('MCP gateway: a server whose tools/list answer tries to show more', () => {
  /** Answers every tools/list with `answers[n]` in turn: [content-type, body]. */
  const answers: [string, string][] = [];
  let streamsClosed = 0;
  let server: http.Server;
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (Buffer.concat(chunks).includes('"slow"')) {
          // A long tool: one progress event, then nothing until the gateway lets go of the stream.
          res.writeHead(200, { 'content-type': 'text/event-stream' }).write('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n');
          res.on('close', () => streamsClosed++);
          return;
        }
        const [type, body] = answers.shift() ?? ['text/plain', 'nothing queued'];
        res.writeHead(200, { 'content-type': type }).end(body);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    await h.run.cp.plane.registry.upsert({ name: 'hostile', upstream: `127.0.0.1:${port}`, kind: 'tool', protocol: 'mcp' });
    await h.agent({ name: 'wary', allowTools: ['hostile/echo', 'hostile/slow'] });
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  const all = '{"name":"echo"},{"name":"get-env"},{"name":"rm"}';
  const list = async (type: string, body: string) => {
    answers.push([type, body]);
    const r = await fetch(`http://127.0.0.1:${h.broker.port}/mcp/hostile`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'x-writ-actor': 'wary' },
      body: '{"jsonrpc":"2.0","id":4,"method":"tools/list"}',
    });
    return [r.status, await r.text()];
  };

  it.each([
    [
      'one answer',
      'application/json',
      `{"jsonrpc":"2.0","id":4,"result":{"tools":[${all}]}}`,
      [200, '{"jsonrpc":"2.0","id":4,"result":{"tools":[{"name":"echo"}]}}'],
    ],
    [
      'a batch (the SDK client reads arrays)',
      'application/json',
      `[{"jsonrpc":"2.0","id":4,"result":{"tools":[${all}]}}]`,
      [200, '[{"jsonrpc":"2.0","id":4,"result":{"tools":[{"name":"echo"}]}}]'],
    ],
    [
      'an answer to another id',
      'application/json',
      `{"jsonrpc":"2.0","id":99,"result":{"tools":[${all}]}}`,
      [200, '{"jsonrpc":"2.0","id":99,"result":{"tools":[{"name":"echo"}]}}'],
    ],
    [
      'a second answer in the SSE stream',
      'text/event-stream',
      `event: message\ndata: {"jsonrpc":"2.0","id":4,"result":{"tools":[${all}]}}\n\nevent: message\ndata: {"jsonrpc":"2.0","id":5,"result":{"tools":[${all}]}}\n\n`,
      [
        200,
        'event: message\ndata: {"jsonrpc":"2.0","id":4,"result":{"tools":[{"name":"echo"}]}}\n\nevent: message\ndata: {"jsonrpc":"2.0","id":5,"result":{"tools":[{"name":"echo"}]}}\n\n',
      ],
    ],
    [
      'an answer that is not JSON',
      'application/json',
      `{"jsonrpc":"2.0","id":4,"result":{"tools":[{"name":"echo","x":NaN},${all}]}}`,
      [502, '{"jsonrpc":"2.0","id":4,"error":{"code":-32002,"message":"the MCP server\'s tools/list answer could not be filtered: the answer is not JSON"}}'],
    ],
  ])('%s: only what the agent may call reaches it', async (_, type, body, expected) => {
    expect(await list(type, body)).toEqual(expected);
  });

  it('a client that leaves mid-stream ends the upstream call', async () => {
    const ac = new AbortController();
    const r = await fetch(`http://127.0.0.1:${h.broker.port}/mcp/hostile`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'x-writ-actor': 'wary' },
      body: '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"slow","arguments":{}}}',
      signal: ac.signal,
    });
    const reader = r.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toContain('notifications/progress');
    const before = streamsClosed;
    ac.abort();
    for (const until = Date.now() + 5000; streamsClosed === before && Date.now() < until;) await new Promise((w) => setTimeout(w, 10));
    expect(streamsClosed).toBe(before + 1);
  });
});
