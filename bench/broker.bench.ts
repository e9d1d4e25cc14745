/**
 * The model broker's added latency: the same undici client calls a local OpenAI-compatible
 * upstream directly (the baseline) and through the broker (decision call to a real in-process
 * control plane on in-memory PGlite, provider call, async usage report), in the same run,
 * interleaved in rounds so drift hits both alike. The servers run in a child process; the
 * client runs here, one request at a time (latency, not throughput).
 *
 *   npx tsx bench/broker.bench.ts     (BENCH_REQUESTS=3000 per target per mode, BENCH_ROUNDS=5,
 *                                      BENCH_PROFILE=<dir> for CPU profiles of the server process)
 *
 * Prints p50/p99 for non-streamed and streamed completions and the broker's overhead
 * (broker minus direct) and ratio, twice: as a separate control-plane pod would cost the broker
 * (the decision over HTTP, the control plane's audit chain in memory), and as the all-in-one
 * runs it (`npm start`: the decision and the usage in process, decision-local.ts and
 * usage-local.ts, and the chain also shipped to the process's PGlite). Targets (issue 14):
 * overhead p50 <= 0.5 ms, p99 <= 1.5 ms.
 *
 * Beside them, in the same rounds, the floor of any broker: a bare forwarder (node:http in,
 * undici out, the body parsed and the model swapped, no decision, no budget, no usage) in the
 * same process. What it adds over the direct call is the extra hop on this machine.
 */
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { H } from '../runtime/lib/brand.js';
import { codeUnderTest, COMPLETION, startServer } from './lib.js';

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 3000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 1000);

interface Ports {
  upstream: number;
  /** The bare forwarder. */
  forwarder: number;
  broker: number;
  decision: number;
  /** The broker decides in process. */
  local: boolean;
  /** The broker records usage in process. */
  localUsage: boolean;
}

const chunk = (content: string) =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'p', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;
const STREAM =
  ['Hello', ' there', ', how', ' can', ' I', ' help?'].map(chunk).join('') +
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'p', choices: [], usage: { prompt_tokens: 12, completion_tokens: 6, total_tokens: 18 } })}\n\ndata: [DONE]\n\n`;

async function serve(): Promise<void> {
  // The code under test as production runs it: this tree's build when there is one (bench/lib.ts).
  const { from } = codeUnderTest();
  const { openStore } = (await import(from('store/factory'))) as typeof import('../runtime/store/factory.js');
  const { startControlPlane } = (await import(from('control-plane/server'))) as typeof import('../runtime/control-plane/server.js');
  const { startBroker } = (await import(from('broker/server'))) as typeof import('../runtime/broker/server.js');
  const { parseConfig } = (await import(from('broker/config'))) as typeof import('../runtime/broker/config.js');
  const allInOne = process.env.BENCH_DURABLE_AUDIT === '1';
  // The all-in-one decides in process, as runtime/main.ts wires it (a tree from before that, as
  // bench:compare may build, has no such module: it decides over HTTP).
  const local = allInOne
    ? ((await import(from('broker/decision-local')).catch(() => undefined)) as typeof import('../runtime/broker/decision-local.js') | undefined)
    : undefined;
  // ... and records usage in process (likewise absent from older trees: they post it).
  const localUsage = allInOne
    ? ((await import(from('broker/usage-local')).catch(() => undefined)) as typeof import('../runtime/broker/usage-local.js') | undefined)
    : undefined;
  const { listen } = (await import(from('lib/http'))) as typeof import('../runtime/lib/http.js');
  const { setLogLevel } = (await import(from('lib/log'))) as typeof import('../runtime/lib/log.js');
  setLogLevel('warn');
  const upstream = http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      if (body.includes('"stream":true')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(STREAM);
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(COMPLETION) });
      res.end(COMPLETION);
    });
  });
  const upstreamPort = await listen(upstream, '127.0.0.1:0');
  const forwarderPort = await listen(bareForwarder(`http://127.0.0.1:${upstreamPort}/v1/chat/completions`), '127.0.0.1:0');
  const store = await openStore({ backend: 'memory' });
  const cp = await startControlPlane({
    store,
    decisionAddr: '127.0.0.1:0',
    mgmtAddr: '127.0.0.1:0',
    durableAudit: allInOne,
  });
  await cp.plane.registry.upsert({ name: 'gpt-mini', upstream: 'broker.default.svc:8080', kind: 'model' });
  await cp.plane.registry.upsert({
    name: 'bot',
    upstream: 'bot.agents.svc:8080',
    kind: 'agent',
    allowModels: ['gpt-mini'],
    budget: { tokensPerHour: 1e15, callsPerHour: 1e12 },
  });
  const broker = await startBroker({
    addr: '127.0.0.1:0',
    config: parseConfig({
      models: [
        { name: 'gpt-mini', model: 'provider-mini', apiBase: `http://127.0.0.1:${upstreamPort}/v1`, priceInputPer1k: 0.00015, priceOutputPer1k: 0.0006 },
      ],
    }),
    authzUrl: `http://127.0.0.1:${cp.decisionPort}/authz`,
    ...(local ? { localDecisions: (timeoutMs: number) => local.createLocalDecisionClient(cp.plane.engine, { timeoutMs }) } : {}),
    usageUrl: `http://127.0.0.1:${cp.mgmtPort}/v1/usage`,
    providerKey: 'sk-bench',
    ...(process.env.BENCH_NO_USAGE === '1'
      ? {
          usage: {
            report() {},
            stats: () => ({ sent: 0, posts: 0, failed: 0, dropped: 0, queued: 0, inFlight: 0 }),
            flush: async () => true,
            close: async () => {},
          },
        }
      : localUsage
        ? { localUsage: localUsage.deliverUsageLocally(cp.plane.recordUsage) }
        : {}),
  });
  process.send?.({
    upstream: upstreamPort,
    forwarder: forwarderPort,
    broker: broker.port,
    decision: cp.decisionPort,
    local: !!local,
    localUsage: !!localUsage,
  } satisfies Ports);
  process.on('message', async () => {
    const { sent, posts } = broker.usage.stats();
    await broker.close(1000);
    await cp.close();
    await store.close();
    upstream.close();
    process.send?.({ usageSent: sent, usagePosts: posts });
    process.exit(0);
  });
}

