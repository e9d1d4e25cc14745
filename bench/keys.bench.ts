/**
 * API-key verification throughput, as ratios of raw HMAC-SHA-256 computations per second
 * measured in the same run:
 * - in-process: `keyService().verify` (the function POST /v1/keys/verify calls: parse, the key's
 *   row from the in-memory cache kept current by the identity change feed, HMAC-SHA-256,
 *   timingSafeEqual, throttled last_used_at), on in-memory PGlite always and on PostgreSQL
 *   (TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test) when reachable.
 *   Target >= 0.25x. The uncached path (every verify reads the store) is shown beside it.
 * - over HTTP: POST /v1/keys/verify on a real identity authority (child process, PGlite),
 *   autocannon from this process, beside bare node:http answering the same POSTs.
 *
 *   npx tsx bench/keys.bench.ts      (BENCH_SECONDS=3 per figure, BENCH_CONCURRENCY=8,
 *                                     BENCH_HTTP_SECONDS=5 BENCH_CONNECTIONS=50)
 */
import { fork } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parseKey, pepperFromEnv, secretMatches } from '../runtime/identity/enterprise/keys/secret.js';
import { keyService } from '../runtime/identity/enterprise/keys/service.js';
import { createChangeFeed } from '../runtime/identity/change-feed.js';
import { bareServer, loadAutocannon, onPostgresSchema } from './lib.js';
import { setLogLevel } from '../runtime/lib/log.js';
import { sql } from 'drizzle-orm';
import { openStore, rowsOf, type Store } from '../runtime/store/factory.js';

setLogLevel('warn');
const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const PEPPER = randomBytes(32).toString('base64');

function rawHmacPerSecond(): number {
  const pepper = Buffer.from(PEPPER, 'base64');
  const salt = randomBytes(16);
  const secret = randomBytes(32).toString('base64url');
  let n = 0;
  const end = performance.now() + SECONDS * 1000;
  while (performance.now() < end) {
    for (let i = 0; i < 1000; i++) createHmac('sha256', pepper).update(salt).update(secret).digest();
    n += 1000;
  }
  return n / SECONDS;
}

async function verifyPerSecond(verify: () => Promise<boolean>, workers: number): Promise<number> {
  let n = 0;
  const end = performance.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (performance.now() < end) {
        if (!(await verify())) throw new Error('verification result changed during the run');
        n++;
      }
    }),
  );
  return n / SECONDS;
}

async function run(name: string, store: Store): Promise<void> {
  const changes = createChangeFeed(store);
  const svc = keyService({ db: store.db, now: Date.now, pepper: `base64:${PEPPER}`, changes });
  const uncached = keyService({ db: store.db, now: Date.now, pepper: `base64:${PEPPER}` });
  const { plaintext } = await svc.create({ name: 'bench', env: 'live', scopes: ['models:invoke'] });
  const t0 = Date.now();
  while (!changes.live() && Date.now() - t0 < 5000) await new Promise((r) => setTimeout(r, 20));
  const wrong = plaintext.slice(0, -2) + (plaintext.endsWith('AA') ? 'BB' : 'AA');
  for (let i = 0; i < 200; i++) await svc.verify(plaintext, { scope: 'models:invoke' });
  const raw = rawHmacPerSecond();
  const good = async () => (await svc.verify(plaintext, { scope: 'models:invoke' })).valid;
  const bad = async () => !(await svc.verify(wrong)).valid;
  // The in-memory part of verify (parse, HMAC, timingSafeEqual) against the stored row's salt/hash.
  const stored = (await rowsOf<{ salt: string; hash: string }>(store.db, sql`select salt, hash from api_keys limit 1`))[0]!;
  const pep = pepperFromEnv(`base64:${PEPPER}`);
  let cn = 0;
  const cend = performance.now() + SECONDS * 1000;
  while (performance.now() < cend) {
    for (let i = 0; i < 1000; i++) if (!secretMatches(pep, parseKey(plaintext)!.secret, stored)) throw new Error('mismatch');
    cn += 1000;
  }
  const crypto = cn / SECONDS;
  const seq = await verifyPerSecond(good, 1);
  const par = await verifyPerSecond(good, CONCURRENCY);
  const rej = await verifyPerSecond(bad, CONCURRENCY);
  const raw2 = rawHmacPerSecond();
  const unc = await verifyPerSecond(async () => (await uncached.verify(plaintext, { scope: 'models:invoke' })).valid, CONCURRENCY);
  await changes.close();
  const f = (x: number) => Math.round(x).toLocaleString('en-US');
  const base = (raw + raw2) / 2;
  const ratio = (x: number) => `ratio to raw HMAC ${(x / base).toFixed(3)}x`;
  console.log(`${name.padEnd(8)} raw HMAC-SHA-256 (before/after): ${f(raw)}/s, ${f(raw2)}/s`);
  console.log(`${name.padEnd(8)} verify crypto path only (parse + HMAC + timingSafeEqual):  ${f(crypto)}/s  ${ratio(crypto)}`);
  console.log(`${name.padEnd(8)} verify (valid key, 1 in flight):  ${f(seq)}/s  ${ratio(seq)}`);
  console.log(`${name.padEnd(8)} verify (valid key, ${CONCURRENCY} in flight):  ${f(par)}/s  ${ratio(par)} (target >= 0.25x)`);
  console.log(`${name.padEnd(8)} verify (wrong key, ${CONCURRENCY} in flight):  ${f(rej)}/s  ${ratio(rej)}`);
  console.log(`${name.padEnd(8)} verify (valid key, ${CONCURRENCY} in flight, no cache: a store read each):  ${f(unc)}/s  ${ratio(unc)}`);
}

