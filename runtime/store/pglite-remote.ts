/**
 * PGlite on a worker thread (pglite-worker.ts), seen from the calling thread as the subset of
 * PGlite's client that drizzle and the store use: `query`, `exec`, `transaction`, `listen`,
 * `dumpDataDir`, `close`. The engine's work (parsing, planning, executing, the WAL) then runs
 * beside the event loop that answers decisions instead of on it: a 100k-member statement or an
 * audit batch no longer stalls an unrelated request.
 *
 * Rows and parameters cross the port by structured clone. Result parsers cannot cross (they are
 * functions): drizzle's keep chosen types as text, which the worker re-creates from their type
 * ids; any other parser is refused rather than silently dropped. Errors come back with their
 * SQLSTATE `code` and the other fields PGlite sets, as the in-process client throws them.
 *
 * One engine thread per process hosts every PGlite the process opens (the WASM engine is compiled
 * once); it keeps the process alive only while an answer is awaited.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { errMsg, logger } from '../lib/log.js';
import { lockFolder } from './folder-lock.js';

const log = logger('store');

/** How a database is opened on the engine thread. */
export interface Init {
  dataDir?: string;
  loadDataDir?: ArrayBuffer;
  schema?: string;
  /** How often tables are vacuumed and analyzed as autovacuum would (pglite-maintenance.ts); 0: never. */
  maintenanceMs?: number;
}

export type Request =
  | { id: number; op: 'open'; init: Init }
  | { id: number; db: number; op: 'query'; tx?: number; sql: string; params: unknown[]; rowMode: 'array' | 'object'; rawTypes: number[]; blob?: Blob }
  | { id: number; db: number; op: 'exec'; tx?: number; sql: string; transaction?: boolean }
  | { id: number; db: number; op: 'begin' }
  | { id: number; db: number; op: 'end'; tx: number; commit: boolean }
  | { id: number; db: number; op: 'listen' | 'unlisten'; channel: string }
  | { id: number; db: number; op: 'dump' | 'close' };

type Op = Request extends infer R ? (R extends { id: number } ? Omit<R, 'id'> : never) : never;

/** An error as it crosses the port: its name, message and own scalar fields (SQLSTATE `code`, `detail`, ...). */
export interface WireError {
  name: string;
  message: string;
  fields: Record<string, unknown>;
}

export function toWire(e: unknown): WireError {
  if (!(e instanceof Error)) return { name: 'Error', message: String(e), fields: {} };
  const fields: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(e)) if (v === null || ['string', 'number', 'boolean'].includes(typeof v)) fields[k] = v;
  return { name: e.name, message: e.message, fields };
}

function fromWire(w: WireError): Error {
  const e = Object.assign(new Error(w.message), w.fields);
  e.name = w.name;
  return e;
}

type Message = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: WireError } | { db: number; notify: string; payload: string };

interface QueryOptions {
  rowMode?: 'array' | 'object';
  parsers?: Record<number, (value: string, typeId: number) => unknown>;
  /** What `COPY ... FROM '/dev/blob'` reads (PGlite's own option; a Blob crosses the port). */
  blob?: Blob;
}

type Result<T> = { rows: T[]; fields: { name: string; dataTypeID: number }[]; affectedRows?: number };

/** A client bound to one database, or to one open transaction on it. */
export interface RemoteClient {
  query<T = Record<string, unknown>>(sql: string, params?: unknown[], options?: QueryOptions): Promise<Result<T>>;
  exec(sql: string): Promise<void>;
}

export interface RemoteTransaction extends RemoteClient {
  rollback(): Promise<void>;
  readonly closed: boolean;
}

/** Type ids whose parser keeps the text: the only parsers that can run on the other thread. */
function rawTypes(parsers: QueryOptions['parsers']): number[] {
  const ids: number[] = [];
  for (const [id, parse] of Object.entries(parsers ?? {})) {
    if (parse('\u0001', Number(id)) !== '\u0001') throw new Error(`PGlite worker: the parser of type ${id} is not the identity and cannot cross threads`);
    ids.push(Number(id));
  }
  return ids;
}

