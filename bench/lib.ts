/**
 * Pieces the benchmarks share: the bare node:http baseline server, the autocannon loader with
 * the part of its result the benches read, asking a server process a question over IPC, and a
 * throwaway PostgreSQL schema for the benches that also run on PostgreSQL, and the completion a
 * bench's fake provider answers.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import type { Config } from '../runtime/lib/config.js';

/** What the benches' fake OpenAI-compatible provider answers a chat completion with (usage included). */
export const COMPLETION = JSON.stringify({
  id: 'c1',
  object: 'chat.completion',
  created: 1,
  model: 'provider-mini',
  choices: [{ index: 0, message: { role: 'assistant', content: 'Hello there, how can I help?' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 12, completion_tokens: 8, total_tokens: 20 },
});

/** The median of `xs` (the mean of the middle two for an even count). */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/**
 * Forks a bench file as its server process (`<file> --serve`, or `args`, under tsx) and resolves once it has
 * sent its first message (the ports it listens on); rejects if it exits first.
 */
export async function startServer<T>(
  file: string,
  o: { execArgv?: string[]; env?: NodeJS.ProcessEnv; args?: string[] } = {},
): Promise<{ child: ChildProcess; ready: T }> {
  const child = fork(file, o.args ?? ['--serve'], {
    execArgv: ['--import', 'tsx', ...(o.execArgv ?? [])],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    env: o.env,
  });
  const ready = await new Promise<T>((resolve, reject) => {
    child.once('message', (m) => resolve(m as T));
    child.once('exit', (c) => reject(new Error(`server process exited with ${c}`)));
  });
  return { child, ready };
}

/**
 * In a bench's server process: answers the message 'cpu' with the process's CPU time so far
 * (user + system, µs, every thread) and says it did; `serverCpuUs` asks it.
 */
export function answeredCpu(m: unknown): boolean {
  if (m !== 'cpu') return false;
  const u = process.cpuUsage();
  process.send?.(u.user + u.system);
  return true;
}

/** A bench server process's CPU time so far (µs), as `answeredCpu` gives it. */
export const serverCpuUs = (child: ChildProcess): Promise<number> => ask<number>(child, 'cpu');

/** Sends a bench's server process one message and resolves with its answer (one question at a time). */
export function ask<T = unknown>(child: ChildProcess, message: string | object): Promise<T> {
  return new Promise((resolve) => {
    child.once('message', (m) => resolve(m as T));
    child.send(message);
  });
}

export interface AutocannonResult {
  requests: { average: number; total: number };
  latency: { p50: number; p99: number };
  non2xx: number;
  errors: number;
}
export type Autocannon = (o: Record<string, unknown>) => Promise<AutocannonResult>;

/** autocannon (a devDependency, loaded only by the driving process). */
export async function loadAutocannon(): Promise<Autocannon> {
  const spec = 'autocannon';
  return ((await import(spec)) as { default: Autocannon }).default;
}

/**
 * The baseline: answers 200 `{}` at once, or once the body is read when the request has one.
 * Keep-alive as long as the servers under test keep it.
 */
export function bareServer(): http.Server {
  return http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    const answer = () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': 2 });
      res.end('{}');
    };
    req.resume();
    if (req.headers['content-length'] === undefined && req.headers['transfer-encoding'] === undefined) answer();
    else req.on('end', answer);
  });
}

/**
 * Where a bench loads the code it measures. Production runs built JavaScript, so by default the
 * servers load this tree's `dist/runtime/` when `npm run build` made it; `BENCH_DIST=<dir>` loads
 * another build's `dist/runtime/` (`npm run bench:compare` sets it to each tree's build in turn);
 * `BENCH_SOURCE=1` (or no build) loads the TypeScript under tsx.
 */
export function codeUnderTest(dist = process.env.BENCH_DIST): { built: boolean; label: string; from: (module: string) => string } {
  const own = new URL('../dist/runtime/', import.meta.url).pathname;
  const dir = dist ? `${dist.replace(/\/$/, '')}/` : own;
  const built = !process.env.BENCH_SOURCE && existsSync(`${dir}control-plane/server.js`);
  return {
    built,
    label: built ? `built JavaScript (${dir === own ? 'dist/' : dir})` : 'TypeScript under tsx',
    from: (m) => (built ? `${dir}${m}.js` : `../runtime/${m}.js`),
  };
}

/**
 * A component's configuration option for the code under test, which may be a build from before
 * the typed configuration (bench:compare against an older commit): that build's own
 * `loadConfig(env)` result as `config`, or, for a build whose components still read `env`, `env`.
 */
export async function configFor(from: (module: string) => string, env: Record<string, string | undefined> = {}): Promise<{ config?: Config }> {
  const settings = (await import(from('lib/settings'))) as { loadConfig?: (e: typeof env) => unknown };
  const loaded = settings.loadConfig?.(env);
  return loaded && typeof loaded === 'object' && 'controlPlane' in loaded ? { config: loaded as Config } : ({ env } as { config?: Config });
}

