import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { lockFolder } from './folder-lock.js';
import { RemotePglite } from './pglite-remote.js';

const dir = mkdtempSync(join(tmpdir(), 'writ-lock-'));
/** Processes `lockElsewhere` started: killed at the end even when a test failed before it could. */
const children: ReturnType<typeof spawn>[] = [];
afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** Opens `folder` with PGlite in another Node process; resolves with its stderr and exit code. */
function openElsewhere(folder: string): Promise<{ code: number; stderr: string }> {
  const remote = fileURLToPath(new URL('./pglite-remote.ts', import.meta.url));
  const code = `const { RemotePglite } = await import(${JSON.stringify(remote)}); const pg = await RemotePglite.open({ dataDir: process.argv[1] }); await pg.close(); console.log('opened');`;
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code, folder], { timeout: 120_000 }, (e, _out, stderr) =>
      resolve({ code: e ? ((e as { code?: number }).code ?? 1) : 0, stderr }),
    );
  });
}

/** Takes the lock of `folder` in another Node process, which then holds it until killed. */
function lockElsewhere(folder: string): { child: ReturnType<typeof spawn>; outcome: Promise<string> } {
  const lock = fileURLToPath(new URL('./folder-lock.ts', import.meta.url));
  const code = `const { lockFolder } = await import(${JSON.stringify(lock)}); try { await lockFolder(process.argv[1]); console.log('locked'); setInterval(() => {}, 1000); } catch (e) { console.log(e.message); process.exit(3); }`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code, folder], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  const outcome = new Promise<string>((resolve) => {
    let out = '';
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('\n')) resolve(out.trim());
    });
    child.once('exit', () => resolve(out.trim()));
  });
  return { child, outcome };
}

describe('one process per PGlite data folder', () => {
  it('a lock held by a live process refuses; once that process is gone its lock is taken over', async () => {
    const folder = join(dir, 'a');
    const other = spawn('sleep', ['60']);
    writeFileSync(`${folder}.lock`, `${other.pid}\n`);
    await expect(lockFolder(folder)).rejects.toThrow(new RegExp(`in use by process ${other.pid}`));
    const gone = new Promise((r) => other.once('exit', r));
    other.kill();
    await gone;
    const release = await lockFolder(folder);
    expect(readFileSync(`${folder}.lock`, 'utf8').trim()).toBe(String(process.pid));
    release();
    expect(existsSync(`${folder}.lock`)).toBe(false);
  });

  it('opens within this process share the lock; the file goes with the last release', async () => {
    const folder = join(dir, 'b');
    const [first, second] = await Promise.all([lockFolder(folder), lockFolder(folder)]);
    first();
    first();
    expect(existsSync(`${folder}.lock`)).toBe(true);
    second();
    expect(existsSync(`${folder}.lock`)).toBe(false);
    // Released whole: taken again at once (the OS half too).
    (await lockFolder(folder))();
  });

  it.runIf(process.platform === 'linux')(
    'while the pid file is away (a takeover in flight), the OS half of the lock still refuses a second process',
    async () => {
      const folder = join(dir, 'd');
      const release = await lockFolder(folder);
      // What a process taking over an abandoned lock does between its unlink and its link: with the
      // pid file alone, a second process starting now would take the folder too.
      rmSync(`${folder}.lock`);
      const second = lockElsewhere(folder);
      expect(await second.outcome).toMatch(/is in use by process/);
      release();
      const third = lockElsewhere(folder);
      expect(await third.outcome).toBe('locked');
      third.child.kill();
    },
    60_000,
  );

  it('a holder killed with SIGKILL leaves its pid file behind; the next process takes the lock over', async () => {
    const folder = join(dir, 'e');
    const holder = lockElsewhere(folder);
    expect(await holder.outcome).toBe('locked');
    const pid = holder.child.pid!;
    await expect(lockFolder(folder)).rejects.toThrow(new RegExp(`in use by process ${pid}`));
    const gone = new Promise((r) => holder.child.once('exit', r));
    holder.child.kill('SIGKILL');
    await gone;
    expect(readFileSync(`${folder}.lock`, 'utf8').trim()).toBe(String(pid));
    const release = await lockFolder(folder);
    expect(readFileSync(`${folder}.lock`, 'utf8').trim()).toBe(String(process.pid));
    release();
  }, 60_000);

  it('a second process cannot open a folder this one has open, and can once it is closed', async () => {
    const folder = join(dir, 'c');
    const pg = await RemotePglite.open({ dataDir: folder });
    const refused = await openElsewhere(folder);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(`is in use by process ${process.pid}`);
    await pg.close();
    const opened = await openElsewhere(folder);
    expect(opened.code, opened.stderr).toBe(0);
    // Still this process's to reopen.
    const again = await RemotePglite.open({ dataDir: folder });
    expect((await again.query<{ n: number }>('select 1 as n')).rows).toEqual([{ n: 1 }]);
    await again.close();
  }, 180_000);
});
