/**
 * The proxy bench's contenders and load generators (proxy.bench.ts drives them): squid from a
 * generated allow-all config, plain-HTTP load through a proxy (autocannon, with the proxy
 * process's CPU per request), TLS requests over long-lived CONNECT tunnels, tunnel setup, and
 * the interleaved rounds that compare them.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { loadAutocannon } from './lib.js';

export const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
export const WARMUP = Number(process.env.BENCH_WARMUP ?? 1);
export const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
/** Plain-HTTP rounds (squid and Writ interleaved). */
export const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

export interface UpstreamPorts {
  http: number;
  tls: number;
  certFile: string;
}

export async function startSquid(): Promise<{ port: number; pid: number | undefined; stop(): Promise<void> } | undefined> {
  const bin = ['/usr/sbin/squid', '/usr/bin/squid'].find((p) => spawnSync(p, ['-v']).status === 0);
  if (!bin) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'writ-bench-squid-'));
  chmodSync(dir, 0o777); // squid drops to its own user for the cache log
  const port = await new Promise<number>((r) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => r(p));
    });
  });
  writeFileSync(
    join(dir, 'squid.conf'),
    [
      `http_port 127.0.0.1:${port}`,
      'http_access allow all',
      'cache deny all',
      'cache_mem 0 MB',
      'access_log none',
      'cache_store_log none',
      `cache_log ${join(dir, 'cache.log')}`,
      `pid_filename ${join(dir, 'squid.pid')}`,
      `coredump_dir ${dir}`,
      'pinger_enable off',
      'logfile_rotate 0',
      'shutdown_lifetime 0 seconds',
      'workers 1',
      '',
    ].join('\n'),
  );
  const proc = spawn(bin, ['-N', '-f', join(dir, 'squid.conf')], { stdio: 'ignore' });
  const until = Date.now() + 15_000;
  for (;;) {
    const ok = await new Promise<boolean>((r) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        r(true);
      });
      s.on('error', () => r(false));
    });
    if (ok) break;
    if (proc.exitCode !== null || Date.now() > until) {
      const log = (() => {
        try {
          return readFileSync(join(dir, 'cache.log'), 'utf8').slice(-800);
        } catch {
          return '';
        }
      })();
      proc.kill('SIGKILL');
      throw new Error(`squid did not start: ${log}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    port,
    pid: proc.pid,
    async stop() {
      const done = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGKILL');
      await done;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface PlainRun {
  rps: number;
  p50: number;
  p99: number;
  /** CPU time (user + system) the proxy process spent per request, microseconds; NaN if unknown. */
  cpuUs: number;
}

/** User + system CPU time of a process so far, microseconds (Linux /proc; NaN elsewhere). */
function cpuTimeUs(pid: number | undefined): number {
  if (pid === undefined) return NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields 14 and 15 (utime, stime) in clock ticks; after the comm field they are at 11 and 12.
    return ((Number(f[11]) + Number(f[12])) * 1e6) / CLOCK_TICKS;
  } catch {
    return NaN;
  }
}
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK']).stdout?.toString().trim()) || 100;

/**
 * Plain-HTTP load. With `freshVps`, every request carries the next VP of the pool in
 * Proxy-Authorization, as the sidecar sends a freshly minted VP per request: each one is a VP
 * cache miss and a verification at the identity authority.
 */
export function plainHttpLoad(
  proxyPort: number,
  upstream: number,
  headers: Record<string, string>,
  pid: number | undefined,
  freshVps?: string[],
): (seconds: number) => Promise<PlainRun> {
  let next = 0;
  const request: Record<string, unknown> = { method: 'GET', path: `http://127.0.0.1:${upstream}/item`, headers: { host: `127.0.0.1:${upstream}`, ...headers } };
  if (freshVps) {
    request.setupRequest = (req: { headers: Record<string, string> }) => {
      req.headers = { ...req.headers, 'proxy-authorization': `Bearer ${freshVps[next++ % freshVps.length]}` };
      return req;
    };
  }
  const opts = {
    url: `http://127.0.0.1:${proxyPort}`,
    connections: CONNECTIONS,
    pipelining: 1,
    requests: [request],
  };
  return async (seconds) => {
    const autocannon = await loadAutocannon();
    const cpu0 = cpuTimeUs(pid);
    const r = await autocannon({ ...opts, duration: seconds });
    const cpu = cpuTimeUs(pid) - cpu0;
    if (r.errors || r.non2xx) throw new Error(`plain HTTP: ${r.errors} errors, ${r.non2xx} non-2xx responses`);
    return { rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, cpuUs: cpu / Math.max(1, r.requests.total) };
  };
}

export const median = (xs: number[]): number => {
  const v = [...xs].sort((x, y) => x - y);
  return v.length % 2 ? v[(v.length - 1) / 2]! : (v[v.length / 2 - 1]! + v[v.length / 2]!) / 2;
};

/**
 * Plain HTTP, squid and Writ (and a base build of Writ, when given) interleaved: ROUNDS rounds of
 * SECONDS each, the order rotating every round, so load from other processes on the machine and
 * drift hit all alike. Ratios are medians of the per-round ratios; req/s are the medians.
 */
export async function plainHttp(
  squid: (s: number) => Promise<PlainRun>,
  writ: (s: number) => Promise<PlainRun>,
  base?: (s: number) => Promise<PlainRun>,
): Promise<Contest> {
  const loads = base ? [squid, writ, base] : [squid, writ];
  for (const load of loads) await load(WARMUP);
  const runs: PlainRun[][] = loads.map(() => []);
  for (let i = 0; i < ROUNDS; i++) {
    for (let k = 0; k < loads.length; k++) {
      const j = (k + i) % loads.length;
      runs[j]!.push(await loads[j]!(SECONDS));
    }
  }
  const pick = (rs: PlainRun[]): PlainRun => ({
    rps: median(rs.map((r) => r.rps)),
    p50: median(rs.map((r) => r.p50)),
    p99: median(rs.map((r) => r.p99)),
    cpuUs: median(rs.map((r) => r.cpuUs)),
  });
  const [sr, wr, br] = runs as [PlainRun[], PlainRun[], PlainRun[] | undefined];
  const ratios = sr.map((r, i) => wr[i]!.rps / r.rps);
  const rounds = sr.map((r, i) => ({ squid: r.rps, writ: wr[i]!.rps }));
  const out: Contest = { squid: pick(sr), writ: pick(wr), ratio: median(ratios), ratios, rounds };
  if (br) {
    const baseRatios = sr.map((r, i) => br[i]!.rps / r.rps);
    out.base = {
      run: pick(br),
      ratio: median(baseRatios),
      ratios: baseRatios,
      rounds: sr.map((r, i) => ({ squid: r.rps, writ: br[i]!.rps })),
      thisVsBase: median(wr.map((r, i) => r.rps / br[i]!.rps)),
    };
  }
  return out;
}

export interface Contest {
  squid: PlainRun;
  writ: PlainRun;
  ratio: number;
  ratios: number[];
  /** Each contender's own req/s per round, in order: tells Writ slowing down from squid warming up. */
  rounds: Round[];
  /** The base build's figures (BENCH_BASE_DIST), and this build's req/s over the base's per round. */
  base?: { run: PlainRun; ratio: number; ratios: number[]; rounds: Round[]; thisVsBase: number };
}

/** One round's req/s of each contender (`writ`: the Writ build the row is about). */
export interface Round {
  squid: number;
  writ: number;
}

/** ROUNDS runs of each, the order alternating; per-round ratios and their median. */
export async function interleaved(
  squid: () => Promise<{ rps: number }>,
  writ: () => Promise<{ rps: number }>,
): Promise<{ squid: number; writ: number; ratio: number; ratios: number[]; rounds: Round[] }> {
  const sr: number[] = [];
  const wr: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    if (i % 2 === 0) {
      sr.push((await squid()).rps);
      wr.push((await writ()).rps);
    } else {
      wr.push((await writ()).rps);
      sr.push((await squid()).rps);
    }
  }
  const ratios = sr.map((r, i) => wr[i]! / r);
  return { squid: median(sr), writ: median(wr), ratio: median(ratios), ratios, rounds: sr.map((r, i) => ({ squid: r, writ: wr[i]! })) };
}

