/**
 * The MCP gateway's added latency (issue 42): the same undici client calls the reference MCP
 * server (`@modelcontextprotocol/server-everything`, streamable HTTP) directly (the baseline) and
 * through the gateway on the broker listener (the decision by the control plane's engine in
 * process, the audit chain in memory, the call counted against a budget), `tools/call echo` one at
 * a time, interleaved in rounds so drift hits both alike. The servers run in a child process.
 * Then `tools/list` filtering of 1,000 tools for an agent with 20 allowTools entries (exact names
 * and prefixes), as the gateway does it (list-filter.ts: the kept tools spliced out of the answer),
 * against the whole answer parsed, filtered and written again, interleaved.
 *
 *   npx tsx bench/mcp.bench.ts     (BENCH_REQUESTS=2000 per target per round, BENCH_ROUNDS=5,
 *                                   BENCH_PROFILE=<dir> for a CPU profile of the server process)
 *
 * Targets: added p50 <= 0.5 ms and p99 <= 2 ms; filtering <= 1 ms.
 */
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { H } from '../runtime/lib/brand.js';
import { mayList } from '../runtime/control-plane/decision/tool.js';
import { filterListAnswer } from '../runtime/mcp/list-filter.js';
import type { Service } from '../runtime/control-plane/types.js';
import { median, startServer } from './lib.js';

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 2000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 500);

interface Ports {
  everything: number;
  broker: number;
}

