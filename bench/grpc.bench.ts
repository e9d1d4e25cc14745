/**
 * gRPC ext_authz Check against HTTP /authz, in the same run, interleaved: one real control plane
 * (in-memory PGlite, audit chain in memory: the decision path) in a child process answers both
 * listeners; this process drives them with the same closed loop of N concurrent in-flight
 * decisions: undici keep-alive connections for HTTP (as Envoy's HTTP ext_authz pool), one
 * @grpc/grpc-js channel multiplexing the calls for gRPC (as Envoy's gRPC client). Every answer
 * is checked to be an allow, so both sides measure the same decision.
 *
 *   npx tsx bench/grpc.bench.ts   (BENCH_SECONDS=3 per round, BENCH_ROUNDS=2, BENCH_CONCURRENCY=32)
 *
 * Prints req/s, p50 and p99 per transport for an ingress and an egress decision, and gRPC as a
 * ratio of HTTP (throughput: higher is better; latency: lower is better).
 */
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { H } from '../runtime/lib/brand.js';
import { ask, startServer } from './lib.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 1);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);

interface Ports {
  decision: number;
  grpc: number;
}

async function serve(): Promise<void> {
  const { openStore } = await import('../runtime/store/factory.js');
  const { startControlPlane } = await import('../runtime/control-plane/server.js');
  const { setLogLevel } = await import('../runtime/lib/log.js');
  setLogLevel('warn');
  const store = await openStore({ backend: 'memory' });
  const cp = await startControlPlane({ store, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0', durableAudit: false });
  for (const s of [
    { name: 'web', upstream: 'web.default.svc:80', public: true },
    { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowModels: ['gpt'], budget: { tokensPerHour: 1e15, callsPerHour: 1e12 } },
    { name: 'gpt', upstream: 'broker.default.svc:8080', kind: 'model' },
  ]) {
    await cp.plane.registry.upsert(s);
  }
  process.send?.({ decision: cp.decisionPort, grpc: cp.grpcPort } satisfies Ports);
  process.on('message', async (m) => {
    // The server's CPU time, read around each measured round: CPU per decision is the figure the
    // shared, noisy CPU of these machines disturbs least.
    if (m === 'cpu') return process.send?.(process.cpuUsage());
    await cp.close();
    await store.close();
    process.exit(0);
  });
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;

interface Sample {
  n: number;
  seconds: number;
  lat: number[];
  /** Server CPU microseconds (user + system) spent during the measured rounds. */
  cpuUs: number;
}

/** `concurrency` loops each awaiting one decision at a time, for `seconds`. */
async function load(call: () => Promise<void>, seconds: number, into?: Sample): Promise<void> {
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  const worker = async () => {
    while (performance.now() < end) {
      const t = performance.now();
      await call();
      into?.lat.push(performance.now() - t);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  if (into) {
    into.seconds += (performance.now() - t0) / 1000;
    into.n = into.lat.length;
  }
}

async function drive(): Promise<void> {
  const { checkClient, checkRequest } = await import('../runtime/control-plane/grpc/testing.js');
  const { child, ready: ports } = await startServer<Ports>(fileURLToPath(import.meta.url));
  const cpu = async () => {
    const u = await ask<NodeJS.CpuUsage>(child, 'cpu');
    return u.user + u.system;
  };
  const measured = async (call: () => Promise<void>, into: Sample) => {
    const c0 = await cpu();
    await load(call, SECONDS, into);
    into.cpuUs += (await cpu()) - c0;
  };
  const pool = new Pool(`http://127.0.0.1:${ports.decision}`, { connections: CONCURRENCY, pipelining: 1, keepAliveTimeout: 60_000 });
  const grpc = checkClient(ports.grpc);
  const scenarios = [
    { name: 'ingress', method: 'GET', path: '/api/items', host: 'web.default.svc:80', headers: { [H.service]: 'web' } },
    {
      name: 'egress ',
      method: 'POST',
      path: '/v1/chat/completions',
      host: 'broker.default.svc:8080',
      headers: { [H.actor]: 'bot', [H.service]: 'gpt', [H.onBehalfOf]: 'alice@example.com', [H.task]: 'bench' },
    },
  ];
  try {
    console.log(
      `grpc bench: ${CONCURRENCY} concurrent decisions, ${ROUNDS} interleaved rounds of ${SECONDS} s per transport after ${WARMUP} s warm-up; audit in memory`,
    );
    for (const s of scenarios) {
      const httpCall = async () => {
        const r = await pool.request({ method: s.method, path: `/authz${s.path}`, headers: { host: s.host, ...s.headers } });
        await r.body.dump();
        if (r.statusCode !== 200) throw new Error(`HTTP /authz answered ${r.statusCode}`);
      };
      const req = checkRequest({ method: s.method, path: s.path, host: s.host, headers: s.headers });
      const grpcCall = async () => {
        const r = await grpc.check(req);
        if (r.http_response !== 'ok_response') throw new Error(`gRPC Check denied: ${r.status?.message}`);
      };
      await load(httpCall, WARMUP);
      await load(grpcCall, WARMUP);
      const h: Sample = { n: 0, seconds: 0, lat: [], cpuUs: 0 };
      const g: Sample = { n: 0, seconds: 0, lat: [], cpuUs: 0 };
      for (let r = 0; r < ROUNDS; r++) {
        await measured(httpCall, h);
        await measured(grpcCall, g);
      }
      const stat = (x: Sample) => {
        x.lat.sort((a, b) => a - b);
        return { rps: x.n / x.seconds, p50: pct(x.lat, 50), p99: pct(x.lat, 99), cpu: x.cpuUs / x.n };
      };
      const hs = stat(h);
      const gs = stat(g);
      const line = (t: string, x: typeof hs) =>
        `${s.name} ${t} ${x.rps.toFixed(0).padStart(7)} req/s  p50 ${x.p50.toFixed(2).padStart(6)} ms  p99 ${x.p99.toFixed(2).padStart(6)} ms  server CPU ${x.cpu.toFixed(0).padStart(4)} us/decision`;
      console.log(line('HTTP /authz', hs));
      console.log(line('gRPC Check ', gs));
      console.log(
        `${s.name} gRPC / HTTP: throughput ${(gs.rps / hs.rps).toFixed(2)}x  p50 ${(gs.p50 / hs.p50).toFixed(2)}x  p99 ${(gs.p99 / hs.p99).toFixed(2)}x  server CPU per decision ${(gs.cpu / hs.cpu).toFixed(2)}x`,
      );
    }
  } finally {
    grpc.close();
    await pool.close();
    child.send('stop');
    await new Promise((r) => child.once('exit', r));
  }
}

if (process.argv.includes('--serve')) await serve();
else await drive();
