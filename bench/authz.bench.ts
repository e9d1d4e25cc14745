/**
 * /authz throughput against a bare node:http server answering 200, measured in the same run.
 * The servers (bare baseline and the real control plane on in-memory PGlite, with a few registry
 * entries, audit chain and metrics) run in a child process; autocannon drives them from this one,
 * so the load generator does not share an event loop with the server under test.
 *
 *   npx tsx bench/authz.bench.ts            (BENCH_SECONDS=8 BENCH_CONNECTIONS=50 by default)
 *
 * Prints req/s, p50 and p99 latency for each target and the ratio of /authz to the bare server,
 * twice: with the audit chain in memory (the decision path: decide, hash-chain, metrics) and with
 * the chain also shipped to the PGlite store (on its engine thread: the default composition).
 *
 * Production runs built JavaScript: the servers load it from dist/ when `npm run build` made it
 * (BENCH_SOURCE=1 runs the TypeScript under tsx, as `npm run bench:compare` does for both trees).
 */
import { existsSync } from 'node:fs';
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { H } from '../runtime/lib/brand.js';
import { bareServer, loadAutocannon } from './lib.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);

interface Ports {
  bare: number;
  /** Full control plane: audit chain shipped to the store. */
  decision: number;
  /** Same, audit chain in memory only: the decision path without durable shipping. */
  decisionMem: number;
}

/** BENCH_DIST: another build's dist/runtime/ (e.g. the previous commit's, for a built-against-built comparison). */
const DIST = process.env.BENCH_DIST ?? fileURLToPath(new URL('../dist/runtime/', import.meta.url));
const BUILT = !process.env.BENCH_SOURCE && existsSync(`${DIST}control-plane/server.js`);
const from = (m: string) => (BUILT ? `${DIST}${m}.js` : `../runtime/${m}.js`);

async function serve(): Promise<void> {
  const { openStore } = (await import(from('store/factory'))) as typeof import('../runtime/store/factory.js');
  const { startControlPlane } = (await import(from('control-plane/server'))) as typeof import('../runtime/control-plane/server.js');
  const { listen } = (await import(from('lib/http'))) as typeof import('../runtime/lib/http.js');
  const { setLogLevel } = (await import(from('lib/log'))) as typeof import('../runtime/lib/log.js');
  setLogLevel('warn');
  const bare = bareServer();
  const barePort = await listen(bare, '127.0.0.1:0');
  const store = await openStore({ backend: 'memory' });
  const cp = await startControlPlane({ store, env: {}, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
  const mem = await startControlPlane({ store, env: {}, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0', durableAudit: false });
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
  // Both planes share the store: rows written by one reach the other's snapshot through NOTIFY.
  for (const s of services) await cp.plane.registry.upsert(s);
  await mem.plane.registry.reload();
  process.send?.({ bare: barePort, decision: cp.decisionPort, decisionMem: mem.decisionPort } satisfies Ports);
  process.on('message', async () => {
    await mem.close();
    await cp.close();
    await store.close();
    bare.close();
    process.exit(0);
  });
}

async function drive(): Promise<void> {
  const autocannon = await loadAutocannon();
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--serve'], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const ports = await new Promise<Ports>((resolve, reject) => {
    child.once('message', (m) => resolve(m as Ports));
    child.once('exit', (c) => reject(new Error(`server process exited with ${c}`)));
  });
  const run = async (name: string, port: number, path: string, headers: Record<string, string>) => {
    const opts = { url: `http://127.0.0.1:${port}${path}`, connections: CONNECTIONS, pipelining: 1, headers };
    await autocannon({ ...opts, duration: WARMUP });
    const r = await autocannon({ ...opts, duration: SECONDS });
    if (r.errors || r.non2xx) throw new Error(`${name}: ${r.errors} errors, ${r.non2xx} non-2xx responses`);
    return { name, rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99 };
  };
  const ingressH = { [H.service]: 'web' };
  const egressH = { [H.actor]: 'bot', [H.service]: 'gpt', [H.onBehalfOf]: 'alice@example.com', [H.task]: 'bench' };
  try {
    const base = await run('bare node:http', ports.bare, '/', {});
    const results = [
      base,
      await run('ingress, audit in memory', ports.decisionMem, '/authz/api/items', ingressH),
      await run('egress, audit in memory', ports.decisionMem, '/authz/v1/chat/completions', egressH),
      await run('ingress, audit to PGlite', ports.decision, '/authz/api/items', ingressH),
      await run('egress, audit to PGlite', ports.decision, '/authz/v1/chat/completions', egressH),
    ];
    const line = (r: typeof base) =>
      `${r.name.padEnd(26)} ${r.rps.toFixed(0).padStart(7)} req/s  p50 ${String(r.p50).padStart(4)} ms  p99 ${String(r.p99).padStart(4)} ms  ratio ${(r.rps / base.rps).toFixed(2)}x`;
    console.log(
      `authz bench: ${CONNECTIONS} connections, ${SECONDS} s each after ${WARMUP} s warm-up, ${BUILT ? 'built JavaScript (dist/)' : 'TypeScript under tsx'} (target >= 0.60x of bare)`,
    );
    for (const r of results) console.log(line(r));
  } finally {
    child.send('stop');
    await new Promise((r) => child.once('exit', r));
  }
}

if (process.argv.includes('--serve')) await serve();
else await drive();
