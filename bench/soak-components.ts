/**
 * The soak bench's cluster-shape rows for the identity authority and the broker (issue 44): each
 * started alone as the chart runs it (`node dist/runtime/<component>/main.js`, settings from the
 * environment, PostgreSQL), its RSS read from /proc while a representative load runs:
 *
 *   identity   POST /v1/agents/verify-presentation (a distinct VP per request) alternating with
 *              POST /oauth/token client_credentials (a fresh client assertion per request, the
 *              registry answered by a stand-in for the control plane's management API)
 *   broker     POST /v1/chat/completions, deciding at a real control plane process on PostgreSQL
 *              (`/authz`, budget reservation, usage report) and answered by a local fake provider
 *
 * Each row: right after start, settled idle, peak under load (and at each quarter of it), settled
 * after, beside 75 % of the chart's memory limit for the component.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID, sign, type KeyObject } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadIdentity, presentationFor, type AgentIdentity } from '../runtime/identity/client.js';
import { H } from '../runtime/lib/brand.js';
import { allocatorEnv, codeUnderTest, COMPLETION, loadAutocannon, type AutocannonResult } from './lib.js';
import { attribute, formatAttribution, formatGrowth, parseSmaps, type Attribution } from './smaps.js';

const MB = 1024 * 1024;
/**
 * BENCH_SOAK_SNAPSHOTS=<dir>: each component writes a V8 heap snapshot there (SIGUSR2,
 * `--heapsnapshot-signal`) when settled idle and again when settled after the load, to compare
 * object counts by constructor (diagnosis: the snapshots take memory and time of their own).
 */
const SNAPSHOTS = process.env.BENCH_SOAK_SNAPSHOTS
  ? { dir: process.env.BENCH_SOAK_SNAPSHOTS, env: { NODE_OPTIONS: '--heapsnapshot-signal=SIGUSR2' } }
  : { dir: undefined, env: {} };
const code = codeUnderTest();
const sleep = (s: number) => new Promise((r) => setTimeout(r, s * 1000));
const mb = (b: number) => `${(b / MB).toFixed(0)} MB`;

/** Resident set size of a process, bytes (Linux /proc; NaN elsewhere). */
export function rss(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : NaN;
  } catch {
    return NaN;
  }
}

/** `pid`'s resident memory by mapping (smaps.ts: WASM memories, V8 heaps, malloc arenas, ...); undefined without /proc. */
export function byMapping(pid: number): Attribution | undefined {
  try {
    return attribute(parseSmaps(readFileSync(`/proc/${pid}/smaps`, 'utf8')));
  } catch {
    return undefined;
  }
}

/**
 * RSS every 250 ms while `load` runs: the peak and the samples at each quarter of it (by time),
 * and the mappings at the highest sample they were read at (read again at most once a second,
 * each time RSS reaches a new high).
 */
export async function sampleDuring<T>(
  pid: number,
  load: () => Promise<T>,
): Promise<{ result: T; secs: number; peak: number; quarters: number[]; peakMappings: Attribution | undefined }> {
  const samples: { at: number; rss: number }[] = [];
  let high = 0;
  let readAt = 0;
  let peakMappings: Attribution | undefined;
  const sampler = setInterval(() => {
    const now = rss(pid);
    samples.push({ at: Date.now(), rss: now });
    if (now <= high || Date.now() - readAt < 1000) return;
    high = now;
    readAt = Date.now();
    peakMappings = byMapping(pid) ?? peakMappings;
  }, 250);
  const t0 = Date.now();
  const result = await load();
  const secs = (Date.now() - t0) / 1000;
  clearInterval(sampler);
  const peak = Math.max(...samples.map((x) => x.rss));
  const quarters = [1, 2, 3, 4].map((q) => samples.findLast((x) => x.at <= t0 + (q * secs * 1000) / 4)?.rss ?? NaN);
  return { result, secs, peak, quarters, peakMappings };
}

