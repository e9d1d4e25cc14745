/**
 * What tracing costs the hot path: /authz throughput with decision spans exported over OTLP/HTTP
 * against the same control plane with tracing off, measured in the same run and the same
 * process. Tracing is process wide, so the one server process switches it between rounds
 * (`initTracing` / `shutdownTracing`): two processes of identical code differ by ±6 % from each
 * other on these machines (measured A/A), more than the effect measured. Audit is in memory so
 * the decision path is what is measured. The OTLP sink the spans go to is a process of its own
 * (a real HTTP endpoint reading every batch). autocannon drives the server from this process,
 * in interleaved rounds, each measured after `BENCH_SETTLE` s (default 1) of unmeasured load
 * since the switch: the switch itself (a new writer and its connection, call sites meeting
 * the other span type) costs the first moments of a round, a cost a process that keeps its
 * setting never pays (measured: rounds timed from the switch gave 0.82-0.91x where settled
 * ones gave 0.89-1.05x, same tree). Every request carrying a gateway `traceparent` with the sampled flag
 * (every decision is a recorded, exported span: the worst case), exported as protobuf (the
 * default) and as JSON (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`); with the gateway not sampling
 * (flags 00: the span context is continued but nothing is recorded); and without a
 * `traceparent`, Writ sampling a tenth of the traces it starts (`OTEL_TRACES_SAMPLER=
 * parentbased_traceidratio`, `OTEL_TRACES_SAMPLER_ARG=0.1`).
 *
 *   npx tsx bench/tracing.bench.ts    (BENCH_SECONDS=4 per round, BENCH_ROUNDS=6, BENCH_SETTLE=1, BENCH_RATE, BENCH_CONNECTIONS=50,
 *                                      BENCH_CASES=egress to run one case, BENCH_VARIANTS=again,sampled to run
 *                                      some of again|sampled|json|unsampled|ratio beside "off", BENCH_PROFILE=<dir> for CPU profiles)
 *
 * Prints req/s, the server process's CPU time per request (from process.cpuUsage, robust to other
 * load on a shared machine, where req/s is not), p50, p99 per variant and the ratios on/off of
 * both (target >= 0.90: tracing costs <= 10%; the CPU ratio is off-CPU/on-CPU per request), pooled
 * over the rounds and as the median of each round's ratio to the off round of the same round.
 * CPU per request still moves with how saturated the server is (a busier event loop answers
 * more requests per turn); `BENCH_RATE=<req/s>` offers every variant the same fixed rate, below
 * saturation, and the CPU ratio is then the cost at equal load.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { H } from '../runtime/lib/brand.js';
import { ask, codeUnderTest, configFor, loadAutocannon, median } from './lib.js';
import type { Config } from '../runtime/lib/config.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 4);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2);
const SETTLE = Number(process.env.BENCH_SETTLE ?? 1);
/** An offered rate (req/s) instead of as fast as the server answers: CPU per request compares at equal load. */
const RATE = Number(process.env.BENCH_RATE ?? 0);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);

interface Ready {
  decision?: number;
  sink?: number;
}

/** Tracing on or off, with settings beside the endpoint (a sampler, the protocol). */
type Tracing = { tracing: 'on' | 'off'; env?: Record<string, string> };

