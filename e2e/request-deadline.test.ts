/**
 * A client that never finishes sending its request does not hold a connection of the management,
 * identity-authority or broker listener for Node's default 300 s: past `WRIT_REQUEST_TIMEOUT_MS`
 * the answer is 408 and the connection closes (as `/authz` does past its own deadline).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../runtime/lib/log.js';
import { startWrit, type Writ } from '../runtime/main.js';

setLogLevel('error');

/** Sends a head (naming an agent, so the broker reads on) announcing 100 body bytes and 3 of them, then waits for whatever the server does. */
function trickle(port: number, path: string): Promise<{ answer: string; ms: number }> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const s = net.connect(port, '127.0.0.1', () => {
      s.write(`POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nx-writ-actor: agent-a\r\ncontent-length: 100\r\n\r\n{"a`);
    });
    let answer = '';
    s.on('data', (d) => (answer += d.toString('latin1')));
    s.on('close', () => resolve({ answer, ms: Date.now() - t0 }));
    s.on('error', reject);
    s.setTimeout(10_000, () => s.destroy(new Error(`no answer from ${path} within 10 s`)));
  });
}

describe('WRIT_REQUEST_TIMEOUT_MS bounds a request that never finishes', () => {
  let writ: Writ;
  const dir = mkdtempSync(join(tmpdir(), 'writ-deadline-'));
  beforeAll(async () => {
    writ = await startWrit({
      PATH: process.env.PATH,
      WRIT_DATA_DIR: join(dir, 'data'),
      WRIT_EXAMPLES: 'false',
      WRIT_REQUEST_TIMEOUT_MS: '400',
      PORT: '0',
      DECISION_ADDR: '127.0.0.1:0',
      MGMT_ADDR: '127.0.0.1:0',
      EGRESS_PROXY_ADDR: '127.0.0.1:0',
      BROKER_ADDR: '127.0.0.1:0',
    });
  });
  afterAll(async () => {
    await writ?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers 408 and closes on the management, identity and broker listeners', async () => {
    const targets = [
      ['management', writ.ports.mgmt, '/v1/registry/services'],
      ['identity', writ.ports.identity, '/v1/keys'],
      ['broker', writ.ports.broker!, '/v1/chat/completions'],
    ] as const;
    const results = await Promise.all(targets.map(([, port, path]) => trickle(port, path)));
    results.forEach((r, i) => {
      expect(r.answer, targets[i]![0]).toMatch(/^HTTP\/1\.1 408 /);
      expect(r.ms, targets[i]![0]).toBeLessThan(5000);
    });
  });

  it('refuses a deadline that is not a positive integer', async () => {
    await expect(startWrit({ PATH: process.env.PATH, WRIT_DATA_DIR: join(dir, 'other'), WRIT_REQUEST_TIMEOUT_MS: '0' })).rejects.toThrow(
      /WRIT_REQUEST_TIMEOUT_MS/,
    );
  });
});