/** The attribution rows of a soak: each moment's shares (MB of RSS), then settled - idle per share. */
export function printMappings(moments: [string, Attribution | undefined][]): void {
  const idle = moments[0]?.[1];
  const settled = moments.at(-1)?.[1];
  if (!idle || !settled) return;
  console.log('  RSS by mapping, MB (bench/smaps.ts: wasm = WebAssembly memories, v8 = V8 heap pages of every isolate, arenas/brk = glibc malloc)');
  for (const [label, a] of moments) if (a) console.log(`    ${label.padEnd(16)}${formatAttribution(a)}`);
  console.log(`    ${`${moments.at(-1)![0]} - ${moments[0]![0]}`.padEnd(16)}${formatGrowth(idle, settled)}`);
}

interface Spawned {
  proc: ChildProcess;
  ports: Record<string, number>;
  stop(): Promise<void>;
}

/** Starts `runtime/<component>/main` as the image does (built JavaScript when there is a build) and resolves at its `up` line. */
function spawnComponent(component: string, env: Record<string, string>): Promise<Spawned> {
  const main = code.built ? [code.from(`${component}/main`)] : ['--import', 'tsx', fileURLToPath(new URL(`../runtime/${component}/main.ts`, import.meta.url))];
  const proc = spawn(process.execPath, main, {
    env: { PATH: process.env.PATH ?? '', ...allocatorEnv(), LOG_LEVEL: 'info', OTEL_SDK_DISABLED: 'true', ...SNAPSHOTS.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
    cwd: SNAPSHOTS.dir,
  });
  const lines: string[] = [];
  const stop = async () => {
    if (proc.exitCode !== null) return;
    const done = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    const t = setTimeout(() => proc.kill('SIGKILL'), 20_000);
    await done;
    clearTimeout(t);
  };
  return new Promise((resolve, reject) => {
    let buf = '';
    proc.stderr!.on('data', (d: Buffer) => {
      buf += d.toString('utf8');
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (lines.length < 200) lines.push(line);
        if (!line.includes('"msg":"up"')) continue;
        const ports = Object.fromEntries(
          Object.entries(JSON.parse(line) as Record<string, unknown>).filter((e): e is [string, number] => typeof e[1] === 'number'),
        );
        resolve({ proc, ports, stop });
      }
    });
    proc.once('exit', (c) => reject(new Error(`${component} exited with ${c}:\n${lines.join('\n')}`)));
  });
}

/** A node:http server on loopback answering every request with `answer`; resolves with its port. */
async function serveLocal(answer: http.RequestListener): Promise<{ port: number; close(): void }> {
  const s = http.createServer({ keepAliveTimeout: 65_000 }, answer);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return { port: (s.address() as { port: number }).port, close: () => s.close() };
}

interface Row {
  label: string;
  limitMb: number;
  settleS: number;
}

/** With BENCH_SOAK_SNAPSHOTS, a heap snapshot of `pid` (written once its size stops changing). */
async function snapshot(pid: number): Promise<void> {
  if (!SNAPSHOTS.dir) return;
  const before = new Set(readdirSync(SNAPSHOTS.dir));
  process.kill(pid, 'SIGUSR2');
  let size = -1;
  for (;;) {
    await sleep(2);
    const f = readdirSync(SNAPSHOTS.dir).find((x) => x.endsWith('.heapsnapshot') && !before.has(x));
    const now = f ? statSync(join(SNAPSHOTS.dir, f)).size : -1;
    if (f && now === size) return console.log(`  heap snapshot ${join(SNAPSHOTS.dir, f)}`);
    size = now;
  }
}

