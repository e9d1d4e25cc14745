/**
 * The folder source: a directory of YAML (nested folders, multi-document files, a GitOps
 * checkout) fed to the applier under owner `folder:<absolute path>`.
 *
 * Changes arrive through `fs.watch` (recursive) and, as a fallback for what watching misses
 * (network file systems, a symlinked checkout swapped by git-sync, an overflowed event queue), a
 * periodic rescan that also acts as the drift resync. A file is re-read only when its stat
 * (inode, size, mtime) changed or a watch event named it, so an unchanged folder of 10k resources
 * costs a stat per file. Passes are serialized; changes during a pass schedule one more.
 *
 * Folder resources have no API server to keep their status: statuses are kept in memory
 * (`statuses()`), and every change of a resource's Ready condition is logged.
 */
import { watch, type FSWatcher, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { errMsg, logger } from '../../runtime/lib/log.js';
import type { Applier, PassResult } from '../apply.js';
import type { Observed } from '../resource.js';
import type { CrStatus } from '../status.js';
import { listYamlFiles, readYamlText, type FileProblem } from '../validate/files.js';

const log = logger('folder-source');

export interface FolderSourceOptions {
  dir: string;
  /** Builds the applier for this folder's owner (`folder:<absolute dir>`). */
  applier: (owner: string) => Applier;
  /** Full rescan period (also the drift resync); default 10 s; 0 disables it. */
  rescanMs?: number;
  /** Coalesces bursts of watch events (an editor's save, a checkout); default 25 ms. */
  debounceMs?: number;
  /** Called after every pass (tests, metrics). */
  onPass?: (r: PassResult) => void;
}

interface FileEntry {
  stamp: string;
  resources: Observed[];
  problems: FileProblem[];
}

export interface FolderSource {
  owner: string;
  /** Resolves after the first pass. */
  ready: Promise<void>;
  statuses(): ReadonlyMap<string, CrStatus>;
  problems(): FileProblem[];
  /** Runs a pass now (as the periodic rescan does: files whose stat changed are re-read). */
  resync(): Promise<PassResult>;
  close(): Promise<void>;
}

export const folderOwner = (dir: string): string => `folder:${resolve(dir)}`;

function stampOf(path: string): string | undefined {
  try {
    const s = statSync(path);
    return `${s.ino}:${s.size}:${s.mtimeMs}`;
  } catch {
    return undefined;
  }
}

export function startFolderSource(opts: FolderSourceOptions): FolderSource {
  const dir = resolve(opts.dir);
  const owner = folderOwner(dir);
  const applier = opts.applier(owner);
  const files = new Map<string, FileEntry>();
  const dirty = new Set<string>();
  let statuses = new Map<string, CrStatus>();
  let problems: FileProblem[] = [];
  let closed = false;
  let running: Promise<PassResult> | undefined;
  let again = false;
  let debounce: NodeJS.Timeout | undefined;

  /** The observed set of the last scan; the same array while no file changed (the applier memoizes on it). */
  let observedSet: Observed[] = [];
  /** `files` changed since `observedSet` was built (kept across a scan that failed half way). */
  let stale = false;
  async function scan(): Promise<Observed[]> {
    let names: string[];
    try {
      names = listYamlFiles(dir);
    } catch (e) {
      // The folder itself is gone (a checkout being replaced): keep the last good state rather
      // than withdrawing everything for a moment; the next scan sees the new folder.
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(`policy folder ${dir} does not exist`, { cause: e });
      throw e;
    }
    const seen = new Set(names);
    for (const f of [...files.keys()])
      if (!seen.has(f)) {
        files.delete(f);
        stale = true;
      }
    for (const f of names) {
      const path = join(dir, f);
      const stamp = stampOf(path);
      const cur = files.get(f);
      if (stamp === undefined) {
        if (files.delete(f)) stale = true;
        continue;
      }
      if (cur && cur.stamp === stamp && !dirty.has(f)) continue;
      let r: ReturnType<typeof readYamlText>;
      try {
        r = readYamlText(await readFile(path, 'utf8'), f);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
          if (files.delete(f)) stale = true;
          continue;
        }
        // Unreadable (permissions, a directory named *.yaml): this file's problem, as invalid YAML is.
        r = { resources: [], problems: [{ file: f, line: 1, message: `cannot read: ${errMsg(e)}` }] };
      }
      stale = true;
      files.set(f, { stamp, resources: r.resources, problems: r.problems });
      for (const p of r.problems) log.warn('invalid resource', { file: p.file, line: p.line, error: p.message });
    }
    dirty.clear();
    if (stale) {
      problems = [...files.values()].flatMap((e) => e.problems);
      observedSet = [...files.values()].flatMap((e) => e.resources);
      stale = false;
    }
    return observedSet;
  }

  async function pass(): Promise<PassResult> {
    const observed = await scan();
    const r = await applier.run(observed, statuses);
    for (const [key, s] of r.statuses) {
      const before = statuses.get(key)?.conditions.find((c) => c.type === 'Ready');
      const now = s.conditions.find((c) => c.type === 'Ready')!;
      if (!before || before.status !== now.status || before.reason !== now.reason) {
        (now.status === 'True' ? log.info : log.warn)('resource status', { resource: key, ready: now.status, reason: now.reason, message: now.message });
      }
    }
    statuses = r.statuses;
    if (r.outcome.applyError) log.error('apply failed', { owner, err: r.outcome.applyError });
    opts.onPass?.(r);
    return r;
  }

  /** Runs a pass, or schedules one more if a pass is running (so no change is ever dropped). */
  function trigger(): Promise<PassResult> {
    if (running) {
      again = true;
      return running;
    }
    running = pass().finally(() => {
      running = undefined;
      if (again && !closed) {
        again = false;
        trigger().catch((e) => log.error('folder pass failed', { owner, err: errMsg(e) }));
      }
    });
    return running;
  }

  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(dir, { recursive: true }, (_event, name) => {
      if (closed) return;
      if (name) dirty.add(String(name));
      clearTimeout(debounce);
      debounce = setTimeout(() => trigger().catch((e) => log.error('folder pass failed', { owner, err: errMsg(e) })), opts.debounceMs ?? 25);
    });
    watcher.on('error', (e) => log.warn('folder watch failed; periodic rescan continues', { dir, err: errMsg(e) }));
  } catch (e) {
    log.warn('folder watch unavailable; periodic rescan only', { dir, err: errMsg(e) });
  }
  const rescanMs = opts.rescanMs ?? 10_000;
  const timer = rescanMs > 0 ? setInterval(() => void trigger().catch((e) => log.error('folder pass failed', { owner, err: errMsg(e) })), rescanMs) : undefined;
  timer?.unref();

  const ready = trigger().then(() => {
    log.info('policy folder loaded', { dir, owner, resources: statuses.size, problems: problems.length });
  });

  return {
    owner,
    ready,
    statuses: () => statuses,
    problems: () => problems,
    resync: () => {
      // A pass in flight may have scanned before the caller's change: run one after it.
      return running ? running.catch(() => undefined).then(() => trigger()) : trigger();
    },
    async close() {
      closed = true;
      clearTimeout(debounce);
      if (timer) clearInterval(timer);
      watcher?.close();
      await running?.catch(() => {});
    },
  };
}
