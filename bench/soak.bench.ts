/**
 * Memory over a long run (issue 14): the all-in-one as `npm start` runs it (PGlite data folder,
 * durable audit, the examples loaded, every listener) in a child process, then BENCH_SOAK_DECISIONS
 * (default 1M) decisions at `/authz`, ingress and egress alternating (the egress of the example
 * agent runs into its hourly call budget and is denied from then on: a denial is a decision and an
 * audit record too). RSS of the child is read from /proc every 250 ms:
 *
 *   start   right after the listeners answer
 *   idle    settled: BENCH_SOAK_SETTLE seconds (default 45) later, before any load
 *   peak    the highest sample under load (and the samples at each quarter of it: a leak climbs
 *           with the decision count, the collector's heap sizing levels off)
 *   end     settled again after the load: once the background audit verifier has read back
 *           what the load wrote (it reads at most AUDIT_VERIFY_BUDGET records a pass, so after a
 *           long burst it works on for minutes: memory it holds then is work, not a leak), then the
 *           same wait
 *
 * Where it lives, read from outside the process at idle, at the peak, after the load and after a
 * forced full collection: RSS by mapping (smaps.ts: WebAssembly memories, the V8 heap pages of
 * every isolate, glibc's malloc arenas and main heap, other anonymous memory, compiled code,
 * files), and every isolate's V8 heap (the diagnostic report: the main thread's and the PGlite
 * engine thread's). BENCH_SOAK_VARIANTS runs the all-in-one once per environment variant
 * (`;`-separated, each `K=V K=V`: allocators side by side in one run); BENCH_SOAK_IDLE_GC_MIN_MB
 * in a variant gives the main isolate's idle collector another trigger (a what-if for its default).
 *
 * Baseline: a bare node:http process started and settled the same way, in the same run (what any
 * Node process costs); Writ's idle RSS is printed as a multiple of it. Targets: end - idle <= 20 MB;
 * idle <= 400 MB.
 *
 * Then, with TEST_DATABASE_URL or BENCH_DATABASE_URL set, the cluster shape on PostgreSQL (a fresh
 * database each), each component's peak beside 75 % of the chart's memory limit for it: the
 * control plane alone (`runtime/control-plane/main.ts`, the same decisions), and the identity
 * authority and the broker each as its own process, as the image starts them, under a load of
 * their own (BENCH_SOAK_REQUESTS, default 20k: verify-presentation and client_credentials; chat
 * completions decided at a control plane process and answered by a local fake provider; see
 * soak-components.ts). BENCH_SOAK_PARTS picks rows (all-in-one,control-plane,identity,broker);
 * BENCH_SOAK_SNAPSHOTS=<dir> has the identity authority and the broker write heap snapshots
 * when idle and after the load (diagnosis).
 *
 *   npx tsx bench/soak.bench.ts     (BENCH_SOAK_DECISIONS=1000000 BENCH_CONNECTIONS=32 BENCH_SOAK_SETTLE=45 BENCH_SOAK_REQUESTS=20000)
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { H, metric } from '../runtime/lib/brand.js';
import { collectGarbage } from '../runtime/lib/idle-gc.js';
import { allInOneEnv, ask, bareServer, benchProcessEnv, codeUnderTest, loadAutocannon } from './lib.js';
import { byMapping, printMappings, rss, sampleDuring, soakBroker, soakIdentity } from './soak-components.js';

const DECISIONS = Number(process.env.BENCH_SOAK_DECISIONS ?? 1_000_000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
// Settled: past one period of the background audit verifier (30 s) and several checks of the
// idle heap collection (5 s each) after it; after the load, counted once the verifier has read
// the load back (verifierCaughtUp).
const SETTLE_S = Number(process.env.BENCH_SOAK_SETTLE ?? 45);
/** Requests per run for the identity authority and the broker (each request heavier than a decision). */
const COMPONENT_REQUESTS = Number(process.env.BENCH_SOAK_REQUESTS ?? 20_000);
/**
 * The all-in-one once per variant of its environment, `;`-separated, each `K=V K=V` over the
 * bench's own, in one run: `;LD_PRELOAD=` runs it as `npm start` does (jemalloc where installed),
 * then on glibc's malloc; `LD_PRELOAD= MALLOC_ARENA_MAX=0` on glibc with its default of 8 arenas
 * per core. Default: one row, as `npm start` runs it (lib.ts, allocatorEnv).
 */