/**
 * The engine thread's young generation: 8 MB instead of V8's 48 (two 16 MB semi-spaces). What
 * the thread allocates lives for one statement (protocol buffers, rows); V8 grew both semi-spaces
 * under load and kept them after it, collected or not (the all-in-one after 200k decisions: 38 MB
 * more resident than before the load, 13 MB with this; the same decision rate).
 */
const ENGINE_LIMITS = { maxYoungGenerationSizeMb: 8 };

/**
 * Starts the worker module beside this one: `.js` when built; `.ts` under tsx or vitest, where the
 * worker registers tsx's loader itself first (Node 20 does not apply `--import` hooks to a worker's
 * entry).
 */
function startWorker(): Worker {
  const here = fileURLToPath(import.meta.url);
  const ext = extname(here);
  const entry = pathToFileURL(join(dirname(here), `pglite-worker${ext}`));
  if (ext !== '.ts') return new Worker(entry, { resourceLimits: ENGINE_LIMITS });
  const tsx = import.meta.resolve('tsx/esm/api');
  const code = `import(${JSON.stringify(tsx)}).then((t) => { t.register(); return import(${JSON.stringify(entry.href)}); })`;
  return new Worker(code, { eval: true, execArgv: [], resourceLimits: ENGINE_LIMITS });
}

/** The engine thread and the answers awaited from it. */
class Engine {
  private readonly worker = startWorker();
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  readonly listeners = new Map<string, Set<(payload: string) => void>>();
  private nextId = 1;
  failure: Error | undefined;

  constructor() {
    this.worker.on('message', (m: Message) => this.receive(m));
    this.worker.on('error', (e) => this.fail(e));
    this.worker.on('exit', (code) => this.fail(new Error(`PGlite is closed (its engine thread exited with ${code})`)));
    this.worker.unref();
  }

  private receive(m: Message): void {
    if ('notify' in m) {
      for (const cb of this.listeners.get(`${m.db}:${m.notify}`) ?? []) cb(m.payload);
      return;
    }
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (this.pending.size === 0) this.worker.unref();
    if (m.ok) p.resolve(m.value);
    else p.reject(fromWire(m.error));
  }

  /** The thread died (it is never stopped on purpose): every open database fails closed. */
  private fail(e: Error): void {
    if (!this.failure) log.error('the PGlite engine thread stopped: the store is unavailable', { err: errMsg(e) });
    this.failure ??= e;
    if (engine === this) engine = undefined;
    for (const p of this.pending.values()) p.reject(this.failure);
    this.pending.clear();
  }

  call<T>(op: Op, transfer: ArrayBuffer[] = []): Promise<T> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    if (this.pending.size === 0) this.worker.ref();
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.worker.postMessage({ ...op, id }, transfer);
    });
  }
}

let engine: Engine | undefined;

/**
 * Runs PGlite's initdb on `folder` in a short-lived process. The engine that ran initdb keeps
 * ~100 MB of memory that neither a reopen nor ending its thread gives back to the system; ending
 * a process does (measured: PGlite opened on a fresh folder 396 MB resident when reopened on one
 * thread, 361 MB when initdb ran on a thread of its own, 299 MB here: the same as an existing
 * folder).
 */
async function initdb(folder: string): Promise<void> {
  const pglite = import.meta.resolve('@electric-sql/pglite');
  const code = `const { PGlite } = await import(process.argv[1]); const pg = new PGlite(process.argv[2]); await pg.waitReady; await pg.close();`;
  await new Promise<void>((resolve, reject) => {
    execFile(process.execPath, ['--input-type=module', '-e', code, pglite, folder], { timeout: 120_000 }, (e, _out, err) =>
      e ? reject(new Error(`PGlite initdb of ${folder} failed: ${err.trim().split('\n').slice(-3).join(' ') || errMsg(e)}`)) : resolve(),
    );
  });
}