/** The OTLP sink: reads every batch, answers 200, counts the bytes. */
async function sink(): Promise<void> {
  const { listen } = await import('../runtime/lib/http.js');
  let bytes = 0;
  const server = http.createServer((req, res) => {
    req.on('data', (c: Buffer) => (bytes += c.length));
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  process.send?.({ sink: await listen(server, '127.0.0.1:0') } satisfies Ready);
  process.on('message', () => {
    console.log(`  (OTLP sink received ${(bytes / 1024).toFixed(0)} KiB of spans)`);
    process.exit(0);
  });
}

async function serve(endpoint: string): Promise<void> {
  const { from } = codeUnderTest();
  const { openStore } = (await import(from('store/factory'))) as typeof import('../runtime/store/factory.js');
  const { startControlPlane } = (await import(from('control-plane/server'))) as typeof import('../runtime/control-plane/server.js');
  const { setLogLevel } = (await import(from('lib/log'))) as typeof import('../runtime/lib/log.js');
  const { initTracing, shutdownTracing } = (await import(from('lib/tracing'))) as typeof import('../runtime/lib/tracing.js');
  // A build from before the typed configuration reads its tracing settings with tracingFromEnv.
  const old = (await import(from('lib/tracing'))) as { tracingFromEnv?: (env: Record<string, string>) => Config['tracing'] };
  const settings = (await import(from('lib/settings'))) as { loadConfig: (env: Record<string, string>) => Config };
  const tracingOf = (env: Record<string, string>) => old.tracingFromEnv?.(env) ?? settings.loadConfig(env).tracing;
  setLogLevel('warn');
  const store = await openStore({ backend: 'memory' });
  const cp = await startControlPlane({ store, ...(await configFor(from)), decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0', durableAudit: false });
  for (const s of [
    { name: 'web', upstream: 'web.default.svc:80', public: true, kind: 'service' as const },
    { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent' as const, allowModels: ['gpt'], budget: { tokensPerHour: 1e12, callsPerHour: 1e12 } },
    { name: 'gpt', upstream: 'broker.default.svc:8080', kind: 'model' as const },
  ]) {
    await cp.plane.registry.upsert(s);
  }
  process.send?.({ decision: cp.decisionPort } satisfies Ready);
  process.on('message', async (m: 'cpu' | 'stop' | Tracing) => {
    if (m === 'cpu') {
      // This process's CPU time (µs): robust to other load on the machine, unlike req/s.
      const u = process.cpuUsage();
      process.send?.({ cpu: u.user + u.system });
      return;
    }
    if (typeof m === 'object') {
      // Switched between rounds, never during one: the spans of the last round are flushed first.
      await shutdownTracing();
      if (m.tracing === 'on') initTracing(tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, ...m.env }), 'bench');
      process.send?.({ switched: m.tracing });
      return;
    }
    await shutdownTracing();
    await cp.close();
    await store.close();
    process.exit(0);
  });
}

/** CPU time (µs) the server process has used so far. */
const cpuOf = (child: ChildProcess) => ask<{ cpu: number }>(child, 'cpu').then((m) => m.cpu);

/** Switches the server's tracing on or off (with its settings) and waits until it has. */
const switchTracing = (child: ChildProcess, m: Tracing) => ask(child, m);

function start(args: string[]): { child: ChildProcess; ready: Promise<Ready> } {
  // BENCH_PROFILE=<dir>: each server process writes a V8 CPU profile there (node --cpu-prof).
  const prof = process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_PROFILE] : [];
  const child = fork(fileURLToPath(import.meta.url), args, {
    execArgv: ['--import', 'tsx', ...prof],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const ready = new Promise<Ready>((resolve, reject) => {
    child.once('message', (m) => resolve(m as Ready));
    child.once('exit', (c) => reject(new Error(`${args[0]} process exited with ${c}`)));
  });
  return { child, ready };
}

async function drive(): Promise<void> {
  const autocannon = await loadAutocannon();
  const otlp = start(['--sink']);
  const sinkPort = (await otlp.ready).sink!;
  const server = start(['--serve', `http://127.0.0.1:${sinkPort}`]);
  // A server that fails to start must not leave the sink running (and this process waiting).
  const port = await server.ready.then(
    (r) => r.decision!,
    (e: unknown) => {
      otlp.child.kill();
      throw e;
    },
  );
  const trace = randomBytes(16).toString('hex');
  const parent = randomBytes(8).toString('hex');
  // The gateway's sampling decision travels in the traceparent flags: 01 sampled, 00 not.
  const sampled = `00-${trace}-${parent}-01`;
  const unsampled = `00-${trace}-${parent}-00`;
  const cases = [
    { name: 'ingress', path: '/authz/api/items', headers: { [H.service]: 'web' } },
    {
      name: 'egress',
      path: '/authz/v1/chat/completions',
      headers: { [H.actor]: 'bot', [H.service]: 'gpt', [H.onBehalfOf]: 'alice@example.com', [H.task]: 'bench' },
    },
  ].filter((c) => !process.env.BENCH_CASES || process.env.BENCH_CASES.split(',').includes(c.name));
  type Variant = { key: 'off' | 'again' | 'sampled' | 'json' | 'unsampled' | 'ratio'; label: string; tracing: Tracing; traceparent?: string };
  const all: Variant[] = [
    { key: 'off', label: 'tracing off', tracing: { tracing: 'off' }, traceparent: sampled },
    // The same as off, read as if it were a variant: how far two readings of the same thing
    // differ in this run (A/A), the yardstick for the ratios below it.
    { key: 'again', label: 'tracing off again (A/A)', tracing: { tracing: 'off' }, traceparent: sampled },
    { key: 'sampled', label: 'on, every request sampled', tracing: { tracing: 'on' }, traceparent: sampled },
    { key: 'json', label: 'the same, http/json', tracing: { tracing: 'on', env: { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' } }, traceparent: sampled },
    { key: 'unsampled', label: 'on, gateway not sampling', tracing: { tracing: 'on' }, traceparent: unsampled },
    {
      key: 'ratio',
      label: 'on, Writ sampling 10% of roots',
      tracing: { tracing: 'on', env: { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' } },
    },
  ];
  const variants = all.filter((v) => v.key === 'off' || !process.env.BENCH_VARIANTS || process.env.BENCH_VARIANTS.split(',').includes(v.key));
  const headersOf = (h: Record<string, string>, v: Variant) => (v.traceparent ? { ...h, traceparent: v.traceparent } : h);
  const once = async (path: string, headers: Record<string, string>, duration: number) => {
    const r = await autocannon({
      url: `http://127.0.0.1:${port}${path}`,
      connections: CONNECTIONS,
      pipelining: 1,
      headers,
      duration,
      ...(RATE ? { overallRate: RATE } : {}),
    });
    if (r.errors || r.non2xx) throw new Error(`${path}: ${r.errors} errors, ${r.non2xx} non-2xx responses`);
    return r;
  };
  try {
    console.log(
      `tracing bench (${codeUnderTest().label}): ${CONNECTIONS} connections, ${ROUNDS} interleaved rounds of ${SECONDS} s per variant after ${WARMUP} s warm-up, each timed from ${SETTLE} s after its switch${RATE ? `, offered ${RATE} req/s` : ''}; spans exported over OTLP/HTTP to a local sink (target on/off >= 0.90)`,
    );
    for (const c of cases) {
      for (const v of variants) {
        await switchTracing(server.child, v.tracing);
        await once(c.path, headersOf(c.headers, v), WARMUP);
      }
      const acc = new Map(
        variants.map((v) => [v.key, { total: 0, cpu: 0, p50: [] as number[], p99: [] as number[], rps: [] as number[], cpuPer: [] as number[] }]),
      );
      for (let i = 0; i < ROUNDS; i++) {
        // Rotate the order each round and reverse it every other round, so no variant always runs
        // first or always after the same one (both show in the figures on these machines).
        const rotated = variants.map((_, j) => variants[(i + j) % variants.length]!);
        const order = i % 2 ? rotated.reverse() : rotated;
        for (const v of order) {
          await switchTracing(server.child, v.tracing);
          if (SETTLE) await once(c.path, headersOf(c.headers, v), SETTLE);
          const cpu0 = await cpuOf(server.child);
          const r = await once(c.path, headersOf(c.headers, v), SECONDS);
          const cpu1 = await cpuOf(server.child);
          const a = acc.get(v.key)!;
          a.total += r.requests.total;
          a.cpu += cpu1 - cpu0;
          a.p50.push(r.latency.p50);
          a.p99.push(r.latency.p99);
          a.rps.push(r.requests.total / SECONDS);
          a.cpuPer.push((cpu1 - cpu0) / r.requests.total);
        }
      }
      const rps = (k: Variant['key']) => acc.get(k)!.total / (ROUNDS * SECONDS);
      const cpuPer = (k: Variant['key']) => acc.get(k)!.cpu / acc.get(k)!.total;
      for (const v of variants) {
        const a = acc.get(v.key)!;
        // Each round against the off round of the same round (adjacent in time), then the median:
        // one round disturbed by the machine moves it less than it moves the pooled figure.
        const off = acc.get('off')!;
        const byRound = (f: (i: number) => number) => median(a.rps.map((_, i) => f(i))).toFixed(3);
        const ratio =
          v.key === 'off'
            ? ''
            : `  ratio ${(rps(v.key) / rps('off')).toFixed(3)}x req/s, ${(cpuPer('off') / cpuPer(v.key)).toFixed(3)}x CPU` +
              ` (median of rounds ${byRound((i) => a.rps[i]! / off.rps[i]!)}x, ${byRound((i) => off.cpuPer[i]! / a.cpuPer[i]!)}x)`;
        console.log(
          `${`${c.name}, ${v.label}`.padEnd(40)} ${rps(v.key).toFixed(0).padStart(7)} req/s  ${cpuPer(v.key).toFixed(1).padStart(6)} µs CPU/req  p50 ${String(median(a.p50)).padStart(3)} ms  p99 ${String(median(a.p99)).padStart(3)} ms${ratio}`,
        );
      }
    }
  } finally {
    server.child.send('stop');
    await new Promise((r) => server.child.once('exit', r));
    otlp.child.send('stop');
    await new Promise((r) => otlp.child.once('exit', r));
  }
}

const i = process.argv.indexOf('--serve');
if (i >= 0) await serve(process.argv[i + 1]!);
else if (process.argv.includes('--sink')) await sink();
else await drive();