/** Proxy-process CPU per request: robust to load from other processes, unlike req/s. */
export const cpuNote = (p: { squid: PlainRun; writ: PlainRun }) =>
  `CPU/request squid ${p.squid.cpuUs.toFixed(0)} us, writ ${p.writ.cpuUs.toFixed(0)} us (efficiency ${(p.squid.cpuUs / p.writ.cpuUs).toFixed(2)}x)`;

/** The median's rounds, each with both contenders' own req/s: `[squid 5210 writ 4870 0.93x; ...]`. */
export const roundsNote = (rounds: Round[]) =>
  `median of ${rounds.length} interleaved rounds [${rounds.map((r) => `squid ${r.squid.toFixed(0)} writ ${r.writ.toFixed(0)} ${(r.writ / r.squid).toFixed(2)}x`).join('; ')}]`;

/** Opens a CONNECT tunnel; resolves with the raw socket once the proxy answers 200. */
function tunnel(proxyPort: number, target: string, auth: string | undefined): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(proxyPort, '127.0.0.1', () => {
      s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${auth ? `Proxy-Authorization: ${auth}\r\n` : ''}\r\n`);
    });
    let buf = '';
    const onData = (c: Buffer) => {
      buf += c.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      if (end === -1) return;
      s.off('data', onData);
      if (!/^HTTP\/1\.[01] 200/.test(buf)) {
        s.destroy();
        return reject(new Error(`CONNECT refused: ${buf.split('\r\n')[0]}`));
      }
      resolve(s);
    };
    s.on('data', onData);
    s.once('error', reject);
  });
}

/** TLS requests over CONNECT_TUNNELS long-lived tunnels (one HTTP/1.1 keep-alive stream each). */
export async function connectRequests(proxyPort: number, up: UpstreamPorts, auth: string | undefined): Promise<{ rps: number }> {
  const ca = readFileSync(up.certFile);
  const target = `127.0.0.1:${up.tls}`;
  const agents: https.Agent[] = [];
  for (let i = 0; i < CONNECTIONS; i++) {
    const raw = await tunnel(proxyPort, target, auth);
    const socket = tls.connect({ socket: raw, ca, servername: 'localhost' });
    await new Promise<void>((r, j) => {
      socket.once('secureConnect', () => r());
      socket.once('error', j);
    });
    // One agent per tunnel, holding exactly that TLS socket.
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    (agent as unknown as { createConnection: () => tls.TLSSocket }).createConnection = () => socket;
    agents.push(agent);
  }
  const one = (agent: https.Agent) =>
    new Promise<void>((resolve, reject) => {
      const req = https.request({ host: '127.0.0.1', port: up.tls, path: '/item', agent, ca, servername: 'localhost' }, (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
      });
      req.on('error', reject);
      req.end();
    });
  const loop = async (agent: https.Agent, until: number, count: { n: number }) => {
    while (Date.now() < until) {
      await one(agent);
      count.n++;
    }
  };
  const warm = { n: 0 };
  await Promise.all(agents.map((a) => loop(a, Date.now() + WARMUP * 1000, warm)));
  const count = { n: 0 };
  const t0 = Date.now();
  await Promise.all(agents.map((a) => loop(a, t0 + SECONDS * 1000, count)));
  const secs = (Date.now() - t0) / 1000;
  for (const a of agents) a.destroy();
  return { rps: count.n / secs };
}

/** Tunnels opened and closed per second (CONNECT, 200, close), CONNECTIONS at a time. */
export async function tunnelSetup(proxyPort: number, target: string, auth: string | undefined): Promise<{ rps: number }> {
  const loop = async (until: number, count: { n: number }) => {
    while (Date.now() < until) {
      const s = await tunnel(proxyPort, target, auth);
      await new Promise<void>((r) => {
        s.once('close', () => r());
        s.destroy();
      });
      count.n++;
    }
  };
  const par = Math.min(CONNECTIONS, 16);
  await Promise.all(Array.from({ length: par }, () => loop(Date.now() + WARMUP * 1000, { n: 0 })));
  const count = { n: 0 };
  const t0 = Date.now();
  await Promise.all(Array.from({ length: par }, () => loop(t0 + SECONDS * 1000, count)));
  return { rps: count.n / ((Date.now() - t0) / 1000) };
}
