/**
 * One process per PGlite data folder. PGlite takes no lock of its own: its engine is a single
 * backend that assumes the folder is its alone, so two processes on one folder both start, both
 * write, and the folder is corrupt (measured: a second all-in-one on `.data/writ` started and ran).
 * PostgreSQL guards its data directory with `postmaster.pid`; this is the same idea beside the
 * folder (`<folder>.lock`, so nothing foreign sits inside what initdb creates): a file holding the
 * owner's pid, created exclusively. One left by a process that is gone (a crash, a kill -9, a
 * container restart that gave this process the old pid) is taken over. Not an OS lock (Node has no
 * flock): two processes starting at the same instant on an abandoned lock could both take it over.
 */
import { linkSync, mkdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

/** The pid in a lock file, or undefined when it is missing or unreadable. */
function ownerOf(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists, owned by someone else.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Lock files this process holds, and how many opens hold each. */
const held = new Map<string, number>();

/**
 * Takes the lock of `folder` for this process; returns its release (idempotent). Throws when a
 * live process holds it. Opens of one folder within this process share the lock (counted).
 */
export function lockFolder(folder: string): () => void {
  const file = `${resolve(folder)}.lock`;
  if (!held.has(file)) take(file, folder);
  held.set(file, (held.get(file) ?? 0) + 1);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    const n = (held.get(file) ?? 1) - 1;
    if (n > 0) return void held.set(file, n);
    held.delete(file);
    try {
      if (ownerOf(file) === process.pid) unlinkSync(file);
    } catch {}
  };
}

function take(file: string, folder: string): void {
  mkdirSync(dirname(file), { recursive: true });
  for (let attempt = 0; ; attempt++) {
    // Written aside and linked into place (link fails if the name exists): the lock appears with
    // its pid in it, so no one reads an empty lock mid-write and takes it for abandoned.
    const aside = `${file}.${process.pid}`;
    try {
      writeFileSync(aside, `${process.pid}\n`, { mode: 0o600 });
      try {
        linkSync(aside, file);
      } catch (e) {
        // A file system without hard links (some network volumes): created exclusively instead.
        if ((e as NodeJS.ErrnoException).code === 'EEXIST') throw e;
        writeFileSync(file, `${process.pid}\n`, { mode: 0o600, flag: 'wx' });
      }
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const owner = ownerOf(file);
      // A second attempt that finds the file again lost a race to another process starting now.
      if (attempt > 0 || (owner !== undefined && owner !== process.pid && alive(owner))) {
        throw new Error(`PGlite data folder ${folder} is in use by process ${owner ?? '(unknown)'} (${file}): one process per folder`, { cause: e });
      }
      // Left by a process that is gone, or by an earlier life of this pid: taken over.
      try {
        unlinkSync(file);
      } catch {}
    } finally {
      rmSync(aside, { force: true });
    }
  }
}
