/**
 * /authz throughput against a bare node:http server answering 200, measured in the same run, and
 * against node:http replaying /authz's own answers byte for byte (the floor under any decision).
 * The servers (bare baseline and the real control plane on PGlite in a temporary data folder, as
 * `npm start` keeps it, with a few registry entries, audit chain and metrics) run in a child
 * process; autocannon drives them from this one, so the load generator does not share an event
 * loop with the server under test.
 *
 *   npx tsx bench/authz.bench.ts    (BENCH_SECONDS=4 per round, BENCH_ROUNDS=3, BENCH_CONNECTIONS=50)
 *
 * Prints req/s, p50 and p99 latency for each target and the ratio of /authz to the bare server,
 * twice: with the audit chain in memory (the decision path: decide, hash-chain, metrics) and with
 * the chain also shipped to the PGlite store (on its engine thread: the default composition).
 * Rounds are interleaved: each runs the bare server, then every target; a target's ratio is the
 * median over rounds of its req/s against the bare server's in the same round. After a durable
 * target the shipper's backlog is drained before the next run starts.
 *
 * Production runs built JavaScript: the servers load it from dist/ when `npm run build` made it
 * (BENCH_SOURCE=1 runs the TypeScript under tsx, as `npm run bench:compare` does for both trees).
 */
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { H } from '../runtime/lib/brand.js';
import { ask, bareServer, codeUnderTest, loadAutocannon, median, servePlanePair, startServer } from './lib.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 4);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2);
const TARGET = { memory: 0.7, durable: 0.5 };
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);

interface Ports {
  bare: number;
  /** node:http replaying /authz's own answers (same status, headers and body), nothing decided. */
  replay: number;
  /** Full control plane: audit chain shipped to the store. */
  decision: number;
  /** Same, audit chain in memory only: the decision path without durable shipping. */
  decisionMem: number;
}

/** The code under test: this tree's build when made, another build's (BENCH_DIST), or the source. */
const CODE = codeUnderTest();
const from = CODE.from;
const INGRESS = { path: '/authz/api/items', headers: { [H.service]: 'web' } };
const EGRESS = {
  path: '/authz/v1/chat/completions',
  headers: { [H.actor]: 'bot', [H.service]: 'gpt', [H.onBehalfOf]: 'alice@example.com', [H.task]: 'bench' },
};

/**
 * The floor under any decision: node:http answering each path with the bytes the in-memory
 * plane answered it once (status, headers but the date and connection ones node writes itself,
 * body). Against it, the /authz rows show what deciding costs apart from writing its answer.
 */
async function replayServer(memoryPort: number): Promise<http.Server> {
  const answers = new Map<string, { status: number; headers: Record<string, string>; body: string }>();
  for (const t of [INGRESS, EGRESS]) {
    const r = await fetch(`http://127.0.0.1:${memoryPort}${t.path}`, { headers: t.headers });
    const headers: Record<string, string> = {};
    r.headers.forEach((v, k) => {
      if (!['date', 'connection', 'keep-alive'].includes(k)) headers[k] = v;
    });
    answers.set(t.path, { status: r.status, headers, body: await r.text() });
  }
  return http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    req.resume();
    const a = answers.get(req.url ?? '');
    if (!a) return void res.writeHead(404).end();
    res.writeHead(a.status, a.headers);
    res.end(a.body);
  });
}

