/**
 * The official MCP conformance suite (`@modelcontextprotocol/conformance` 0.1.10, its CLI as
 * published) runs its server scenarios against a reference server twice, direct and through the
 * gateway as an agent allowed everything on the service, and every scenario must come out the
 * same both ways (issue 42's must-show).
 *
 * The suite's client sends no headers of its own, so it reaches the gateway through a header hop:
 * a reverse proxy owned by this test that adds `X-Writ-Actor` (header mode, as an agent's sidecar
 * or mesh would) and passes everything else, streams included, untouched.
 *
 * The reference server (conformance-server-testing.ts) implements what each scenario describes,
 * since the suite's package ships none and server-everything names its tools otherwise: so every
 * scenario passes direct, and through the gateway it proves sampling and elicitation requests,
 * logging and progress notifications, and concurrent SSE streams all pass through.
 */
import http from 'node:http';
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { listen } from '../lib/http.js';
import { startConformanceServer } from './conformance-server-testing.js';
import type { McpTestServer } from './everything-testing.js';
import { startMcpHarness, type McpHarness } from './gateway-testing.js';

type Outcome = 'pass' | 'fail';

/** Every server scenario of the active suite (`conformance list`), with its outcome against the reference server. */
const EXPECTED: Record<string, Outcome> = {
  'server-initialize': 'pass',
  'logging-set-level': 'pass',
  ping: 'pass',
  'completion-complete': 'pass',
  'tools-list': 'pass',
  'tools-call-simple-text': 'pass',
  'tools-call-image': 'pass',
  'tools-call-audio': 'pass',
  'tools-call-embedded-resource': 'pass',
  'tools-call-mixed-content': 'pass',
  'tools-call-with-logging': 'pass',
  'tools-call-error': 'pass',
  'tools-call-with-progress': 'pass',
  'tools-call-sampling': 'pass',
  'server-sse-multiple-streams': 'pass',
  'resources-list': 'pass',
  'resources-read-text': 'pass',
  'resources-read-binary': 'pass',
  'resources-templates-read': 'pass',
  'resources-subscribe': 'pass',
  'resources-unsubscribe': 'pass',
  'prompts-list': 'pass',
  'prompts-get-simple': 'pass',
  'prompts-get-with-args': 'pass',
  'prompts-get-embedded-resource': 'pass',
  'prompts-get-with-image': 'pass',
};

const cli = path.join(path.dirname(createRequire(import.meta.url).resolve('@modelcontextprotocol/conformance/package.json')), 'dist/index.js');

interface Check {
  id: string;
  status: string;
  errorMessage?: string;
}

/** Runs the active suite against `url`; each scenario's checks as the CLI saved them (`-o`: `server-<scenario>-<time>/checks.json`). */
async function runSuite(url: string): Promise<Map<string, Check[]>> {
  const dir = await mkdtemp(path.join(tmpdir(), 'writ-mcp-conformance-'));
  try {
    // Exit status 1 means some check failed: the outcomes are read from the files, not the status.
    await new Promise<void>((resolve, reject) =>
      execFile(process.execPath, [cli, 'server', '--url', url, '-o', dir], { timeout: 60_000 }, (e) =>
        e && (e as { code?: unknown }).code !== 1 ? reject(e) : resolve(),
      ),
    );
    const out = new Map<string, Check[]>();
    for (const d of await readdir(dir)) {
      const scenario = d.replace(/^server-/, '').replace(/-\d{4}-\d\d-\d\dT.*$/, '');
      out.set(scenario, JSON.parse(await readFile(path.join(dir, d, 'checks.json'), 'utf8')) as Check[]);
    }
    return out;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const outcome = (checks: Check[]): Outcome => (checks.length > 0 && checks.every((c) => c.status !== 'FAILURE') ? 'pass' : 'fail');

/** A reverse proxy to `target` adding the agent's header to every request; bodies and answers (SSE too) stream through. */
async function headerHop(target: string, add: Record<string, string>): Promise<{ url: string; close(): Promise<void> }> {
  const t = new URL(target);
  const server = http.createServer((req, res) => {
    const up = http.request({ host: t.hostname, port: t.port, path: t.pathname, method: req.method, headers: { ...req.headers, ...add } }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    res.on('close', () => up.destroy());
    req.pipe(up);
  });
  const port = await listen(server, '127.0.0.1:0');
  return {
    url: `http://127.0.0.1:${port}${t.pathname}`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

let h: McpHarness;
let reference: McpTestServer;
let hop: Awaited<ReturnType<typeof headerHop>>;
beforeAll(async () => {
  h = await startMcpHarness();
  reference = await startConformanceServer();
  await h.run.cp.plane.registry.upsert({ name: 'reference', upstream: reference.upstream, kind: 'tool', protocol: 'mcp' });
  await h.agent({ name: 'conformer', allowTools: ['reference'] });
  hop = await headerHop(h.url.replace(/\/everything$/, '/reference'), { [H.actor]: 'conformer' });
}, 120_000);
afterAll(async () => {
  await hop?.close();
  await reference?.close();
  await h?.close();
});

describe('MCP conformance suite: direct and through the gateway', () => {
  it('every server scenario has the same outcome through the gateway as direct, as the table pins', async () => {
    const direct = await runSuite(`http://${reference.upstream}/mcp`);
    const gateway = await runSuite(hop.url);
    const table = (runs: Map<string, Check[]>) => Object.fromEntries([...runs].map(([s, c]) => [s, outcome(c)]));
    expect(table(direct)).toEqual(EXPECTED);
    // Scenario by scenario, with the failing checks' messages when they differ.
    const failures = (runs: Map<string, Check[]>) =>
      Object.fromEntries([...runs].map(([s, c]) => [s, c.filter((x) => x.status === 'FAILURE').map((x) => `${x.id}: ${x.errorMessage ?? ''}`)]));
    expect(table(gateway)).toEqual(EXPECTED);
    expect(failures(gateway)).toEqual(failures(direct));
  }, 90_000);

  it('every scenario reached the gateway as the agent: its messages are in the audit chain, and the chain verifies', async () => {
    const records = (await (await fetch(`${h.mgmt}/v1/audit?limit=1000`)).json()) as { action: string; actor?: string; allow: boolean }[];
    const mine = records.filter((r) => r.action === 'tool.call' && r.actor === 'conformer');
    expect(mine.length).toBeGreaterThan(Object.keys(EXPECTED).length);
    expect(mine.filter((r) => !r.allow)).toEqual([]);
    expect(((await (await fetch(`${h.mgmt}/v1/audit/verify`)).json()) as { ok: boolean }).ok).toBe(true);
  });
});
