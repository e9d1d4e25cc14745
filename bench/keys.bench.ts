/**
 * API-key verification throughput: `keyService().verify` (the function POST /v1/keys/verify
 * calls: parse, one row read by id, HMAC-SHA-256, timingSafeEqual, throttled last_used_at) run
 * in-process, as a ratio of raw HMAC-SHA-256 computations per second measured in the same run.
 * On in-memory PGlite always, and on PostgreSQL (TEST_DATABASE_URL, else
 * postgres://postgres@127.0.0.1:5432/test) when reachable.
 *
 *   npx tsx bench/keys.bench.ts      (BENCH_SECONDS=3 per figure, BENCH_CONCURRENCY=8)
 */
import { createHmac, randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { parseKey, pepperFromEnv, secretMatches } from '../runtime/identity/enterprise/keys/secret.js';
import { keyService } from '../runtime/identity/enterprise/keys/service.js';
import { setLogLevel } from '../runtime/lib/log.js';
import { sql } from 'drizzle-orm';
import { openStore, rowsOf, type Store } from '../runtime/store/factory.js';

setLogLevel('warn');
const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const PG_URL = process.env.TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
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
  const svc = keyService({ db: store.db, now: Date.now, env: { IDP_API_KEY_PEPPER: `base64:${PEPPER}` } });
  const { plaintext } = await svc.create({ name: 'bench', env: 'live', scopes: ['models:invoke'] });
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
  const f = (x: number) => Math.round(x).toLocaleString('en-US');
  const ratio = (x: number) => (x / raw).toExponential(2);
  console.log(`${name.padEnd(8)} raw HMAC-SHA-256: ${f(raw)}/s`);
  console.log(`${name.padEnd(8)} verify crypto path only (parse + HMAC + timingSafeEqual):  ${f(crypto)}/s  ratio to raw HMAC ${(crypto / raw).toFixed(2)}`);
  console.log(`${name.padEnd(8)} verify (valid key, 1 in flight):  ${f(seq)}/s  ratio to raw HMAC ${ratio(seq)}`);
  console.log(`${name.padEnd(8)} verify (valid key, ${CONCURRENCY} in flight):  ${f(par)}/s  ratio to raw HMAC ${ratio(par)}`);
  console.log(`${name.padEnd(8)} verify (wrong key, ${CONCURRENCY} in flight):  ${f(rej)}/s  ratio to raw HMAC ${ratio(rej)}`);
}

async function reachable(url: string): Promise<boolean> {
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

const lite = await openStore({ backend: 'memory' });
try {
  await run('pglite', lite);
} finally {
  await lite.close();
}
if (await reachable(PG_URL)) {
  const schema = `bench_keys_${randomBytes(4).toString('hex')}`;
  const pg = await openStore({ url: PG_URL, schema });
  try {
    await run('postgres', pg);
  } finally {
    await pg.close();
    const admin = postgres(PG_URL, { max: 1, onnotice: () => {} });
    await admin.unsafe(`drop schema if exists "${schema}" cascade`);
    await admin.end();
  }
} else {
  console.log(`postgres: skipped, ${PG_URL.replace(/\/\/[^@]*@/, '//')} is unreachable (set TEST_DATABASE_URL)`);
}
