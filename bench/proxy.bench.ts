/**
 * Forward-proxy throughput, Writ against squid measured in the same run, same upstreams, same
 * load generator:
 *
 *   plain HTTP   autocannon sends absolute-URI requests through the proxy (keep-alive)
 *   CONNECT      N tunnels are opened once; undici clients run TLS requests over them
 *   tunnel setup CONNECT + "200 Connection Established" + close, back to back
 *
 * Processes: this one drives the load; `--upstream` serves the HTTP and TLS upstreams; `--writ`
 * runs the real control plane + egress gateway on PGlite in a temporary data folder, as `npm
 * start` keeps it. Writ does the whole decision per request (and per tunnel): VP verification
 * through the production identity client (identity-client.ts, AGENT_IDP_URL) and its VP cache,
 * against an identity authority in the same process that answers in process as `npm start` has
 * it (the `fresh VP, verify HTTP` row: over its loopback listener, as a cluster's separate
 * control plane does), registry match, egressAllow, budget, audit append, metrics. The main rows
 * keep the audit chain in memory; the `audit->PGlite` rows ship it to the store as `npm start`
 * does. squid (Debian package) runs from a generated allow-all config in a temp dir: no cache, no
 * access log, one worker.
 *
 *   npx tsx bench/proxy.bench.ts    (BENCH_SECONDS=5 BENCH_WARMUP=1 BENCH_CONNECTIONS=32 BENCH_ROUNDS=3)
 *
 * Every row runs squid and Writ in interleaved rounds (median ratio): the machine is shared. The
 * contenders and the load generators are in proxy-load.ts.
 * BENCH_ONLY=plain (or fresh) runs only that row; BENCH_PROFILE=<dir> writes CPU profiles of Writ there.
 *
 * Targets: plain HTTP >= 1.0x squid, CONNECT >= 0.8x squid; with a fresh VP per request (as the
 * sidecar sends) >= 0.5x squid.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { codeUnderTest, configFor } from './lib.js';
import {
  CONNECTIONS,
  ROUNDS,
  SECONDS,
  WARMUP,
  connectRequests,
  cpuNote,
  interleaved,
  plainHttp,
  plainHttpLoad,
  roundsNote,
  startSquid,
  tunnelSetup,
  type PlainRun,
  type UpstreamPorts,
} from './proxy-load.js';

/** PostgreSQL for the production-like audit row (skipped when unset). */
const PG_URL = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
/** BENCH_ONLY=plain or fresh: only that plain-HTTP row, cached or fresh VP (profiling). */
const ONLY = process.env.BENCH_ONLY;
const BODY = Buffer.alloc(256, 'w');
const self = fileURLToPath(import.meta.url);
/**
 * The Writ process runs the code `codeUnderTest` names (this tree's dist/ when built, BENCH_DIST,
 * or the source under tsx). BENCH_BASE_DIST=<another build's dist/runtime/> adds that build as a
 * third contender to the plain-HTTP rows, interleaved with this one and squid in the same rounds
 * (finer than `npm run bench:compare`, which alternates whole bench runs).
 */
const code = codeUnderTest();
const BASE_DIST = process.env.BENCH_BASE_DIST || undefined;

async function serveUpstreams(): Promise<void> {
  const { selfSignedCert } = await import('../runtime/control-plane/proxy/testkit.js');
  const cert = selfSignedCert();
  const handler: http.RequestListener = (req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': BODY.length });
      res.end(BODY);
    });
  };
  const plain = http.createServer({ keepAliveTimeout: 65_000 }, handler);
  const secure = https.createServer({ key: cert.key, cert: cert.cert, keepAliveTimeout: 65_000 }, handler);
  const listen = (s: net.Server) => new Promise<number>((r) => s.listen(0, '127.0.0.1', () => r((s.address() as net.AddressInfo).port)));
  process.send?.({ http: await listen(plain), tls: await listen(secure), certFile: cert.certFile } satisfies UpstreamPorts);
  process.on('message', () => process.exit(0));
}