/**
 * The allocator `npm start` and the image give node (package.json, Dockerfile): jemalloc preloaded
 * where Debian's libjemalloc2 is installed (unless LD_PRELOAD is set, even empty: `LD_PRELOAD=`
 * runs glibc's malloc), its background thread giving freed pages back; glibc's arenas capped at 2
 * where it is not preloaded. Read when a process starts, so set on each process the bench starts.
 */
export function allocatorEnv(): Record<string, string> {
  const lib = () =>
    readdirSync('/usr/lib', { withFileTypes: true })
      .filter((d) => d.isDirectory() && d.name.endsWith('-linux-gnu'))
      .map((d) => join('/usr/lib', d.name, 'libjemalloc.so.2'))
      .find((f) => existsSync(f));
  const jemalloc = process.env.LD_PRELOAD === undefined && existsSync('/usr/lib') ? lib() : undefined;
  return {
    ...(jemalloc ? { LD_PRELOAD: jemalloc } : {}),
    MALLOC_CONF: process.env.MALLOC_CONF || 'background_thread:true',
    MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX || '2',
  };
}

/** The environment every bench process starts with (bench/run.ts, bench/compare.ts): the allocator as `npm start` has it. */
export function benchProcessEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { ...process.env, ...allocatorEnv(), ...extra };
}

/**
 * The environment of the all-in-one as `npm start` runs it (PGlite in `dataDir`, the examples),
 * every listener on an ephemeral port, and no test database leaking in from the caller's shell.
 */
export function allInOneEnv(dataDir: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    WRIT_DATA_DIR: dataDir,
    PORT: '0',
    DECISION_ADDR: '127.0.0.1:0',
    DECISION_GRPC_ADDR: '127.0.0.1:0',
    MGMT_ADDR: '127.0.0.1:0',
    EGRESS_PROXY_ADDR: '127.0.0.1:0',
    BROKER_ADDR: '127.0.0.1:0',
    TEST_DATABASE_URL: '',
    ...extra,
  };
}

/**
 * The control plane twice on one PGlite store in a data folder of its own (removed at exit), as
 * `npm start` keeps its store, as the `/authz` benches compare them:
 * `durable` ships its audit chain to the store, `memory` keeps it in memory only. `services` are
 * applied through the durable plane and the other reloads them (rows written by one reach the
 * other's snapshot through NOTIFY). Then it answers the driver: `settle` waits until the durable
 * audit backlog has drained (so the next round, often the baseline, has the CPU to itself) and
 * answers `settled`; any other message closes `also`, both planes and the store, and exits.
 */
export async function servePlanePair(services: unknown[], also?: () => void): Promise<{ durable: number; memory: number }> {
  const { from } = codeUnderTest();
  const { openStore } = (await import(from('store/factory'))) as typeof import('../runtime/store/factory.js');
  const { startControlPlane } = (await import(from('control-plane/server'))) as typeof import('../runtime/control-plane/server.js');
  const { setLogLevel } = (await import(from('lib/log'))) as typeof import('../runtime/lib/log.js');
  setLogLevel('warn');
  const dataDir = mkdtempSync(join(tmpdir(), 'writ-bench-pglite-'));
  const store = await openStore({ backend: 'pglite', dataDir });
  const config = await configFor(from);
  const durable = await startControlPlane({ store, ...config, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
  const memory = await startControlPlane({ store, ...config, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0', durableAudit: false });
  for (const s of services) await durable.plane.registry.upsert(s);
  await memory.plane.registry.reload();
  process.on('message', async (m) => {
    if (m === 'settle') {
      await durable.plane.audit.flush(60_000);
      process.send?.('settled');
      return;
    }
    also?.();
    await memory.close();
    await durable.close();
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
    process.exit(0);
  });
  return { durable: durable.decisionPort, memory: memory.decisionPort };
}

/** The PostgreSQL the store benches also run on: TEST_DATABASE_URL, else the local default. */
export const BENCH_PG_URL = process.env.TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';

async function pgReachable(url: string): Promise<boolean> {
  const probe = postgres(url, { max: 1, connect_timeout: 3, onnotice: () => {} });
  try {
    await probe`select 1`;
    return true;
  } catch {
    return false;
  } finally {
    await probe.end({ timeout: 1 });
  }
}

/**
 * Runs `fn` on a store that `open` makes in a fresh schema (`<prefix>_<random>`) of BENCH_PG_URL,
 * then closes it and drops the schema; says the PostgreSQL rows are skipped when it is unreachable.
 */
export async function onPostgresSchema<S extends { close(): Promise<void> }>(
  prefix: string,
  open: (url: string, schema: string) => Promise<S>,
  fn: (store: S) => Promise<void>,
): Promise<void> {
  const url = BENCH_PG_URL;
  if (!(await pgReachable(url))) {
    console.log(`postgres: skipped, ${url.replace(/\/\/[^@]*@/, '//')} is unreachable (set TEST_DATABASE_URL)`);
    return;
  }
  const schema = `${prefix}_${randomBytes(4).toString('hex')}`;
  const store = await open(url, schema);
  try {
    await fn(store);
  } finally {
    await store.close();
    const admin = postgres(url, { max: 1, onnotice: () => {} });
    try {
      await admin.unsafe(`drop schema if exists "${schema}" cascade`);
    } finally {
      await admin.end();
    }
  }
}
