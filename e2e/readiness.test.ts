/**
 * Readiness that means ready (issue 44 item 1): the all-in-one as a real child process, its
 * `/readyz` polled from the moment its management listener exists (the control plane's
 * `listening` log line, before the policy folder is applied), finds no 200 before `/authz`
 * answers and the example entries are listed.
 */
import { spawn } from 'node:child_process';
import { setTimeout as delay } from 'node:timers/promises';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ANY = '127.0.0.1:0';
const EXAMPLES = ['web', 'research-agent', 'ledger', 'gpt-4o-mini'];

interface Poll {
  status: number;
  body: { ready: boolean; reasons?: string[] };
}

/** Polls `/readyz` back to back until the first 200; at that moment checks /authz and the registry. */
async function pollUntilReady(mgmt: number, decision: number): Promise<{ polls: Poll[]; authz: number; services: string[] }> {
  const polls: Poll[] = [];
  for (;;) {
    const r = await fetch(`http://127.0.0.1:${mgmt}/readyz`);
    polls.push({ status: r.status, body: (await r.json()) as Poll['body'] });
    if (r.status === 200) break;
    await delay(10); // leave the 2-core machine to the process starting
  }
  const authz = (await fetch(`http://127.0.0.1:${decision}/authz`, { headers: { [H.service]: 'web' } })).status;
  const list = (await (await fetch(`http://127.0.0.1:${mgmt}/v1/registry/services`)).json()) as { name: string }[];
  return { polls, authz, services: list.map((s) => s.name) };
}

describe('all-in-one /readyz', { timeout: 180_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-readyz-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('answers no 200 before /authz answers and the example entries are listed', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'runtime/main.ts')], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '',
        LOG_LEVEL: 'info',
        WRIT_DATA_DIR: join(dir, 'data'),
        PORT: '0',
        DECISION_ADDR: ANY,
        DECISION_GRPC_ADDR: ANY,
        MGMT_ADDR: ANY,
        EGRESS_PROXY_ADDR: ANY,
        BROKER_ADDR: ANY,
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const lines: string[] = [];
    try {
      // The earliest moment a management port exists: the control plane's `listening` line.
      const ports = await new Promise<{ mgmt: number; decision: number }>((resolve, reject) => {
        createInterface({ input: child.stderr }).on('line', (line) => {
          lines.push(line);
          const ev = (line.startsWith('{') ? JSON.parse(line) : {}) as Record<string, unknown>;
          if (ev.msg === 'listening' && typeof ev.mgmt === 'number') resolve({ mgmt: ev.mgmt, decision: ev.decision as number });
        });
        void exited.then((code) => reject(new Error(`exited ${code}:\n${lines.join('\n')}`)));
      });
      const { polls, authz, services } = await pollUntilReady(ports.mgmt, ports.decision);
      // Not ready while the policy folder was still being applied, and it said why.
      const early = polls.filter((p) => p.status === 503);
      expect(early.length).toBeGreaterThan(0);
      expect(early[0]!.body.ready).toBe(false);
      expect(early[0]!.body.reasons!.some((r) => r.startsWith('starting'))).toBe(true);
      // The first 200 came only once /authz answers and the example entries are listed.
      expect(authz).toBe(200);
      expect(services).toEqual(expect.arrayContaining(EXAMPLES));
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  });
});