// ---------------------------------------------------------------------------------------------
// Over HTTP: the identity authority and a bare node:http server in a child process.

const HTTP_SECONDS = Number(process.env.BENCH_HTTP_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);

async function serveHttp(): Promise<void> {
  const { startIdentityAuthority } = await import('../runtime/identity/server.js');
  const { loadConfig } = await import('../runtime/lib/settings.js');
  const { listen } = await import('../runtime/lib/http.js');
  const store = await openStore({ backend: 'memory' });
  const idp = await startIdentityAuthority({
    store,
    config: loadConfig({ IDP_API_KEY_PEPPER: `base64:${PEPPER}`, OTEL_SDK_DISABLED: process.env.OTEL_SDK_DISABLED }),
    addr: '127.0.0.1:0',
  });
  await idp.authority.whenReady();
  const bare = bareServer();
  const barePort = await listen(bare, '127.0.0.1:0');
  const r = await fetch(`http://127.0.0.1:${idp.port}/v1/keys`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'bench', env: 'live', scopes: ['models:invoke'] }),
  });
  const { plaintext } = (await r.json()) as { plaintext: string };
  process.send?.({ idp: idp.port, bare: barePort, plaintext });
  process.once('message', async () => {
    await idp.close();
    await store.close();
    bare.close();
    process.exit(0);
  });
}

async function overHttp(): Promise<void> {
  const autocannon = await loadAutocannon();
  const child = fork(fileURLToPath(import.meta.url), ['--serve'], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const ports = await new Promise<{ idp: number; bare: number; plaintext: string }>((resolve, reject) => {
    child.once('message', (m) => resolve(m as never));
    child.once('exit', (c) => reject(new Error(`server process exited with ${c}`)));
  });
  try {
    const body = JSON.stringify({ key: ports.plaintext, scope: 'models:invoke' });
    const check = (await (
      await fetch(`http://127.0.0.1:${ports.idp}/v1/keys/verify`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
    ).json()) as { valid: boolean };
    if (!check.valid) throw new Error('the bench key does not verify');
    const run = async (port: number, path: string) => {
      const o = { url: `http://127.0.0.1:${port}${path}`, connections: CONNECTIONS, method: 'POST', headers: { 'content-type': 'application/json' }, body };
      await autocannon({ ...o, duration: 2 });
      const r = await autocannon({ ...o, duration: HTTP_SECONDS });
      if (r.errors || r.non2xx) throw new Error(`${path}: ${r.errors} errors, ${r.non2xx} non-2xx`);
      return r;
    };
    const raw1 = rawHmacPerSecond();
    const bare = await run(ports.bare, '/');
    const http = await run(ports.idp, '/v1/keys/verify');
    const raw = (raw1 + rawHmacPerSecond()) / 2;
    const f = (x: number) => Math.round(x).toLocaleString('en-US');
    const rps = http.requests.average;
    console.log(`http     POST /v1/keys/verify, ${CONNECTIONS} connections, ${HTTP_SECONDS} s after 2 s warm-up (PGlite, cache on)`);
    console.log(`http     raw HMAC-SHA-256 (one core): ${f(raw)}/s`);
    console.log(`http     bare node:http, same POSTs:  ${f(bare.requests.average)} req/s  p50 ${bare.latency.p50} ms  p99 ${bare.latency.p99} ms`);
    console.log(
      `http     POST /v1/keys/verify:        ${f(rps)} req/s  p50 ${http.latency.p50} ms  p99 ${http.latency.p99} ms  ratio to bare ${(rps / bare.requests.average).toFixed(2)}x, to raw HMAC ${(rps / raw).toFixed(3)}x (HTTP-bound: bare itself is ${(bare.requests.average / raw).toFixed(3)}x)`,
    );
  } finally {
    child.send('stop');
    await new Promise((r) => child.once('exit', r));
  }
}

if (process.argv.includes('--serve')) {
  await serveHttp();
} else {
  await main();
}

async function main(): Promise<void> {
  const lite = await openStore({ backend: 'memory' });
  try {
    await run('pglite', lite);
  } finally {
    await lite.close();
  }
  await onPostgresSchema(
    'bench_keys',
    (url, schema) => openStore({ url, schema }),
    (pg) => run('postgres', pg),
  );
  await overHttp();
}
