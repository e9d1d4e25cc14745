/** Test helper: an entry point as a child process, resolved at its `up` log line (runtime/lib/process.ts). */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Child {
  ports: Record<string, number>;
  lines: string[];
  signal(s: NodeJS.Signals): void;
  exited: Promise<number | null>;
}

/** Spawns `cmd` (env: PATH, LOG_LEVEL and `env` only) and resolves at its `up` log line (rejects if it exits first). */
export function startEntry(cmd: string[], env: Record<string, string>, cwd = ROOT): Promise<Child> {
  const child = spawn(cmd[0]!, cmd.slice(1), { cwd, env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'info', ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const lines: string[] = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${cmd.join(' ')} did not come up:\n${lines.join('\n')}`));
    }, 150_000);
    createInterface({ input: child.stderr! }).on('line', (line) => {
      lines.push(line);
      let ev: Record<string, unknown>;
      try {
        ev = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      if (ev.msg !== 'up') return;
      clearTimeout(timer);
      const ports: Record<string, number> = {};
      for (const [k, v] of Object.entries(ev)) if (typeof v === 'number') ports[k] = v;
      resolve({ ports, lines, signal: (s) => child.kill(s), exited });
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${cmd.join(' ')} exited with ${code}:\n${lines.join('\n')}`));
    });
  });
}

/** Registers public service `web` through the management API (SPEC 4.3). */
export async function addPublicService(mgmtPort: number): Promise<void> {
  const r = await fetch(`http://127.0.0.1:${mgmtPort}/v1/registry/services`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'web', upstream: 'web.default.svc:80', owner: 'platform', public: true, kind: 'service', dataClass: 'public' }),
  });
  if (r.status >= 300) throw new Error(`registry upsert: ${r.status} ${await r.text()}`);
}
