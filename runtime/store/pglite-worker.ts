/**
 * The embedded store's engine thread: the PGlite databases of this process (usually one; tests
 * open many), answering the requests of pglite-remote.ts over the worker port. Queries and
 * transactions run exactly as they would in-process (PGlite's own locks order them);
 * notifications are posted as PGlite delivers them, before the answer of the statement that
 * delivered them, so the order the caller sees is PGlite's.
 */
import { parentPort } from 'node:worker_threads';
import { PGlite, type Transaction } from '@electric-sql/pglite';
import { collectGarbage, startIdleGc } from '../lib/idle-gc.js';
import { processSetting } from '../lib/settings.js';
import { errMsg, logger } from '../lib/log.js';
import { maintain, MAINTENANCE_INTERVAL_MS } from './pglite-maintenance.js';
import { toWire, type Init, type Request } from './pglite-remote.js';

const port = parentPort!;

/**
 * Engine settings. PostgreSQL's default 128 MB of shared buffers ends up resident in the WASM
 * memory of an embedded, single-connection store whose working set is far smaller (the audit
 * tail, the registry, the directory pages being synced): the pool fills as the database grows
 * and WASM memory never shrinks, so its size is how far an idle all-in-one's RSS climbs over a
 * long run. 1M decisions (bench/soak): 27 MB more at idle after than before with 32 MB, 10 MB
 * with 16 MB (idle 286 -> 270 MB). /authz with audit to PGlite and a 10k-user directory sync
 * measured the same with 16 MB as with 32 (bench:compare, authz and directory).
 *
 * ANALYZE (pglite-maintenance.ts) samples 300 rows per statistics target: at PostgreSQL's 100
 * that is 30,000 rows held at once, and the WASM memory they touched stays resident (500k audit
 * records: +19 MB RSS and 273 ms; at 10: +1 MB and 39 ms; VACUUM +0 MB). Ten buckets are plenty
 * for the key lookups the store makes.
 */
const ENGINE_CONF = ['shared_buffers=16MB', 'default_statistics_target=10'];

const ROLLBACK = Symbol('rollback');
const log = logger('store');

/** One database: its PGlite, its open transactions and its subscribed channels. */
class Database {
  private readonly txs = new Map<number, { tx: Transaction; end: (commit: boolean) => void; done: Promise<unknown> }>();
  private readonly listening = new Map<string, () => Promise<void>>();
  private nextTx = 1;
  private readonly maintenance: NodeJS.Timeout | undefined;

  constructor(
    readonly id: number,
    private readonly pg: PGlite,
    maintenanceMs: number,
  ) {
    // What autovacuum would do (pglite-maintenance.ts); one pass at a time.
    let running = false;
    const pass = () => {
      if (running || pg.closed) return;
      running = true;
      maintain(pg)
        .catch((e: unknown) => pg.closed || log.warn('PGlite maintenance failed; the next pass retries', { err: errMsg(e) }))
        .finally(() => (running = false));
    };
    this.maintenance = maintenanceMs > 0 ? setInterval(pass, maintenanceMs).unref() : undefined;
  }

  static async open(id: number, init: Init): Promise<Database> {
    const options = { postgresqlconf: ENGINE_CONF, ...(init.loadDataDir ? { loadDataDir: new Blob([init.loadDataDir]) } : {}) };
    // A fresh data folder was initialised by a short-lived process first (pglite-remote.ts).
    // One options object: `new PGlite(undefined, options)` (memory) ignores its options, and an
    // in-memory store then ran initdb instead of loading its dump (a test store: 1.5 s, not 0.6).
    const pg = new PGlite({ dataDir: init.dataDir, ...options });
    await pg.waitReady;
    if (init.schema) await pg.exec(`create schema if not exists "${init.schema}"; set search_path to "${init.schema}"`);
    // A full collection now: what opening left behind is garbage V8 has no reason to collect
    // soon, the engine's own JS heap being small. Measured on the all-in-one before initdb moved
    // to its own process: first start on a fresh folder 882 MB resident, 555 MB with this (and a
    // reopen), 460 MB with ENGINE_CONF too; a restart on an existing folder 419 MB, 300 MB with
    // ENGINE_CONF.
    collectGarbage();
    return new Database(id, pg, init.maintenanceMs ?? MAINTENANCE_INTERVAL_MS);
  }

  /** Opens a transaction held until `end`: resolves with its number once BEGIN ran. */
  private begin(): Promise<number> {
    return new Promise<number>((started, failed) => {
      const n = this.nextTx++;
      const done = this.pg.transaction(
        (tx) =>
          new Promise<void>((commit, rollback) => {
            this.txs.set(n, { tx, end: (c) => (c ? commit() : rollback(ROLLBACK)), done });
            started(n);
          }),
      );
      done.catch((e: unknown) => {
        if (!this.txs.has(n)) failed(e); // BEGIN itself failed (after `end`, `started` already ran)
      });
    });
  }

  private async end(n: number, commit: boolean): Promise<void> {
    const t = this.txs.get(n);
    if (!t) throw new Error(`transaction ${n} is not open`);
    this.txs.delete(n);
    t.end(commit);
    try {
      await t.done;
    } catch (e) {
      if (e !== ROLLBACK) throw e;
    }
  }

  private on(tx: number | undefined): PGlite | Transaction {
    if (tx === undefined) return this.pg;
    const t = this.txs.get(tx);
    if (!t) throw new Error(`transaction ${tx} is not open`);
    return t.tx;
  }

  async handle(r: Request): Promise<unknown> {
    switch (r.op) {
      case 'query': {
        const parsers = Object.fromEntries(r.rawTypes.map((t) => [t, (v: string) => v]));
        return this.on(r.tx).query(r.sql, r.params, { rowMode: r.rowMode, parsers, blob: r.blob });
      }
      case 'exec':
        if (r.transaction) await this.pg.transaction((tx) => tx.exec(r.sql));
        else await this.on(r.tx).exec(r.sql);
        return undefined;
      case 'begin':
        return this.begin();
      case 'end':
        return this.end(r.tx, r.commit);
      case 'listen':
        if (!this.listening.has(r.channel)) {
          const unsubscribe = await this.pg.listen(r.channel, (payload) => port.postMessage({ db: this.id, notify: r.channel, payload }));
          this.listening.set(r.channel, unsubscribe);
        }
        return undefined;
      case 'unlisten':
        await this.listening.get(r.channel)?.();
        this.listening.delete(r.channel);
        return undefined;
      case 'dump':
        return (await this.pg.dumpDataDir('none')).arrayBuffer();
      case 'close':
        clearInterval(this.maintenance);
        if (!this.pg.closed) await this.pg.close();
        return undefined;
      case 'open':
        throw new Error('already open');
    }
  }
}

const databases = new Map<number, Database>();
let nextDb = 1;

async function handle(r: Request): Promise<unknown> {
  if (r.op === 'open') {
    const db = await Database.open(nextDb++, r.init);
    databases.set(db.id, db);
    return db.id;
  }
  const db = databases.get(r.db);
  if (!db) throw new Error('PGlite is closed');
  if (r.op === 'close') databases.delete(r.db);
  return db.handle(r);
}

// The engine's own heap grows under load as the caller's does: collected once this thread is quiet.
startIdleGc({ intervalMs: processSetting('idleGcIntervalMs') });

port.on('message', (r: Request) => {
  handle(r).then(
    (value) => port.postMessage({ id: r.id, ok: true, value }, value instanceof ArrayBuffer ? [value] : []),
    (e: unknown) => port.postMessage({ id: r.id, ok: false, error: toWire(e) }),
  );
});