/** One database on the engine thread. */
export class RemotePglite implements RemoteClient {
  private isClosed = false;

  private constructor(
    private readonly engine: Engine,
    private readonly db: number,
    /** Releases the data folder's lock (folder-lock.ts) once closed. */
    private readonly unlock: () => void,
  ) {}

  /**
   * Opens a database on the engine thread (starting the thread first if needed). A data folder is
   * locked to this process first (a second process on it would corrupt it), and one PGlite has not
   * initialised yet is initialised by a process of its own (`initdb`).
   */
  static async open(init: Init): Promise<RemotePglite> {
    const folder = init.dataDir && !init.dataDir.includes('://') && !init.loadDataDir ? init.dataDir : undefined;
    const unlock = folder ? await lockFolder(folder) : () => {};
    try {
      if (folder && !existsSync(join(folder, 'PG_VERSION'))) await initdb(folder);
      engine ??= new Engine();
      const e = engine;
      const db = await e.call<number>({ op: 'open', init }, init.loadDataDir ? [init.loadDataDir] : []);
      return new RemotePglite(e, db, unlock);
    } catch (err) {
      unlock();
      throw err;
    }
  }

  get closed(): boolean {
    return this.isClosed;
  }

  private call<T>(op: Op): Promise<T> {
    if (this.isClosed) return Promise.reject(new Error('PGlite is closed'));
    return this.engine.call<T>(op);
  }

  query<T>(sql: string, params: unknown[] = [], options: QueryOptions = {}, tx?: number): Promise<Result<T>> {
    const rowMode = options.rowMode ?? 'object';
    return this.call({ db: this.db, op: 'query', tx, sql, params, rowMode, rawTypes: rawTypes(options.parsers), blob: options.blob });
  }

  exec(sql: string, opts: { transaction?: boolean } = {}, tx?: number): Promise<void> {
    return this.call({ db: this.db, op: 'exec', tx, sql, transaction: opts.transaction });
  }

  /** Runs `fn` in one transaction: committed when it resolves, rolled back when it throws. */
  async transaction<T>(fn: (tx: RemoteTransaction) => Promise<T>): Promise<T> {
    const n = await this.call<number>({ db: this.db, op: 'begin' });
    let ended = false;
    const end = async (commit: boolean) => {
      if (ended) return;
      ended = true;
      await this.call({ db: this.db, op: 'end', tx: n, commit });
    };
    const tx: RemoteTransaction = {
      query: (sql, params, options) => this.query(sql, params, options, n),
      exec: (sql) => this.exec(sql, {}, n),
      rollback: () => end(false),
      get closed() {
        return ended;
      },
    };
    let result: T;
    try {
      result = await fn(tx);
    } catch (e) {
      await end(false).catch(() => {});
      throw e;
    }
    await end(true);
    return result;
  }

  async listen(channel: string, cb: (payload: string) => void): Promise<() => Promise<void>> {
    const key = `${this.db}:${channel}`;
    const listeners = this.engine.listeners;
    let set = listeners.get(key);
    if (!set) {
      set = new Set();
      listeners.set(key, set);
      await this.call({ db: this.db, op: 'listen', channel });
    }
    set.add(cb);
    return async () => {
      set.delete(cb);
      if (set.size || listeners.get(key) !== set) return;
      listeners.delete(key);
      if (!this.isClosed) await this.call({ db: this.db, op: 'unlisten', channel });
    };
  }

  async dumpDataDir(): Promise<Blob> {
    return new Blob([await this.call<ArrayBuffer>({ db: this.db, op: 'dump' })]);
  }

  /** Closes the database (checkpointing its data folder); the engine thread stays for the others. */
  async close(): Promise<void> {
    if (this.isClosed) return;
    try {
      await this.call({ db: this.db, op: 'close' });
    } finally {
      this.isClosed = true;
      this.unlock();
      for (const key of [...this.engine.listeners.keys()]) if (key.startsWith(`${this.db}:`)) this.engine.listeners.delete(key);
    }
  }
}
