/**
 * One process per PGlite data folder. PGlite takes no lock of its own: its engine is a single
 * backend that assumes the folder is its alone, so two processes on one folder both start, both
 * write, and the folder is corrupt (measured: a second all-in-one on `.data/writ` started and ran).
 * PostgreSQL guards its data directory with `postmaster.pid`; this is the same idea beside the
 * folder (`<folder>.lock`, so nothing foreign sits inside what initdb creates): a file holding the
 * owner's pid, created exclusively. One left by a process that is gone (a crash, a kill -9, a
 * container restart that gave this process the old pid) is taken over.
 *
 * A pid file alone has a race: two processes starting at the same instant on an abandoned lock
 * both see its owner gone, and both take it over. On Linux the lock is therefore also an OS lock:
 * a listening socket in the abstract namespace named after the folder (`hostGuard`), which only
 * one process can hold and the kernel releases when that process ends however it ends (Node has no
 * flock). It is taken first, so only its holder ever takes over a pid file. The guard covers the
 * processes of one network namespace (one host, pod or container); the pid file is what another
 * container sharing the volume sees.
 */
import { createHash } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { dirname, resolve } from 'node:path';
import { BRAND } from '../lib/brand.js';

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

/** Lock files this process holds: how many opens hold each, and the taking they share. */
const held = new Map<string, { opens: number; taken: Promise<net.Server | undefined> }>();

/**
 * Takes the lock of `folder` for this process; resolves with its release (idempotent). Rejects
 * when another process holds it. Opens of one folder within this process share the lock (counted).
 */
export async function lockFolder(folder: string): Promise<() => void> {
  const file = `${resolve(folder)}.lock`;
  let h = held.get(file);
  if (!h) held.set(file, (h = { opens: 0, taken: hostGuard(file, folder).then((guard) => takeFile(file, folder, guard)) }));
  h.opens++;
  let guard: net.Server | undefined;
  try {
    guard = await h.taken;
  } catch (e) {
    if (--h.opens === 0 && held.get(file) === h) held.delete(file);
    throw e;
  }
  let released = false;
  return () => {
    if (released) return;
    released = true;
    if (--h.opens > 0) return;
    held.delete(file);
    try {
      if (ownerOf(file) === process.pid) unlinkSync(file);
    } catch {}
    guard?.close();
  };
}

const inUse = (folder: string, file: string, owner: number | undefined, cause?: unknown) =>
  new Error(`PGlite data folder ${folder} is in use by process ${owner ?? '(unknown)'} (${file}): one process per folder`, { cause });

/**
 * The OS half of the lock (Linux): a socket listening on an abstract address named after the lock
 * file. Refused (EADDRINUSE) while another process of this network namespace holds it. Undefined
 * where there is no abstract namespace. It keeps no event loop alive and takes no connection.
 */
function hostGuard(file: string, folder: string): Promise<net.Server | undefined> {
  if (process.platform !== 'linux') return Promise.resolve(undefined);
  const path = `\0${BRAND}-folder-lock-${createHash('sha256').update(file).digest('hex').slice(0, 40)}`;
  return new Promise((taken, refused) => {
    const server = net.createServer((socket) => socket.destroy());
    // Any other refusal (a sandbox without unix sockets): the pid file alone, as elsewhere.
    server.once('error', (e: NodeJS.ErrnoException) => (e.code === 'EADDRINUSE' ? refused(inUse(folder, file, ownerOf(file), e)) : taken(undefined)));
    server.listen({ path }, () => {
      server.unref();
      taken(server);
    });
  });
}

/** The pid-file half; `guard` (held by now) is closed when the file cannot be taken. */
function takeFile(file: string, folder: string, guard: net.Server | undefined): net.Server | undefined {
  try {
    take(file, folder);
    return guard;
  } catch (e) {
    guard?.close();
    throw e;
  }
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
        throw inUse(folder, file, owner, e);
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
