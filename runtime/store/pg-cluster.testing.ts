/**
 * Test helper: a PostgreSQL cluster of the test's own (initdb into a temp folder, pg_ctl on a free
 * loopback port), so a test can stop and start the database for real. initdb refuses to run as
 * root, so the server runs as the `postgres` OS user (`runuser -u postgres --`) when we are root.
 * `pgBinaries()` is undefined where no PostgreSQL server binaries are installed: tests skip then.
 */
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The folder holding initdb and pg_ctl (newest major under /usr/lib/postgresql), or undefined. */
export function pgBinaries(): string | undefined {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const majors = readdirSync(root).filter((d) => existsSync(join(root, d, 'bin', 'pg_ctl')) && existsSync(join(root, d, 'bin', 'initdb')));
  majors.sort((a, b) => Number(b) - Number(a));
  return majors[0] ? join(root, majors[0], 'bin') : undefined;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

export interface PgCluster {
  url: string;
  port: number;
  start(): Promise<void>;
  /** `immediate` drops every connection at once (the outage); `fast` is a clean shutdown. */
  stop(mode?: 'immediate' | 'fast'): Promise<void>;
  destroy(): Promise<void>;
}

export async function startPgCluster(): Promise<PgCluster> {
  const bin = pgBinaries();
  if (!bin) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql');
  const asRoot = userInfo().uid === 0;
  const dir = mkdtempSync(join(tmpdir(), 'writ-pg-'));
  chmodSync(dir, 0o700);
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: g } = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(stdout.trim()), Number(g.trim()));
  }
  const sh = (cmd: string, args: string[]) => (asRoot ? run('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args]) : run(join(bin, cmd), args));
  const data = join(dir, 'data');
  await sh('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
  const port = await freePort();
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50`;
  const cluster: PgCluster = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start: async () => {
      await sh('pg_ctl', ['-D', data, '-o', opts, '-l', join(dir, 'log'), '-w', '-t', '30', 'start']);
    },
    stop: async (mode = 'immediate') => {
      await sh('pg_ctl', ['-D', data, '-m', mode, '-w', 'stop']);
    },
    destroy: async () => {
      await sh('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await cluster.start();
  return cluster;
}