const VARIANTS = (process.env.BENCH_SOAK_VARIANTS ?? '').split(';').map((v) =>
  Object.fromEntries(
    v
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  ),
);
/** Which rows run: all-in-one, control-plane, identity, broker (default all). */
const PARTS = new Set((process.env.BENCH_SOAK_PARTS ?? 'all-in-one,control-plane,identity,broker').split(','));
const code = codeUnderTest();
const self = fileURLToPath(import.meta.url);
const MB = 1024 * 1024;

async function serveWrit(): Promise<void> {
  const { startWrit } = (await import(code.from('main'))) as typeof import('../runtime/main.js');
  const { setLogLevel } = (await import(code.from('lib/log'))) as typeof import('../runtime/lib/log.js');
  setLogLevel('warn');
  const dir = mkdtempSync(join(tmpdir(), 'writ-soak-'));
  const env = allInOneEnv(join(dir, 'data'));
  const writ = await startWrit(env);
  // As every entry point does once up (runtime/lib/process.ts), where this tree's build has it.
  const idle = (await import(code.from('lib/idle-gc')).catch(() => undefined)) as typeof import('../runtime/lib/idle-gc.js') | undefined;
  // The collector the entry point starts once up (a build from before the typed configuration: idleGcFromEnv).
  const settings = (await import(code.from('lib/settings'))) as Partial<typeof import('../runtime/lib/settings.js')>;
  const old = idle as { idleGcFromEnv?: (e: typeof env) => unknown } | undefined;
  // BENCH_SOAK_IDLE_GC_MIN_MB: what-if for the idle collector's trigger (its default is idle-gc.ts's).
  const minGrowth = process.env.BENCH_SOAK_IDLE_GC_MIN_MB ? { minGrowthBytes: Number(process.env.BENCH_SOAK_IDLE_GC_MIN_MB) * MB } : {};
  if (old?.idleGcFromEnv) old.idleGcFromEnv(env);
  else if (settings.loadConfig) idle?.startIdleGc({ intervalMs: settings.loadConfig(env).process.idleGcIntervalMs, ...minGrowth });
  process.send?.({ decision: writ.ports.decision, mgmt: writ.ports.mgmt });
  process.on('message', async (m) => {
    // Where the memory is: this isolate's heap and buffers, and every isolate's heap (the PGlite engine thread's).
    if (m === 'mem' || m === 'gc') return answerMem(m);
    await writ.close();
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
}

/** The V8 heap of each isolate of this process, bytes: the diagnostic report reads worker threads' too (the PGlite engine's). */
function isolateHeaps(): Heap[] {
  type Js = { javascriptHeap: { totalMemory: number; usedMemory: number } };
  const report = process.report.getReport() as unknown as Js & { workers?: (Js & { header: { threadId: number } })[] };
  const heap = (thread: string, r: Js) => ({ thread, total: r.javascriptHeap.totalMemory, used: r.javascriptHeap.usedMemory });
  return [heap('main', report), ...(report.workers ?? []).map((w) => heap(`worker ${w.header.threadId}`, w))];
}

/** Answers `mem` (and `gc`, after a full collection of this isolate) with process.memoryUsage() and every isolate's heap. */
function answerMem(question: 'mem' | 'gc'): void {
  if (question === 'gc') collectGarbage();
  process.send?.({ mem: process.memoryUsage(), heaps: isolateHeaps() });
}

/**
 * The cluster shape's control plane (runtime/control-plane/main.ts as the chart runs it) alone on
 * PostgreSQL (BENCH_SOAK_DB: a fresh database), durable audit, with the entries the load asks for.
 */
async function serveControlPlane(): Promise<void> {
  const { startControlPlaneProcess } = (await import(code.from('control-plane/main'))) as typeof import('../runtime/control-plane/main.js');
  const { setLogLevel } = (await import(code.from('lib/log'))) as typeof import('../runtime/lib/log.js');
  setLogLevel('warn');
  const env = { ...allInOneEnv('/nonexistent'), REGISTRY_DB_URL: process.env.BENCH_SOAK_DB!, AUDIT_SPOOL_DIR: 'none' };
  // A build from before the typed configuration takes env and has idleGcFromEnv; a later one takes its configuration.
  const settings = (await import(code.from('lib/settings'))) as Partial<typeof import('../runtime/lib/settings.js')>;
  const loaded: unknown = settings.loadConfig?.(env);
  const config = loaded && typeof loaded === 'object' && 'controlPlane' in loaded ? (loaded as import('../runtime/lib/config.js').Config) : undefined;
  const cp = await startControlPlaneProcess((config ?? env) as Parameters<typeof startControlPlaneProcess>[0]);
  const idle = (await import(code.from('lib/idle-gc')).catch(() => undefined)) as typeof import('../runtime/lib/idle-gc.js') | undefined;
  const old = idle as { idleGcFromEnv?: (e: typeof env) => unknown } | undefined;
  if (old?.idleGcFromEnv) old.idleGcFromEnv(env);
  else if (config) idle?.startIdleGc({ intervalMs: config.process.idleGcIntervalMs });
  const mgmt = cp.ports!.mgmt!;
  for (const svc of [
    { name: 'web', upstream: 'web.default.svc:80', public: true, kind: 'service', dataClass: 'public' },
    { name: 'gpt-4o-mini', upstream: 'broker.writ.svc:8080', kind: 'model' },
    { name: 'research-agent', upstream: 'research.agents.svc:8080', kind: 'agent', allowModels: ['gpt-4o-mini'], budget: { callsPerHour: 1000 } },
  ]) {
    const r = await fetch(`http://127.0.0.1:${mgmt}/v1/registry/services`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(svc),
    });
    if (r.status >= 300) throw new Error(`registry: ${r.status} ${await r.text()}`);
  }
  process.send?.({ decision: cp.ports!.decision, mgmt });
  process.on('message', async (m) => {
    if (m === 'mem' || m === 'gc') return answerMem(m);
    await cp.close();
    process.exit(0);
  });
}

function serveBare(): void {
  const s = bareServer().listen(0, '127.0.0.1', () => process.send?.({ decision: (s.address() as { port: number }).port, mgmt: 0 }));
  process.on('message', () => process.exit(0));
}

type Kind = '--writ' | '--bare' | '--control-plane';

async function start(kind: Kind, env: NodeJS.ProcessEnv = benchProcessEnv()): Promise<{ proc: ChildProcess; port: number; mgmt: number }> {
  const proc = fork(self, [kind], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'ignore', 'inherit', 'ipc'], env });
  const ports = await new Promise<{ decision: number; mgmt: number }>((resolve, reject) => {
    proc.once('message', (m: { decision: number; mgmt: number }) => resolve(m));
    proc.once('exit', (c) => reject(new Error(`${kind} exited with ${c}`)));
  });
  return { proc, port: ports.decision, mgmt: ports.mgmt };
}

