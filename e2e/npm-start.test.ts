/**
 * `npm start` passes SIGTERM on to the server (issue 15 item 13): npm runs the start script through
 * `sh -c`, so a script that is not the server itself (`tsx ...` spawns node as its own child) leaves
 * the server running after npm exits. Spawns `npm start` on ephemeral ports and a temp data folder,
 * sends SIGTERM to npm only, and checks that the Writ process (the one holding the ports) exits.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** Every descendant of `pid` (children first found through /proc/<pid>/stat's ppid field). */
function descendants(pid: number): number[] {
  const parent = new Map<number, number>();
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      parent.set(Number(e), ppid);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const [c, pp] of parent)
      if (pp === p) {
        out.push(c);
        walk(c);
      }
  };
  walk(pid);
  return out;
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const canConnect = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });

describe('npm start', () => {
  it('SIGTERM to npm stops the Writ process', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'writ-npm-start-'));
    dirs.push(dir);
    const npm = spawn('npm', ['start', '--silent'], {
      cwd: ROOT,
      env: {
        ...process.env,
        WRIT_DATA_DIR: join(dir, 'data'),
        PORT: '0',
        DECISION_ADDR: '127.0.0.1:0',
        MGMT_ADDR: '127.0.0.1:0',
        EGRESS_PROXY_ADDR: '127.0.0.1:0',
        BROKER_ENABLED: 'false',
        WRIT_EXAMPLES: 'false',
        LOG_LEVEL: 'info',
        TEST_DATABASE_URL: '',
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const npmExited = new Promise<void>((resolve) => npm.on('exit', () => resolve()));
    const up = await new Promise<{ mgmt: number }>((resolve, reject) => {
      const lines: string[] = [];
      const timer = setTimeout(() => reject(new Error(`not up:\n${lines.join('\n')}`)), 60_000);
      createInterface({ input: npm.stderr! }).on('line', (line) => {
        lines.push(line);
        try {
          const ev = JSON.parse(line) as { msg?: string; mgmt?: number };
          if (ev.msg === 'writ is up' && typeof ev.mgmt === 'number') {
            clearTimeout(timer);
            resolve({ mgmt: ev.mgmt });
          }
        } catch {
          // not a log line
        }
      });
      void npmExited.then(() => reject(new Error(`npm exited before up:\n${lines.join('\n')}`)));
    });
    expect(await canConnect(up.mgmt)).toBe(true);
    const tree = descendants(npm.pid!);
    expect(tree.length).toBeGreaterThan(0);
    npm.kill('SIGTERM');
    await npmExited;
    // The server got the signal: it closes its listeners and exits (well within its own 15 s cap).
    const deadline = Date.now() + 20_000;
    while (tree.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    const left = tree.filter(alive);
    for (const pid of left) process.kill(pid, 'SIGKILL');
    expect(left).toEqual([]);
    expect(await canConnect(up.mgmt)).toBe(false);
  }, 90_000);
});
