/**
 * Issue 16 crash tests on the real all-in-one process (`runtime/main.ts`): load /authz, `kill -9`,
 * then read the store the process left behind.
 *  - AUDIT_DURABILITY=sync: zero acknowledged decisions lack a stored record.
 *  - AUDIT_DURABILITY=async: the loss stays within the documented window (AUDIT_MAX_PENDING).
 *  - Restart after the kill: seqs continue, nothing served before the kill names another record.
 *  - Two replicas on one PostgreSQL database with AUDIT_CHAIN_ID unset: two chains, both verify.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { openStore, rowsOf } from '../runtime/store/factory.js';
import { TEST_DATABASE_URL } from '../runtime/store/testing.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
// As `npm start` runs it (exec node --import tsx): signals go to the server itself. The tsx CLI's
// relay SIGKILLs its child when it does not confirm a signal within 60 ms, which a loaded machine misses.
const NODE_ARGS = ['--import', 'tsx'];
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

interface Up {
  child: ChildProcess;
  decision: number;
  mgmt: number;
  exited: Promise<unknown>;
}

function startMain(env: Record<string, string>): Promise<Up> {
  const child = spawn(process.execPath, [...NODE_ARGS, join(ROOT, 'runtime/main.ts')], {
    cwd: ROOT,
    env: {
      ...process.env,
      PORT: '0',
      DECISION_ADDR: '127.0.0.1:0',
      MGMT_ADDR: '127.0.0.1:0',
      EGRESS_PROXY_ADDR: '127.0.0.1:0',
      BROKER_ENABLED: 'false',
      LOG_LEVEL: 'info',
      TEST_DATABASE_URL: '',
      AUDIT_CHAIN_ID: '',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  return new Promise((resolve, reject) => {
    const lines: string[] = [];
    const timer = setTimeout(() => reject(new Error(`main did not come up:\n${lines.slice(-20).join('\n')}`)), 90_000);
    createInterface({ input: child.stderr! }).on('line', (line) => {
      lines.push(line);
      try {
        const ev = JSON.parse(line) as { msg?: string; decision?: number; mgmt?: number };
        if (ev.msg === 'writ is up') {
          clearTimeout(timer);
          resolve({ child, decision: ev.decision!, mgmt: ev.mgmt!, exited });
        }
      } catch {
        // not a log line
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`main exited with ${String(code)}:\n${lines.slice(-20).join('\n')}`));
    });
  });
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 32 });

/** One egress decision tagged with a unique task; resolves with the status (0: no answer). */
function decide(port: number, task: string): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: '/authz',
        agent,
        headers: { [H.actor]: 'research-agent', [H.service]: 'search', [H.targetKind]: 'tool', [H.task]: task },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', () => resolve(0));
      },
    );
    req.on('error', () => resolve(0));
    req.end();
  });
}

/** Loads /authz from `workers` loops until `stop()`; returns the tasks that got an answer. */
function load(port: number, prefix: string, workers = 24) {
  const answered: string[] = [];
  let running = true;
  let n = 0;
  const loops = Array.from({ length: workers }, async () => {
    while (running) {
      const task = `${prefix}-${n++}`;
      const status = await decide(port, task);
      if (status === 200 || status === 403) answered.push(task);
      else if (status === 0) return;
    }
  });
  return { answered, stop: async () => ((running = false), await Promise.all(loops)) };
}

async function getJson(port: number, path: string): Promise<unknown> {
  return (await fetch(`http://127.0.0.1:${port}${path}`)).json();
}