/** Idle, peak, end and settled RSS of `pid` around `load`, printed as one row. */
async function measure(pid: number, row: Row, load: () => Promise<AutocannonResult>, what: string): Promise<void> {
  const start = rss(pid);
  await sleep(row.settleS);
  const idle = rss(pid);
  const idleMappings = byMapping(pid);
  await snapshot(pid);
  const { result: r, secs, peak, quarters, peakMappings } = await sampleDuring(pid, load);
  const end = rss(pid);
  await sleep(row.settleS);
  const settled = rss(pid);
  const settledMappings = byMapping(pid);
  await snapshot(pid);
  const cap = 0.75 * row.limitMb * MB;
  console.log(
    `${row.label}: ${r.requests.total.toLocaleString('en-US')} ${what} in ${secs.toFixed(0)} s (${(r.requests.total / secs).toFixed(0)}/s, ${r.errors} errors, ${r.non2xx} non-2xx)`,
  );
  console.log(`  right after start ${mb(start)}, idle ${mb(idle)}`);
  console.log(
    `  peak under load ${mb(peak)} (target < 75% of the chart's ${row.limitMb} MB limit, ${(cap / MB).toFixed(0)} MB: ${peak < cap ? 'met' : 'MISSED'}); at 1/4, 1/2, 3/4 and all of the load ${quarters.map(mb).join(', ')}`,
  );
  console.log(`  at the end of the load ${mb(end)}, settled ${mb(settled)}  settled - idle ${((settled - idle) / MB).toFixed(1)} MB`);
  printMappings([
    ['idle', idleMappings],
    ['peak', peakMappings],
    ['settled', settledMappings],
  ]);
}

