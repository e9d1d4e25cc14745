/**
 * The MCP gateway's added latency (issue 42): the same undici client calls the reference MCP
 * server (`@modelcontextprotocol/server-everything`, streamable HTTP, in a process of its own)
 * directly (the baseline), through the gateway on the broker listener (its own process: the
 * decision by the control plane's engine in process, the audit chain in memory, the call counted
 * against a budget), and through a bare forwarder (its own process: node:http in, undici out, the
 * answer piped back, nothing decided: the floor of any gateway on this machine), `tools/call echo`
 * one at a time, interleaved in rounds so drift hits all alike, with each process's CPU per call.
 * Then `tools/list` filtering of 1,000 tools for an agent with 20 allowTools entries (exact names
 * and prefixes), as the gateway does it (list-filter.ts: the kept tools spliced out of the answer),
 * against the whole answer parsed, filtered and written again, interleaved.
 *
 *   npx tsx bench/mcp.bench.ts     (BENCH_REQUESTS=2000 per target per round, BENCH_ROUNDS=5,
 *                                   BENCH_PROFILE=<dir> for a CPU profile of the gateway process;
 *                                   the gateway runs from dist/ when built: npm run build)
 *
 * Targets: added p50 <= 0.5 ms and p99 <= 2 ms; filtering <= 1 ms.
 */
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { H } from '../runtime/lib/brand.js';
import { mayList } from '../runtime/control-plane/decision/tool.js';
import { filterListAnswer } from '../runtime/mcp/list-filter.js';
import type { Service } from '../runtime/control-plane/types.js';
import { answeredCpu, codeUnderTest, median, serverCpuUs, startServer } from './lib.js';

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 2000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 500);
const SELF = fileURLToPath(import.meta.url);

/** Each server process answers its port first, then its CPU time when asked; any other message stops it. */
function answerCpu(): void {
  process.on('message', (m) => answeredCpu(m) || process.exit(0));
}

async function serveEverything(): Promise<void> {
  const { startEverything } = await import('../runtime/mcp/everything-testing.js');
  const everything = await startEverything();
  // The bench measures the gateway, not the reference server's bookkeeping of what it was sent.
  setInterval(() => {
    everything.received.length = 0;
    everything.headers.length = 0;
  }, 1000).unref();
  process.send?.(everything.port);
  answerCpu();
}