/** The floor of any broker: one more hop, the body parsed and its model swapped, nothing decided. */
function bareForwarder(url: string): http.Server {
  const dispatcher = new Agent({ keepAliveTimeout: 30_000 });
  return http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = { ...(JSON.parse(Buffer.concat(chunks).toString('utf8')) as object), model: 'provider-mini' };
      request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), dispatcher })
        .then(async (up) => {
          res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type']) });
          for await (const c of up.body) res.write(c);
          res.end();
        })
        .catch(() => res.destroy());
    });
  });
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;

async function drive(durable: boolean): Promise<void> {
  const { child, ready: ports } = await startServer<Ports>(fileURLToPath(import.meta.url), {
    // BENCH_PROFILE=<dir>: the server process writes a V8 CPU profile there (node --cpu-prof).
    execArgv: process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_PROFILE] : [],
    env: { ...process.env, BENCH_DURABLE_AUDIT: durable ? '1' : '0' },
  });
  const client = new Agent({ keepAliveTimeout: 60_000, connections: 1 });
  const call = async (port: number, stream: boolean): Promise<number> => {
    const body = JSON.stringify({
      model: port === ports.upstream ? 'provider-mini' : 'gpt-mini',
      messages: [{ role: 'user', content: 'Say hello' }],
      ...(stream ? { stream: true } : {}),
    });
    const t0 = process.hrtime.bigint();
    const r = await request(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-agent', [H.actor]: 'bot' },
      body,
      dispatcher: client,
    });
    const text = await r.body.text();
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (r.statusCode !== 200) throw new Error(`port ${port}: ${r.statusCode} ${text}`);
    if (stream && !text.includes('[DONE]')) throw new Error('stream did not finish');
    return ms;
  };
  const measure = async (stream: boolean) => {
    const targets = [ports.upstream, ports.broker, ports.forwarder];
    for (let i = 0; i < WARMUP; i++) for (const port of targets) await call(port, stream);
    const times: number[][] = targets.map(() => []);
    const per = Math.ceil(REQUESTS / ROUNDS);
    for (let r = 0; r < ROUNDS; r++) {
      for (const [t, port] of targets.entries()) for (let i = 0; i < per; i++) times[t]!.push(await call(port, stream));
    }
    const [direct, broker, forwarder] = times.map((ms) => {
      ms.sort((a, b) => a - b);
      return { p50: pct(ms, 50), p99: pct(ms, 99) };
    });
    return { direct: direct!, broker: broker!, forwarder: forwarder! };
  };
  try {
    const f = (n: number) => `${n.toFixed(3)} ms`;
    const met = (ms: number, target: number) => (ms <= target ? 'met' : 'MISSED');
    console.log(
      `broker bench, ${durable ? `all-in-one (decision ${ports.local ? 'in process' : 'over HTTP'}, usage ${ports.localUsage ? 'in process' : 'posted'}, audit shipped to its PGlite)` : 'separate control plane (decision over HTTP, its audit in memory)'}: one request at a time, ${ROUNDS} interleaved rounds, ${REQUESTS} requests per target per mode (targets: overhead p50 <= 0.5 ms, p99 <= 1.5 ms); ${codeUnderTest().label}`,
    );
    for (const stream of [false, true]) {
      const m = await measure(stream);
      const mode = stream ? 'stream    ' : 'non-stream';
      console.log(`${mode} direct p50 ${f(m.direct.p50)}  p99 ${f(m.direct.p99)}`);
      console.log(
        `${mode} bare forwarder p50 ${f(m.forwarder.p50)}  p99 ${f(m.forwarder.p99)}  overhead p50 ${f(m.forwarder.p50 - m.direct.p50)} p99 ${f(m.forwarder.p99 - m.direct.p99)} (the hop alone)`,
      );
      console.log(
        `${mode} broker p50 ${f(m.broker.p50)}  p99 ${f(m.broker.p99)}  ratio p50 ${(m.broker.p50 / m.direct.p50).toFixed(2)}x p99 ${(m.broker.p99 / m.direct.p99).toFixed(2)}x  overhead p50 ${f(m.broker.p50 - m.direct.p50)} (${met(m.broker.p50 - m.direct.p50, 0.5)}) p99 ${f(m.broker.p99 - m.direct.p99)} (${met(m.broker.p99 - m.direct.p99, 1.5)})`,
      );
    }
  } finally {
    await client.close();
    child.send('stop');
    const done = await new Promise<{ usageSent?: number; usagePosts?: number }>((resolve) => {
      child.once('message', (m) => resolve(m as { usageSent?: number; usagePosts?: number }));
      child.once('exit', () => resolve({}));
    });
    if (done.usageSent !== undefined)
      console.log(
        `usage reports to the control plane: ${done.usageSent} in ${done.usagePosts} ${ports.localUsage ? 'deliveries in process' : 'posts'} (what lands within 10 ms goes out together)`,
      );
  }
}

if (process.argv.includes('--serve')) await serve();
else {
  await drive(false);
  await drive(true);
}