/** The identity authority alone on PostgreSQL (`dbUrl`, a fresh database) under verify-presentation and client_credentials. */
export async function soakIdentity(dbUrl: string, requests: number, row: Row): Promise<void> {
  // The control plane's management API as the token endpoint reads it (IDP_REGISTRY_URL): the agent and its one tool.
  const entries: Record<string, unknown> = {
    bot: { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowTools: ['search'] },
    search: { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' },
  };
  const registry = await serveLocal((req, res) => {
    const e = entries[decodeURIComponent((req.url ?? '').split('/').pop() ?? '')];
    res.writeHead(e ? 200 : 404, { 'content-type': 'application/json' }).end(JSON.stringify(e ?? { error: 'not found' }));
  });
  const idp = await spawnComponent('identity', {
    IDP_STORE_BACKEND: 'postgres',
    IDP_DB_URL: dbUrl,
    IDP_ISSUER_HOST: 'idp.bench.test',
    IDP_REGISTRY_URL: `http://127.0.0.1:${registry.port}`,
    PORT: '0',
  });
  try {
    const url = `http://127.0.0.1:${idp.ports.identity}`;
    const json = (body?: unknown) => ({
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const made = await fetch(`${url}/v1/agents`, json({ name: 'bot', role: 'worker', capabilities: [] }));
    if (!made.ok) throw new Error(`register: ${made.status} ${await made.text()}`);
    const bot = loadIdentity((await (await fetch(`${url}/v1/agents/bot/provision`, { method: 'POST' })).json()) as AgentIdentity);
    // A distinct VP per request (pre-minted), and a client assertion signed as each request goes
    // out (an assertion may live 300 s at most, the load runs longer).
    const half = Math.ceil(requests / 2);
    const vps: string[] = [];
    for (let i = 0; i <= half; i++) {
      vps.push(JSON.stringify({ vp: await presentationFor(bot, { ttlSeconds: 3600 }) }));
    }
    // One of each first: the load counts only what the authority accepts.
    for (const [path, type, body] of [
      ['/v1/agents/verify-presentation', 'application/json', vps.pop()!],
      ['/oauth/token', 'application/x-www-form-urlencoded', clientCredentials(bot.key)],
    ] as const) {
      const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': type }, body });
      const text = await r.text();
      if (!r.ok || text.includes('"ok":false')) throw new Error(`${path} refused the bench's request: ${r.status} ${text}`);
    }
    let v = 0;
    const autocannon = await loadAutocannon();
    await measure(
      idp.proc.pid!,
      row,
      () =>
        autocannon({
          url,
          connections: 16,
          amount: 2 * half,
          requests: [
            {
              method: 'POST',
              path: '/v1/agents/verify-presentation',
              headers: { 'content-type': 'application/json' },
              setupRequest: (r: object) => ({ ...r, body: vps[v++ % half] }),
            },
            {
              method: 'POST',
              path: '/oauth/token',
              headers: { 'content-type': 'application/x-www-form-urlencoded' },
              setupRequest: (r: object) => ({ ...r, body: clientCredentials(bot.key) }),
            },
          ],
        }),
      'requests (verify-presentation and client_credentials alternating)',
    );
  } finally {
    await idp.stop();
    registry.close();
  }
}

const JWT_BEARER = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';
const b64 = (x: unknown) => Buffer.from(JSON.stringify(x)).toString('base64url');

/** A client_credentials form for agent `bot` and tool `search`, its client assertion (RFC 7523) signed now, synchronously. */
function clientCredentials(key: KeyObject): string {
  const now = Math.floor(Date.now() / 1000);
  const input = `${b64({ alg: 'EdDSA' })}.${b64({ iss: 'bot', sub: 'bot', aud: 'https://idp.bench.test', jti: randomUUID(), iat: now, exp: now + 60 })}`;
  const assertion = `${input}.${sign(null, Buffer.from(input), key).toString('base64url')}`;
  return new URLSearchParams({
    grant_type: 'client_credentials',
    client_assertion_type: JWT_BEARER,
    client_assertion: assertion,
    audience: 'search',
  }).toString();
}

/** The broker alone, deciding at a control plane process on PostgreSQL (`dbUrl`), answered by a local fake provider. */
export async function soakBroker(dbUrl: string, requests: number, row: Row): Promise<void> {
  const provider = await serveLocal((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(COMPLETION));
  });
  const dir = mkdtempSync(join(tmpdir(), 'writ-soak-broker-'));
  const models = join(dir, 'models.yaml');
  writeFileSync(
    models,
    `models:\n  - name: gpt-mini\n    model: provider-mini\n    apiBase: http://127.0.0.1:${provider.port}/v1\n    priceInputPer1k: 0.00015\n    priceOutputPer1k: 0.0006\n    maxOutputTokens: 256\n`,
  );
  const any = '127.0.0.1:0';
  const cp = await spawnComponent('control-plane', {
    REGISTRY_DB_URL: dbUrl,
    AUDIT_SPOOL_DIR: 'none',
    DECISION_ADDR: any,
    DECISION_GRPC_ADDR: any,
    MGMT_ADDR: any,
  });
  let broker: Spawned | undefined;
  try {
    for (const svc of [
      { name: 'gpt-mini', upstream: 'broker.writ.svc:8080', kind: 'model' },
      { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowModels: ['gpt-mini'], budget: { callsPerHour: 1e12, tokensPerHour: 1e15 } },
    ]) {
      const r = await fetch(`http://127.0.0.1:${cp.ports.mgmt}/v1/registry/services`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(svc),
      });
      if (r.status >= 300) throw new Error(`registry: ${r.status} ${await r.text()}`);
    }
    broker = await spawnComponent('broker', {
      BROKER_ADDR: any,
      BROKER_CONFIG: models,
      BROKER_PROVIDER_KEY: 'sk-soak',
      BROKER_AUTHZ_URL: `http://127.0.0.1:${cp.ports.decision}/authz`,
      BROKER_USAGE_URL: `http://127.0.0.1:${cp.ports.mgmt}/v1/usage`,
    });
    const body = JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 64 });
    const autocannon = await loadAutocannon();
    const port = broker.ports.broker;
    await measure(
      broker.proc.pid!,
      row,
      () =>
        autocannon({
          url: `http://127.0.0.1:${port}/v1/chat/completions`,
          connections: 16,
          amount: requests,
          method: 'POST',
          headers: { 'content-type': 'application/json', [H.actor]: 'bot' },
          body,
        }),
      'chat completions (non-streamed)',
    );
    console.log(`  the control plane behind it (its own process): ${mb(rss(cp.proc.pid!))} once the broker settled`);
  } finally {
    await broker?.stop();
    await cp.stop();
    provider.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