async function serve(): Promise<void> {
  const { listen } = (await import(from('lib/http'))) as typeof import('../runtime/lib/http.js');
  const bare = bareServer();
  const barePort = await listen(bare, '127.0.0.1:0');
  const services = [
    { name: 'web', upstream: 'web.default.svc:80', public: true, kind: 'service' as const },
    { name: 'orders', upstream: 'orders.default.svc:8080' },
    {
      name: 'bot',
      upstream: 'bot.agents.svc:8080',
      kind: 'agent' as const,
      allowModels: ['gpt'],
      allowTools: ['search'],
      budget: { tokensPerHour: 1e12, callsPerHour: 1e12 },
    },
    { name: 'gpt', upstream: 'broker.default.svc:8080', kind: 'model' as const },
    { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' as const },
  ];
  const planes = await servePlanePair(services, () => {
    bare.close();
    replay.close();
  });
  const replay = await replayServer(planes.memory);
  const replayPort = await listen(replay, '127.0.0.1:0');
  process.send?.({ bare: barePort, replay: replayPort, decision: planes.durable, decisionMem: planes.memory } satisfies Ports);
}

async function drive(): Promise<void> {
  const autocannon = await loadAutocannon();
  const { child, ready: ports } = await startServer<Ports>(fileURLToPath(import.meta.url));
  const run = async (port: number, path: string, headers: Record<string, string>, duration: number) => {
    const r = await autocannon({ url: `http://127.0.0.1:${port}${path}`, connections: CONNECTIONS, pipelining: 1, headers, duration });
    if (r.errors || r.non2xx) throw new Error(`${path} on ${port}: ${r.errors} errors, ${r.non2xx} non-2xx responses`);
    return { rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99 };
  };
  const targets = [
    { name: 'bare node:http', port: ports.bare, path: '/', headers: {}, target: 1 },
    { name: 'ingress answer replayed', port: ports.replay, ...INGRESS, target: 0 },
    { name: 'egress answer replayed', port: ports.replay, ...EGRESS, target: 0 },
    { name: 'ingress, audit in memory', port: ports.decisionMem, ...INGRESS, target: TARGET.memory },
    { name: 'egress, audit in memory', port: ports.decisionMem, ...EGRESS, target: TARGET.memory },
    { name: 'ingress, audit to PGlite', port: ports.decision, ...INGRESS, target: TARGET.durable },
    { name: 'egress, audit to PGlite', port: ports.decision, ...EGRESS, target: TARGET.durable },
  ];
  /** Waits for the durable plane's audit backlog to drain; resolves with how long that took (ms). */
  const settle = async () => {
    const t0 = performance.now();
    await ask(child, 'settle');
    return performance.now() - t0;
  };
  try {
    for (const t of targets) await run(t.port, t.path, t.headers, WARMUP);
    await settle();
    const rounds: { rps: number; p50: number; p99: number; drainMs: number }[][] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const round = [];
      for (const t of targets) {
        const r = await run(t.port, t.path, t.headers, SECONDS);
        round.push({ ...r, drainMs: t.port === ports.decision ? await settle() : 0 });
      }
      rounds.push(round);
    }
    console.log(`authz bench: ${CONNECTIONS} connections, ${ROUNDS} interleaved rounds of ${SECONDS} s per target after ${WARMUP} s warm-up, ${CODE.label}`);
    targets.forEach((t, i) => {
      const rps = median(rounds.map((r) => r[i]!.rps));
      const ratio = median(rounds.map((r) => r[i]!.rps / r[0]!.rps));
      const p50 = median(rounds.map((r) => r[i]!.p50));
      const p99 = median(rounds.map((r) => r[i]!.p99));
      const drain = median(rounds.map((r) => r[i]!.drainMs));
      // A decision row against the replay of its own answer: what deciding costs beyond writing it.
      const floor = t.port === ports.replay ? -1 : targets.findIndex((f) => f.port === ports.replay && f.path === t.path);
      const overFloor = floor < 0 ? '' : `, ${median(rounds.map((r) => r[i]!.rps / r[floor]!.rps)).toFixed(2)}x of its answer replayed`;
      const verdict =
        (i > 0 && t.target ? `  (target >= ${t.target.toFixed(2)}x: ${ratio >= t.target ? 'met' : 'not met'}${overFloor})` : '') +
        (t.port === ports.decision ? `; audit backlog drained ${drain.toFixed(0)} ms after the ${SECONDS} s run` : '');
      console.log(
        `${t.name.padEnd(26)} ${rps.toFixed(0).padStart(7)} req/s  p50 ${String(p50).padStart(4)} ms  p99 ${String(p99).padStart(4)} ms  ratio ${ratio.toFixed(2)}x${verdict}`,
      );
    });
  } finally {
    child.send('stop');
    await new Promise((r) => child.once('exit', r));
  }
}

if (process.argv.includes('--serve')) await serve();
else await drive();