async function serveWrit(): Promise<void> {
  const up = JSON.parse(process.argv[3] ?? '{}') as UpstreamPorts;
  // memory: audit chain in memory; durable: shipped to the store (PGlite in a data folder); postgres:
  // shipped to PostgreSQL (BENCH_DATABASE_URL or TEST_DATABASE_URL, a schema of its own, dropped after).
  // A `:http` suffix verifies presentations over HTTP (a control plane of its own, as in a cluster)
  // instead of in process (the all-in-one, `npm start`).
  const [mode = 'memory', verify] = (process.argv[4] ?? 'memory').split(':');
  // The build this process runs: a base build to compare with (argv[5]), or the code under test.
  const { from } = process.argv[5] ? codeUnderTest(process.argv[5]) : code;
  const durable = mode !== 'memory';
  const pgSchema = `bench_proxy_${process.pid}`;
  const { openStore, rowsOf } = (await import(from('store/factory'))) as typeof import('../runtime/store/factory.js');
  const { setLogLevel } = (await import(from('lib/log'))) as typeof import('../runtime/lib/log.js');
  const { startIdentityAuthority } = (await import(from('identity/server'))) as typeof import('../runtime/identity/server.js');
  const { startControlPlaneWithEgress } = (await import(from('control-plane/egress-gateway'))) as typeof import('../runtime/control-plane/egress-gateway.js');
  // A test helper (not built): it drives the authority through its app, whichever build that is.
  const { provisionAgent } = await import('../runtime/control-plane/proxy/testkit.js');
  setLogLevel('warn');
  const dataDir = mode === 'postgres' ? undefined : mkdtempSync(join(tmpdir(), 'writ-bench-pglite-'));
  const store = dataDir
    ? await openStore({ backend: 'pglite', dataDir })
    : await openStore({ backend: 'postgres', url: PG_URL, schema: pgSchema, poolSize: 4 });
  // As `npm start` runs it: the identity authority on its own listener, the control plane reaching
  // it through AGENT_IDP_URL with the real HTTP client and its VP cache, presentations verified in
  // process (main.ts); with `:http` (or a build without identity/in-process) over HTTP too.
  const idp = await startIdentityAuthority({ store, ...(await configFor(from, { IDP_ISSUER_HOST: 'idp.bench' })), addr: '127.0.0.1:0' });
  const authority = idp.authority;
  const { vp, identity } = await provisionAgent(authority, 'bot');
  // A build from before in-process identity calls has no identity/in-process: it verifies over HTTP.
  const inProcess = (await import(from('identity/in-process')).catch(() => ({}))) as Partial<typeof import('../runtime/identity/in-process.js')>;
  const run = await startControlPlaneWithEgress({
    store,
    ...(await configFor(from, { AGENT_IDP_URL: `http://127.0.0.1:${idp.port}` })),
    ...(verify !== 'http' && inProcess.inProcessIdentity ? { localIdentity: inProcess.inProcessIdentity(authority) } : {}),
    decisionAddr: '127.0.0.1:0',
    mgmtAddr: '127.0.0.1:0',
    proxyAddr: '127.0.0.1:0',
    durableAudit: durable,
  });
  const reg = run.cp.plane.registry;
  await reg.upsert({ name: 'up', upstream: `127.0.0.1:${up.http}`, kind: 'service' });
  await reg.upsert({ name: 'tls', upstream: `127.0.0.1:${up.tls}`, kind: 'service' });
  await reg.upsert({ name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', egressAllow: ['up', 'tls'] });
  process.send?.({ port: run.gateway.port, vp, identity });
  process.on('message', async () => {
    const stats = run.cp.plane.audit.stats();
    process.stderr.write(`writ (audit: ${mode}): ${stats.lastSeq} audit records appended, ${stats.shippedSeq} shipped\n`);
    await run.close();
    await idp.close();
    if (mode === 'postgres') {
      const { sql } = await import('drizzle-orm');
      await rowsOf(store.db, sql.raw(`drop schema if exists ${pgSchema} cascade`)).catch(() => {});
    }
    await store.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    process.exit(0);
  });
}

function child<T>(args: string[]): Promise<{ proc: ChildProcess; msg: T }> {
  // BENCH_PROFILE=<dir>: the Writ processes write a V8 CPU profile there (node --cpu-prof).
  const prof = args[0] === '--writ' && process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_PROFILE] : [];
  const proc = fork(self, args, { execArgv: ['--import', 'tsx', ...prof], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    proc.once('message', (m) => resolve({ proc, msg: m as T }));
    proc.once('exit', (c) => reject(new Error(`${args[0]} exited with ${c}`)));
  });
}

async function stop(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null) return;
  const done = new Promise((r) => proc.once('exit', r));
  proc.send('stop');
  await done;
}