/** Starts main on a fresh PGlite folder, loads it, serves a GET /v1/audit, kills it with SIGKILL under load. */
async function crashUnderLoad(durability: 'sync' | 'async', extra: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), `audit-crash-${durability}-`));
  dirs.push(dir);
  const dataDir = join(dir, 'writ');
  const up = await startMain({ WRIT_DATA_DIR: dataDir, AUDIT_DURABILITY: durability, ...extra });
  const l = load(up.decision, durability);
  // Enough load whatever the machine's speed: at least 300 answers (or 30 s), still loading at the kill.
  const until = Date.now() + 30_000;
  while (l.answered.length < 150 && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
  const served = (await getJson(up.mgmt, '/v1/audit?limit=1000')) as { seq: number; hash: string }[];
  while (l.answered.length < 300 && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
  up.child.kill('SIGKILL');
  await up.exited;
  await l.stop();
  const store = await openStore({ backend: 'pglite', dataDir });
  try {
    const rows = await rowsOf<{ task: string | null; seq: string | number; hash: string; chain: string }>(
      store.db,
      sql`select chain, seq, hash, task from audit_log`,
    );
    const stored = new Set(rows.map((r) => r.task));
    const missing = l.answered.filter((t) => !stored.has(t));
    const byseq = new Map(rows.map((r) => [Number(r.seq), r.hash]));
    return { dataDir, answered: l.answered.length, missing: missing.length, served, byseq, chain: rows[0]?.chain };
  } finally {
    await store.close();
  }
}

describe('audit under kill -9 (all-in-one process, PGlite)', () => {
  it('AUDIT_DURABILITY=sync: every acknowledged decision has its record; served seqs keep their records across the restart', async () => {
    const r = await crashUnderLoad('sync');
    console.log(`sync: ${r.answered} decisions answered before kill -9, ${r.missing} without a stored record`);
    expect(r.answered).toBeGreaterThanOrEqual(150);
    expect(r.missing).toBe(0);
    // Everything GET /v1/audit showed before the kill is stored, with the same hash.
    expect(r.served.length).toBeGreaterThan(0);
    for (const s of r.served) expect(r.byseq.get(s.seq), `seq ${s.seq}`).toBe(s.hash);

    // Restart on the same folder: the chain continues after the stored tail and verifies whole.
    const up = await startMain({ WRIT_DATA_DIR: r.dataDir, AUDIT_DURABILITY: 'sync' });
    try {
      const health = (await getJson(up.mgmt, '/readyz')) as { audit: { chain: string; lastSeq: number } };
      expect(health.audit.chain).toBe(r.chain);
      expect(health.audit.lastSeq).toBeGreaterThanOrEqual(Math.max(...r.byseq.keys()));
      expect(await getJson(up.mgmt, '/v1/audit/verify?from=1')).toMatchObject({ ok: true, brokenAtSeq: -1 });
    } finally {
      up.child.kill('SIGTERM');
      await up.exited;
    }
  }, 240_000);

  it('AUDIT_DURABILITY=async: the loss stays within the documented window (AUDIT_MAX_PENDING)', async () => {
    const window = 2000;
    const r = await crashUnderLoad('async', { AUDIT_MAX_PENDING: String(window) });
    console.log(`async: ${r.answered} decisions answered before kill -9, ${r.missing} without a stored record (window ${window})`);
    expect(r.answered).toBeGreaterThanOrEqual(150);
    expect(r.missing).toBeLessThanOrEqual(window);
    for (const s of r.served) expect(r.byseq.get(s.seq), `seq ${s.seq}`).toBe(s.hash);
  }, 240_000);
});

describe.skipIf(!TEST_DATABASE_URL)('two replicas on one PostgreSQL database, AUDIT_CHAIN_ID unset', () => {
  it('get two chains, and both verify', async () => {
    const db = `audit_${Date.now().toString(36)}`;
    const admin = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database ${db}`);
    const url = new URL(TEST_DATABASE_URL!);
    url.pathname = `/${db}`;
    const env = { REGISTRY_DB_URL: url.toString(), IDP_DB_URL: url.toString(), AUDIT_SPOOL_DIR: 'none' };
    const ups: Up[] = [];
    try {
      ups.push(await startMain(env));
      ups.push(await startMain(env));
      await Promise.all(
        ups.map(async (u, i) => {
          for (let k = 0; k < 200; k++) await decide(u.decision, `r${i}-${k}`);
        }),
      );
      const chains = await Promise.all(ups.map(async (u) => ((await getJson(u.mgmt, '/readyz')) as { audit: { chain: string } }).audit.chain));
      expect(new Set(chains).size).toBe(2);
      for (const u of ups) {
        const v = (await getJson(u.mgmt, '/v1/audit/verify?from=1')) as { ok: boolean; checked: number };
        expect(v.ok).toBe(true);
        expect(v.checked).toBeGreaterThanOrEqual(200);
      }
      // Each replica can verify the other's chain in the shared store too.
      const other = (await getJson(ups[0]!.mgmt, `/v1/audit/verify?chain=${encodeURIComponent(chains[1]!)}`)) as { ok: boolean };
      expect(other.ok).toBe(true);
    } finally {
      for (const u of ups) {
        u.child.kill('SIGTERM');
        await u.exited;
      }
      await admin.unsafe(`drop database if exists ${db} with (force)`);
      await admin.end();
    }
  }, 300_000);
});