/** Seconds until the background verifier has checked every stored record (at most 15 min). */
async function verifierCaughtUp(mgmt: number): Promise<number> {
  const t0 = Date.now();
  const gauge = (text: string, name: string) => Number(new RegExp(`^${metric(name)}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  while (Date.now() - t0 < 15 * 60_000) {
    const text = await (await fetch(`http://127.0.0.1:${mgmt}/metrics`)).text();
    if (gauge(text, 'audit_verified_seq') >= gauge(text, 'audit_stored_seq')) break;
    await sleep(1);
  }
  return (Date.now() - t0) / 1000;
}

interface Heap {
  thread: string;
  total: number;
  used: number;
}
/** The child's own account of its main isolate (heap, external, array buffers) and of every isolate's heap. */
const memOf = (proc: ChildProcess, question: 'mem' | 'gc' = 'mem') => ask<{ mem: NodeJS.MemoryUsage; heaps: Heap[] }>(proc, question);
const split = ({ mem: u, heaps }: { mem: NodeJS.MemoryUsage; heaps: Heap[] }) =>
  `heap ${mb(u.heapUsed)} of ${mb(u.heapTotal)}, external ${mb(u.external)} (array buffers ${mb(u.arrayBuffers)}); V8 heaps used of committed: ${heaps.map((h) => `${h.thread} ${mb(h.used)} of ${mb(h.total)}`).join(', ')}`;

async function stop(proc: ChildProcess): Promise<void> {
  const done = new Promise((r) => proc.once('exit', r));
  proc.send('stop');
  const t = setTimeout(() => proc.kill('SIGKILL'), 30_000);
  await done;
  clearTimeout(t);
}

const sleep = (s: number) => new Promise((r) => setTimeout(r, s * 1000));
const mb = (b: number) => `${(b / MB).toFixed(0)} MB`;

async function drive(): Promise<void> {
  if (!readFileSyncSafe('/proc/self/status')) {
    console.log('soak bench: SKIPPED, RSS is read from /proc (Linux only)');
    return;
  }
  const bare = await start('--bare');
  await sleep(SETTLE_S);
  const bareRss = rss(bare.proc.pid!);
  await stop(bare.proc);
  console.log(`soak bench, ${code.label}: ${DECISIONS.toLocaleString('en-US')} decisions per shape, ${CONNECTIONS} connections, RSS settled ${SETTLE_S} s`);
  console.log(`  bare node:http process (baseline)  idle ${mb(bareRss)}`);
  for (const variant of PARTS.has('all-in-one') ? VARIANTS : []) {
    const env = benchProcessEnv(variant);
    const shown = Object.entries(env).filter(([k]) => k.startsWith('MALLOC_') || k === 'LD_PRELOAD' || k in variant);
    const label = `all-in-one as npm start runs it (PGlite, durable audit, examples; ${shown.map(([k, v]) => `${k}=${v}`).join(' ')})`;
    await soak('--writ', label, { bareRss, env });
  }
  const url = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
  if (!url) {
    console.log('  cluster shape on PostgreSQL: SKIPPED (set TEST_DATABASE_URL or BENCH_DATABASE_URL)');
    return;
  }
  const row = (label: string, limitMb: number) => ({ label, limitMb, settleS: SETTLE_S });
  if (PARTS.has('control-plane'))
    await onFreshDatabase(url, (db) =>
      soak('--control-plane', 'control plane alone on PostgreSQL, as the chart runs it (durable audit)', {
        bareRss,
        env: benchProcessEnv({ BENCH_SOAK_DB: db }),
        limitMb: CHART_LIMIT_MB.controlPlane,
      }),
    );
  if (PARTS.has('identity'))
    await onFreshDatabase(url, (db) =>
      soakIdentity(db, COMPONENT_REQUESTS, row('identity authority alone on PostgreSQL, as the chart runs it', CHART_LIMIT_MB.identity)),
    );
  if (PARTS.has('broker'))
    await onFreshDatabase(url, (db) =>
      soakBroker(db, COMPONENT_REQUESTS, row('broker alone, as the chart runs it (a control plane process on PostgreSQL deciding)', CHART_LIMIT_MB.broker)),
    );
}

/** Runs `fn` with the URL of a database made for it on `url`'s server, dropped afterwards. */
async function onFreshDatabase(url: string, fn: (dbUrl: string) => Promise<void>): Promise<void> {
  const db = `soak_${Date.now().toString(36)}`;
  const postgres = (await import('postgres')).default;
  const admin = postgres(url, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${db}`);
  try {
    const u = new URL(url);
    u.pathname = `/${db}`;
    await fn(u.toString());
  } finally {
    await admin.unsafe(`drop database if exists ${db} with (force)`);
    await admin.end();
  }
}

/** The chart's memory limits (charts/writ/values.yaml): a component's peak under load must stay below 75 % of its own. */
const CHART_LIMIT_MB = { controlPlane: 1024, identity: 768, broker: 512 };

async function soak(kind: Kind, label: string, o: { bareRss: number; env?: NodeJS.ProcessEnv; limitMb?: number }): Promise<void> {
  const bareRss = o.bareRss;
  const w = await start(kind, o.env);
  const pid = w.proc.pid!;
  const startRss = rss(pid);
  await sleep(SETTLE_S);
  const idle = rss(pid);
  const idleMappings = byMapping(pid);
  const idleMem = await memOf(w.proc);
  const autocannon = await loadAutocannon();
  // Every sample kept: a leak climbs with the decision count, heap sizing plateaus.
  const {
    result: r,
    secs,
    peak: loadPeak,
    quarters,
    peakMappings,
  } = await sampleDuring(pid, () =>
    autocannon({
      url: `http://127.0.0.1:${w.port}`,
      connections: CONNECTIONS,
      amount: DECISIONS,
      requests: [
        { method: 'GET', path: '/authz/index.html', headers: { [H.service]: 'web' } },
        {
          method: 'POST',
          path: '/authz/v1/chat/completions',
          headers: { [H.actor]: 'research-agent', [H.service]: 'gpt-4o-mini', [H.onBehalfOf]: 'alice@example.com', [H.task]: 'soak' },
        },
      ],
    }),
  );
  const peak = Math.max(idle, loadPeak);
  const verifying = await verifierCaughtUp(w.mgmt);
  await sleep(SETTLE_S);
  const end = rss(pid);
  const endMappings = byMapping(pid);
  const endMem = await memOf(w.proc);
  const gcMem = await memOf(w.proc, 'gc');
  // V8 hands freed pages back from a background thread: read RSS once it has.
  await sleep(3);
  const gcRss = rss(pid);
  const gcMappings = byMapping(pid);
  await stop(w.proc);

  const answered = r.requests.total;
  console.log(
    `${label}: ${answered.toLocaleString('en-US')} decisions at /authz in ${secs.toFixed(0)} s (${(answered / secs).toFixed(0)}/s, ${r.errors} errors, ${r.non2xx} denials); the audit verifier read the load back ${verifying.toFixed(0)} s after it`,
  );
  console.log(`  writ right after start             ${mb(startRss)}`);
  console.log(
    `  writ idle, before load             ${mb(idle)}  ${(idle / bareRss).toFixed(1)}x of bare  (target <= 400 MB ${idle <= 400 * MB ? 'met' : 'MISSED'})`,
  );
  console.log(`    main isolate                     ${split(idleMem)}`);
  const limit = o.limitMb
    ? `  (target < 75% of the chart's ${o.limitMb} MB limit, ${(0.75 * o.limitMb).toFixed(0)} MB: ${peak < 0.75 * o.limitMb * MB ? 'met' : 'MISSED'})`
    : '';
  console.log(`  writ peak under load               ${mb(peak)}${limit}; at 1/4, 1/2, 3/4 and all of the load ${quarters.map(mb).join(', ')}`);
  console.log(
    `  writ idle, after load              ${mb(end)}  end - idle ${((end - idle) / MB).toFixed(1)} MB  (target <= 20 MB ${end - idle <= 20 * MB ? 'met' : 'MISSED'})`,
  );
  console.log(`    main isolate                     ${split(endMem)}`);
  console.log(`  after a full GC (diagnosis)        ${mb(gcRss)} 3 s later; main isolate ${split(gcMem)}`);
  printMappings([
    ['idle', idleMappings],
    ['peak', peakMappings],
    ['after GC', gcMappings],
    ['after', endMappings],
  ]);
}

function readFileSyncSafe(p: string): string | undefined {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return undefined;
  }
}

if (process.argv[2] === '--writ') await serveWrit();
else if (process.argv[2] === '--control-plane') await serveControlPlane();
else if (process.argv[2] === '--bare') serveBare();
else await drive();
