/**
 * Every per-component entry point as a real child process (`node --import tsx <entry>`) on
 * ephemeral ports: it logs its `up` line with the bound ports, answers its health probe, and
 * exits 0 on SIGTERM; a bad setting exits 1 with one `start failed` line.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { H } from './brand.js';
import { checkClient } from '../control-plane/grpc/testing.js';
import { makePki } from '../../webhook/tls-testing.js';
import { addPublicService, startEntry, type Child } from './entry-testing.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const tsx = (entry: string) => [process.execPath, '--import', 'tsx', join(ROOT, entry)];
const ANY = '127.0.0.1:0';

describe('per-component entry points', { timeout: 240_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-entry-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  async function stopsCleanly(c: Child, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    c.signal(signal);
    expect(await c.exited).toBe(0);
    expect(c.lines.some((l) => l.includes('"msg":"stopped"'))).toBe(true);
  }

  it('control plane: management, /authz and gRPC health; SIGTERM exits 0', async () => {
    const c = await startEntry(tsx('runtime/control-plane/main.ts'), {
      REGISTRY_BACKEND: 'pglite',
      REGISTRY_DATA_DIR: join(dir, 'cp'),
      DECISION_ADDR: ANY,
      MGMT_ADDR: ANY,
    });
    expect((await fetch(`http://127.0.0.1:${c.ports.mgmt}/healthz`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${c.ports.mgmt}/readyz`)).status).toBe(200);
    await addPublicService(c.ports.mgmt!);
    // A public service is allowed, an unknown one denied.
    expect((await fetch(`http://127.0.0.1:${c.ports.decision}/authz`, { headers: { [H.service]: 'web' } })).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${c.ports.decision}/authz`, { headers: { [H.service]: 'nope' } })).status).toBe(403);
    expect(c.ports.proxy).toBeUndefined(); // no AGENT_IDP_URL: no forward proxy
    // gRPC ext_authz beside /authz (an ephemeral decision port means an ephemeral gRPC port).
    const grpc = checkClient(c.ports.grpc!);
    expect(await grpc.health()).toBe(1);
    grpc.close();
    await stopsCleanly(c);
  });

  it('identity authority and a control plane wired to it (forward proxy on); SIGINT and SIGTERM exit 0', async () => {
    const idp = await startEntry(tsx('runtime/identity/main.ts'), { IDP_STORE_BACKEND: 'memory', PORT: '0' });
    const url = `http://127.0.0.1:${idp.ports.identity}`;
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    for (let i = 0; (await fetch(`${url}/readyz`)).status !== 200; i++) {
      if (i > 100) throw new Error('identity authority never ready');
      await new Promise((r) => setTimeout(r, 100));
    }
    const created = await fetch(`${url}/v1/agents`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'a1', role: 'worker', capabilities: [] }),
    });
    expect(created.status).toBe(201);
    const cp = await startEntry(tsx('runtime/control-plane/main.ts'), {
      REGISTRY_BACKEND: 'memory',
      DECISION_ADDR: ANY,
      MGMT_ADDR: ANY,
      EGRESS_PROXY_ADDR: ANY,
      AGENT_IDP_URL: url,
    });
    expect(cp.ports.proxy).toBeGreaterThan(0);
    await stopsCleanly(cp);
    await stopsCleanly(idp, 'SIGINT');
  });

  it('broker: probes; SIGTERM exits 0', async () => {
    const c = await startEntry(tsx('runtime/broker/main.ts'), { BROKER_ADDR: ANY });
    expect((await fetch(`http://127.0.0.1:${c.ports.broker}/health/liveliness`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${c.ports.broker}/health/readiness`)).status).toBe(200);
    await stopsCleanly(c);
  });

  it('egress gateway: /healthz and /readyz on its listener; SIGTERM exits 0', async () => {
    const c = await startEntry(tsx('runtime/egress-gateway/main.ts'), { EGRESS_GATEWAY_ADDR: ANY, EGRESS_GATEWAY_AUTHZ_URL: 'http://127.0.0.1:1/authz' });
    expect((await fetch(`http://127.0.0.1:${c.ports.gateway}/healthz`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${c.ports.gateway}/readyz`)).status).toBe(200);
    await stopsCleanly(c);
  });

  it('webhook: flags, /healthz on the health address; SIGTERM exits 0', async () => {
    const pki = makePki(dir, 'entry');
    writeFileSync(join(dir, 'tls.crt'), pki.cert);
    writeFileSync(join(dir, 'tls.key'), pki.key);
    const c = await startEntry(
      [
        ...tsx('webhook/main.ts'),
        '-addr',
        ANY,
        '-health-addr',
        ANY,
        '-idp-url',
        'http://127.0.0.1:9',
        '-proxy-url',
        'http://proxy:80',
        '-tls-cert-file',
        join(dir, 'tls.crt'),
        '-tls-key-file',
        join(dir, 'tls.key'),
      ],
      {},
    );
    expect(c.ports.webhook).toBeGreaterThan(0);
    expect((await fetch(`http://127.0.0.1:${c.ports.health}/healthz`)).status).toBe(200);
    await stopsCleanly(c);
  });

  it('a bad setting exits 1 with one start-failed line naming it', async () => {
    const bad = startEntry(tsx('runtime/control-plane/main.ts'), { REGISTRY_BACKEND: 'postgres', DECISION_ADDR: ANY, MGMT_ADDR: ANY });
    await expect(bad).rejects.toThrow(/exited with 1:[\s\S]*start failed[\s\S]*REGISTRY_DB_URL/);
    await expect(startEntry([...tsx('webhook/main.ts'), '-bogus'], {})).rejects.toThrow(/exited with 1:[\s\S]*unknown flag -bogus/);
  });
});