async function serveGateway(upstream: string): Promise<void> {
  const { from } = codeUnderTest();
  const { setLogLevel } = (await import(from('lib/log'))) as typeof import('../runtime/lib/log.js');
  setLogLevel('warn');
  const { openStore } = (await import(from('store/factory'))) as typeof import('../runtime/store/factory.js');
  const { startControlPlane } = (await import(from('control-plane/server'))) as typeof import('../runtime/control-plane/server.js');
  const { startBroker } = (await import(from('broker/server'))) as typeof import('../runtime/broker/server.js');
  const { createMcpGateway } = (await import(from('mcp/gateway'))) as typeof import('../runtime/mcp/gateway.js');
  const store = await openStore({ backend: 'memory' });
  const cp = await startControlPlane({ store, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
  await cp.plane.registry.upsert({ name: 'everything', upstream, kind: 'tool', protocol: 'mcp' });
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
  process.send?.(broker.port);
  answerCpu();
}

/** The floor: the MCP headers and body forwarded by undici, the answer piped back, nothing read or decided. */
async function serveForwarder(upstream: string): Promise<void> {
  const dispatcher = new Agent({ keepAliveTimeout: 30_000 });
  const pass = ['content-type', 'accept', 'mcp-session-id', 'mcp-protocol-version'];
  const server = http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const headers: Record<string, string> = {};
      for (const k of pass) if (typeof req.headers[k] === 'string') headers[k] = req.headers[k];
      request(`http://${upstream}/mcp`, { method: 'POST', headers, body: Buffer.concat(chunks), dispatcher })
        .then(async (up) => {
          const back: Record<string, string> = {};
          for (const k of ['content-type', 'mcp-session-id']) if (typeof up.headers[k] === 'string') back[k] = up.headers[k];
          res.writeHead(up.statusCode, back);
          for await (const c of up.body) res.write(c);
          res.end();
        })
        .catch(() => res.destroy());
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  process.send?.((server.address() as { port: number }).port);
  answerCpu();
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

interface Target {
  label: string;
  call: () => Promise<number>;
  /** The process that serves it (its CPU per call), when it is not the reference server itself. */
  child?: import('node:child_process').ChildProcess;
  times: number[];
  p50: number[];
  p99: number[];
  cpuUs: number;
}

async function latency(): Promise<void> {
  const { label } = codeUnderTest();
  const everything = await startServer<number>(SELF, { args: ['--everything'] });
  const upstream = `127.0.0.1:${everything.ready}`;
  const env = { ...process.env, BENCH_UPSTREAM: upstream };
  // BENCH_PROFILE=<dir>: the gateway process writes a V8 CPU profile there (node --cpu-prof).
  const profile = process.env.BENCH_PROFILE;
  const gateway = await startServer<number>(SELF, { env, execArgv: profile ? ['--cpu-prof', '--cpu-prof-dir', profile] : [] });
  const forwarder = await startServer<number>(SELF, { env, args: ['--forwarder'] });
  const client = new Agent({ keepAliveTimeout: 60_000, connections: 1 });
  const target = async (name: string, url: string, child?: typeof gateway.child): Promise<Target> => ({
    label: name,
    call: await session(url, client),
    child,
    times: [],
    p50: [],
    p99: [],
    cpuUs: 0,
  });
  const targets = [
    await target('direct', `http://${upstream}/mcp`),
    await target('gateway', `http://127.0.0.1:${gateway.ready}/mcp/everything`, gateway.child),
    await target('forwarder', `http://127.0.0.1:${forwarder.ready}/mcp`, forwarder.child),
  ];
  for (let i = 0; i < WARMUP; i++) for (const t of targets) await t.call();
  for (let round = 0; round < ROUNDS; round++) await timedRound(round % 2 ? [...targets].reverse() : targets);
  report(targets, label);
  for (const c of [everything.child, gateway.child, forwarder.child]) {
    c.send('stop');
    await new Promise((r) => c.once('exit', r));
  }
  await client.close();
}

/** One round: each target called in turn, REQUESTS times; its p50 and p99, and its server's CPU. */
async function timedRound(targets: Target[]): Promise<void> {
  const cpu = async (t: Target) => (t.child ? await serverCpuUs(t.child) : 0);
  const before = await Promise.all(targets.map(cpu));
  const rounds: number[][] = targets.map(() => []);
  for (let i = 0; i < REQUESTS; i++) for (let k = 0; k < targets.length; k++) rounds[k]!.push(await targets[k]!.call());
  const after = await Promise.all(targets.map(cpu));
  targets.forEach((t, k) => {
    const r = rounds[k]!.sort((a, b) => a - b);
    t.p50.push(pct(r, 50));
    t.p99.push(pct(r, 99));
    t.times.push(...r);
    t.cpuUs += after[k]! - before[k]!;
  });
}

function report(targets: Target[], label: string): void {
  const f = (n: number) => n.toFixed(3);
  const [direct] = targets;
  console.log(`tools/call echo, ${ROUNDS} rounds x ${REQUESTS} per target, interleaved (order reversed every other round); gateway: ${label}`);
  for (const t of targets) {
    const all = [...t.times].sort((a, b) => a - b);
    const added =
      t === direct ? '' : `  added p50 ${f(median(t.p50.map((v, i) => v - direct!.p50[i]!)))} p99 ${f(median(t.p99.map((v, i) => v - direct!.p99[i]!)))}`;
    const cpu = t.child ? `  server CPU ${f(t.cpuUs / 1000 / (ROUNDS * REQUESTS))} ms/call` : '';
    console.log(`  ${t.label.padEnd(9)} p50 ${f(pct(all, 50))} ms  p99 ${f(pct(all, 99))} ms${added}${cpu}`);
  }
  console.log("  (added: the median over rounds of each round's figure minus direct's; targets for the gateway 0.5 / 2 ms)");
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

const upstreamOf = () => process.env.BENCH_UPSTREAM ?? '';
if (process.argv.includes('--everything')) await serveEverything();
else if (process.argv.includes('--serve')) await serveGateway(upstreamOf());
else if (process.argv.includes('--forwarder')) await serveForwarder(upstreamOf());
else {
  filtering();
  await latency();
}