async function serve(): Promise<void> {
  const { setLogLevel } = await import('../runtime/lib/log.js');
  setLogLevel('warn');
  const { openStore } = await import('../runtime/store/factory.js');
  const { startControlPlane } = await import('../runtime/control-plane/server.js');
  const { startBroker } = await import('../runtime/broker/server.js');
  const { createMcpGateway } = await import('../runtime/mcp/gateway.js');
  const { startEverything } = await import('../runtime/mcp/everything-testing.js');
  const everything = await startEverything();
  const store = await openStore({ backend: 'memory' });
  const cp = await startControlPlane({ store, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
  await cp.plane.registry.upsert({ name: 'everything', upstream: everything.upstream, kind: 'tool', protocol: 'mcp' });
  await cp.plane.registry.upsert({
    name: 'bot',
    upstream: 'bot.agents.svc:8080',
    kind: 'agent',
    allowTools: ['everything/echo', 'everything/get-sum'],
    toolRules: [{ tool: 'everything/echo', when: 'size(args.message) < 100' }],
    budget: { callsPerHour: 1e12 },
  });
  const broker = await startBroker({
    addr: '127.0.0.1:0',
    config: { models: [] },
    providerKey: 'sk-bench',
    mcp: createMcpGateway({ engine: cp.plane.engine }),
  });
  // The bench measures the gateway, not the reference server's bookkeeping of what it was sent.
  setInterval(() => {
    everything.received.length = 0;
    everything.headers.length = 0;
  }, 1000).unref();
  process.send?.({ everything: everything.port, broker: broker.port } satisfies Ports);
  process.on('message', async () => {
    await broker.close(0);
    await cp.close();
    await store.close();
    await everything.close();
    process.exit(0);
  });
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;

/** A session on `url` (initialize, initialized) and a timed tools/call on it. */
async function session(url: string, client: Agent): Promise<() => Promise<number>> {
  const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', [H.actor]: 'bot' };
  const init = await request(url, {
    method: 'POST',
    headers,
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench', version: '1' } },
    }),
    dispatcher: client,
  });
  await init.body.text();
  const sid = String(init.headers['mcp-session-id']);
  const h = { ...headers, 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' };
  await (await request(url, { method: 'POST', headers: h, body: '{"jsonrpc":"2.0","method":"notifications/initialized"}', dispatcher: client })).body.text();
  let id = 1;
  return async () => {
    const body = JSON.stringify({ jsonrpc: '2.0', id: id++, method: 'tools/call', params: { name: 'echo', arguments: { message: 'hello' } } });
    const t0 = process.hrtime.bigint();
    const r = await request(url, { method: 'POST', headers: h, body, dispatcher: client });
    const text = await r.body.text();
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (r.statusCode !== 200 || !text.includes('Echo: hello')) throw new Error(`${url}: ${r.statusCode} ${text.slice(0, 300)}`);
    return ms;
  };
}

async function latency(): Promise<void> {
  // BENCH_PROFILE=<dir>: the server process writes a V8 CPU profile there (node --cpu-prof).
  const profile = process.env.BENCH_PROFILE;
  const execArgv = profile ? ['--cpu-prof', '--cpu-prof-dir', profile] : [];
  const { child, ready: ports } = await startServer<Ports>(fileURLToPath(import.meta.url), { execArgv });
  const client = new Agent({ keepAliveTimeout: 60_000, connections: 1 });
  const direct = await session(`http://127.0.0.1:${ports.everything}/mcp`, client);
  const gateway = await session(`http://127.0.0.1:${ports.broker}/mcp/everything`, client);
  for (let i = 0; i < WARMUP; i++) {
    await direct();
    await gateway();
  }
  const d: number[] = [];
  const g: number[] = [];
  const added50: number[] = [];
  const added99: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const rd: number[] = [];
    const rg: number[] = [];
    for (let i = 0; i < REQUESTS; i++) {
      rd.push(await direct());
      rg.push(await gateway());
    }
    rd.sort((a, b) => a - b);
    rg.sort((a, b) => a - b);
    added50.push(pct(rg, 50) - pct(rd, 50));
    added99.push(pct(rg, 99) - pct(rd, 99));
    d.push(...rd);
    g.push(...rg);
  }
  d.sort((a, b) => a - b);
  g.sort((a, b) => a - b);
  const f = (n: number) => n.toFixed(3);
  console.log(`tools/call echo, ${ROUNDS} rounds x ${REQUESTS} each way, interleaved`);
  console.log(`  direct   p50 ${f(pct(d, 50))} ms  p99 ${f(pct(d, 99))} ms`);
  console.log(`  gateway  p50 ${f(pct(g, 50))} ms  p99 ${f(pct(g, 99))} ms`);
  console.log(`  added    p50 ${f(median(added50))} ms  p99 ${f(median(added99))} ms (median of the rounds; targets 0.5 / 2)`);
  child.send('stop');
  await new Promise((r) => child.once('exit', r));
  await client.close();
}

function filtering(): void {
  const tools = Array.from({ length: 1000 }, (_, i) => ({
    name: `tool-${String(i).padStart(4, '0')}`,
    description: `Tool number ${i}: does one thing well.`,
    inputSchema: { type: 'object', properties: { path: { type: 'string' }, limit: { type: 'integer' } }, required: ['path'] },
  }));
  const answer = JSON.stringify({ jsonrpc: '2.0', id: 7, result: { tools } });
  const allowTools = [
    ...Array.from({ length: 10 }, (_, i) => `fs/tool-${String(i * 37).padStart(4, '0')}`),
    ...Array.from({ length: 10 }, (_, i) => `fs/tool-0${i}5*`),
  ];
  const agent: Service = { name: 'bot', upstream: 'bot:1', kind: 'agent', allowTools };
  const may = mayList(agent, 'fs');
  const body = Buffer.from(answer);
  const kept = (JSON.parse(filterListAnswer(body, may).toString()) as { result: { tools: unknown[] } }).result.tools.length;
  // The baseline: the whole answer parsed, filtered and written again (what the splice avoids).
  const reparse = () => {
    const v = JSON.parse(body.toString('utf8')) as { result: { tools: { name: string }[] } };
    v.result.tools = v.result.tools.filter((t) => may(t.name));
    return Buffer.from(JSON.stringify(v));
  };
  const spliced: number[] = [];
  const parsed: number[] = [];
  const time = (f: () => unknown) => {
    const t0 = process.hrtime.bigint();
    f();
    return Number(process.hrtime.bigint() - t0) / 1e6;
  };
  for (let i = 0; i < 2000; i++) {
    spliced.push(time(() => filterListAnswer(body, may)));
    parsed.push(time(reparse));
  }
  spliced.sort((a, b) => a - b);
  parsed.sort((a, b) => a - b);
  const f = (t: number[]) => `p50 ${pct(t, 50).toFixed(3)} ms, p99 ${pct(t, 99).toFixed(3)} ms`;
  console.log(
    `tools/list of 1,000 tools (${(answer.length / 1024).toFixed(0)} KiB) filtered to ${kept} for 20 allowTools entries, 2000 times each way, interleaved:`,
  );
  console.log(`  spliced (the gateway)      ${f(spliced)} (target 1)`);
  console.log(`  parsed and written again   ${f(parsed)}`);
}

if (process.argv.includes('--serve')) await serve();
else {
  filtering();
  await latency();
}