type WritChild = Awaited<ReturnType<typeof child<{ port: number; vp: string; identity: unknown }>>>;

/** One Writ process per build compared: this one and, with BENCH_BASE_DIST, the base. */
interface Pair {
  this: WritChild;
  base?: WritChild;
}

async function drive(): Promise<void> {
  const squid = await startSquid().catch((e: unknown) => {
    console.log(`proxy bench: squid failed to start (${String(e)}); skipping`);
    return null;
  });
  if (squid === undefined) {
    console.log('proxy bench: SKIPPED, squid is not installed (apt-get install -y squid); the ratio needs squid as its baseline');
    return;
  }
  if (squid === null) return;
  const upstream = await child<UpstreamPorts>(['--upstream']);
  const up = upstream.msg;
  const start = async (mode: string): Promise<Pair> => ({
    this: await child(['--writ', JSON.stringify(up), mode]),
    base: BASE_DIST ? await child(['--writ', JSON.stringify(up), mode, BASE_DIST]) : undefined,
  });
  const stopPair = async (p: Pair | undefined) => {
    if (p) await Promise.all([stop(p.this.proc), p.base && stop(p.base.proc)]);
  };
  const rows: { name: string; squid: number; writ: number; target: number; ratio?: number; extra?: string }[] = [];
  const squidLoad = plainHttpLoad(squid.port, up.http, {}, squid.pid);
  // Fresh VP per request (the sidecar's way): pre-minted, each used once while the pool lasts.
  // Past its end the pool starts over; it holds more VPs than the control plane's VP cache
  // (10,000, oldest evicted first), so a VP met again has always left the cache: a miss, verified.
  const { presentationFor } = await import('../runtime/identity/client.js');
  const pool = async (identity: unknown) => {
    const n = Math.max(12_000, Math.ceil(SECONDS * (ROUNDS + 1) * 1500));
    const out: string[] = [];
    for (let i = 0; i < n; i++) out.push(await presentationFor(identity as never, { ttlSeconds: 3600 }));
    return out;
  };
  const cached = (w: WritChild) => plainHttpLoad(w.msg.port, up.http, { 'proxy-authorization': `Bearer ${w.msg.vp}` }, w.proc.pid);
  const fresh = async (w: WritChild) => plainHttpLoad(w.msg.port, up.http, {}, w.proc.pid, await pool(w.msg.identity));
  /** A plain-HTTP row (and its base row): squid, this build and the base interleaved. */
  const contest = async (
    name: string,
    target: number,
    pair: Pair,
    load: (w: WritChild) => Promise<(s: number) => Promise<PlainRun>> | ((s: number) => Promise<PlainRun>),
  ) => {
    const c = await plainHttp(squidLoad, await load(pair.this), pair.base && (await load(pair.base)));
    const extra = `${roundsNote(c.rounds)}; p99 squid ${c.squid.p99} ms, writ ${c.writ.p99} ms; ${cpuNote(c)}`;
    rows.push({ name, squid: c.squid.rps, writ: c.writ.rps, ratio: c.ratio, target, extra });
    if (c.base) {
      const b = c.base;
      const cpu = `CPU/request base ${b.run.cpuUs.toFixed(0)} us vs this ${c.writ.cpuUs.toFixed(0)} us`;
      const extraB = `${roundsNote(b.rounds)}; this/base ${b.thisVsBase.toFixed(2)}x req/s; ${cpu}`;
      rows.push({ name: `  base build`, squid: c.squid.rps, writ: b.run.rps, ratio: b.ratio, target: 0, extra: extraB });
    }
  };
  let pair: Pair | undefined = await start('memory');
  try {
    if (ONLY !== 'fresh') await contest('plain HTTP req/s', 1.0, pair, cached);
    if (ONLY !== 'plain') await contest('plain, fresh VP', 0.5, pair, fresh);
    if (!ONLY) {
      // A cluster's control plane asks its identity authority over the network: the same row with
      // verification over (loopback) HTTP.
      const split = await start('memory:http');
      try {
        await contest('fresh VP, verify HTTP', 0, split, fresh);
      } finally {
        await stopPair(split);
      }
      const w = pair.this;
      const auth = `Bearer ${w.msg.vp}`;
      const conn = await interleaved(
        () => connectRequests(squid.port, up, undefined),
        () => connectRequests(w.msg.port, up, auth),
      );
      rows.push({ name: 'CONNECT TLS req/s', squid: conn.squid, writ: conn.writ, ratio: conn.ratio, target: 0.8, extra: roundsNote(conn.rounds) });
      const setup = await interleaved(
        () => tunnelSetup(squid.port, `127.0.0.1:${up.tls}`, undefined),
        () => tunnelSetup(w.msg.port, `127.0.0.1:${up.tls}`, auth),
      );
      rows.push({ name: 'tunnel setups/s', squid: setup.squid, writ: setup.writ, ratio: setup.ratio, target: 0, extra: roundsNote(setup.rounds) });
      // The default composition ships every audit record to the store (in-process PGlite for
      // npm start): shown separately, and with a fresh VP per request as a sidecar sends.
      await stopPair(pair);
      pair = await start('durable');
      await contest('plain, audit->PGlite', 0, pair, cached);
      await contest('fresh VP, audit->PGlite', 0, pair, fresh);
      if (PG_URL) {
        // Production's sink: the audit chain shipped to PostgreSQL (another process).
        await stopPair(pair);
        pair = await start('postgres');
        await contest('plain, audit->PG', 0, pair, cached);
      }
    }
    console.log(
      `proxy bench: ${CONNECTIONS} connections, ${SECONDS} s per run after ${WARMUP} s warm-up, ${code.label}` +
        (BASE_DIST ? `, base build ${BASE_DIST} interleaved` : '') +
        '; writ runs the full decision on every request and tunnel ' +
        '(VP verify through the identity client and its VP cache, in process as npm start does unless noted, registry, egressAllow, budget, hash-chained audit, metrics); audit in memory unless noted' +
        (PG_URL ? '' : '; set TEST_DATABASE_URL for the audit->PostgreSQL row'),
    );
    for (const r of rows) {
      const ratio = r.ratio ?? r.writ / r.squid;
      const verdict = r.target ? (ratio >= r.target ? `target >= ${r.target.toFixed(1)}x met` : `target >= ${r.target.toFixed(1)}x MISSED`) : 'no target';
      console.log(
        `${r.name.padEnd(24)} squid ${r.squid.toFixed(0).padStart(7)}  writ ${r.writ.toFixed(0).padStart(7)}  ratio ${ratio.toFixed(2)}x  (${verdict})${r.extra ? `  ${r.extra}` : ''}`,
      );
    }
  } finally {
    await stopPair(pair);
    await stop(upstream.proc);
    await squid.stop();
  }
}

if (process.argv[2] === '--upstream') await serveUpstreams();
else if (process.argv[2] === '--writ') await serveWrit();
else await drive();
