/**
 * The all-in-one entry point (`npm start` = `tsx runtime/main.ts`) as a real child process on
 * ephemeral ports and a temporary PGlite folder: every listener answers, the parts are wired
 * together (control plane -> identity authority, forward proxy and broker on), examples are loaded once, SIGTERM shuts down
 * cleanly, and a restart on the same folder keeps the registry, the issuer DID and the audit chain.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { H, metric } from '../runtime/lib/brand.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
// As `npm start` runs it (exec node --import tsx): signals go to the server itself. The tsx CLI's
// relay SIGKILLs its child when it does not confirm a signal within 60 ms, which a loaded machine misses.
const NODE_ARGS = ['--import', 'tsx'];

interface Up {
  child: ChildProcess;
  ports: Record<string, number>;
  exited: Promise<number | null>;
}

/** A model provider (OpenAI-compatible) answering every completion with 12 + 8 tokens of usage. */
async function fakeProvider(): Promise<{ server: http.Server; port: number }> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const body = JSON.stringify({
        id: 'c1',
        object: 'chat.completion',
        created: 1,
        model: 'provider-mini',
        choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 12, completion_tokens: 8, total_tokens: 20 },
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as { port: number }).port };
}

/** Starts runtime/main.ts and resolves with the ports of its "writ is up" log line. */
function startMain(dataDir: string, env: Record<string, string> = {}): Promise<Up> {
  const child = spawn(process.execPath, [...NODE_ARGS, join(ROOT, 'runtime/main.ts')], {
    cwd: ROOT,
    env: {
      ...process.env,
      // A folder that does not exist yet, as on a fresh clone (no .data/).
      WRIT_DATA_DIR: join(dataDir, 'data', 'writ'),
      PORT: '0',
      DECISION_ADDR: '127.0.0.1:0',
      MGMT_ADDR: '127.0.0.1:0',
      EGRESS_PROXY_ADDR: '127.0.0.1:0',
      BROKER_ADDR: '127.0.0.1:0',
      LOG_LEVEL: 'info',
      TEST_DATABASE_URL: '',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    const lines: string[] = [];
    const timer = setTimeout(() => reject(new Error(`main did not come up:\n${lines.join('\n')}`)), 60_000);
    createInterface({ input: child.stderr! }).on('line', (line) => {
      lines.push(line);
      try {
        const ev = JSON.parse(line) as { msg?: string } & Record<string, unknown>;
        if (ev.msg === 'writ is up') {
          clearTimeout(timer);
          const ports: Record<string, number> = {};
          for (const [k, v] of Object.entries(ev)) if (typeof v === 'number') ports[k] = v;
          resolve({ child, ports, exited });
        }
      } catch {
        // not a log line
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`main exited with ${code}:\n${lines.join('\n')}`));
    });
  });
}

/** A plain-HTTP request in absolute form through the forward proxy (no credentials). */
function proxyGet(port: number, url: string): Promise<{ status: number; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'GET', path: url, headers: { host: new URL(url).host } }, (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0, headers: res.headers });
    });
    req.on('error', reject);
    req.end();
  });
}

async function stop(up: Up): Promise<number | null> {
  up.child.kill('SIGTERM');
  return up.exited;
}

const json = async <T>(url: string, init?: RequestInit): Promise<{ status: number; body: T }> => {
  const res = await fetch(url, init);
  return { status: res.status, body: (await res.json()) as T };
};

describe('all-in-one runtime/main.ts', { timeout: 120_000 }, () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'writ-main-'));
  let up: Up | undefined;
  let provider: Awaited<ReturnType<typeof fakeProvider>> | undefined;
  afterAll(async () => {
    if (up && up.child.exitCode === null) await stop(up);
    provider?.server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('starts every listener, wired together, with the examples loaded', async () => {
    provider = await fakeProvider();
    const models = join(dataDir, 'models.json');
    const apiBase = `http://127.0.0.1:${provider.port}/v1`;
    writeFileSync(
      models,
      JSON.stringify({
        models: [{ name: 'gpt-4o-mini', provider: 'openai', model: 'provider-mini', apiBase, priceInputPer1k: 0.00015, priceOutputPer1k: 0.0006 }],
      }),
    );
    up = await startMain(dataDir, { BROKER_CONFIG: models, BROKER_PROVIDER_KEY: 'sk-test' });
    const { identity, decision, mgmt } = up.ports;
    expect(identity).toBeGreaterThan(0);

    expect((await fetch(`http://127.0.0.1:${mgmt}/readyz`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${identity}/readyz`)).status).toBe(200);

    const services = await json<{ name: string }[]>(`http://127.0.0.1:${mgmt}/v1/registry/services`);
    expect(services.body.map((s) => s.name)).toEqual(expect.arrayContaining(['web', 'research-agent', 'ledger', 'gpt-4o-mini']));
    const agent = await json<{ name: string; provisioned: boolean }>(`http://127.0.0.1:${identity}/v1/agents/research-agent`);
    expect(agent).toMatchObject({ status: 200, body: { name: 'research-agent', provisioned: false } });

    // Public ingress allowed; private ingress denied.
    expect((await fetch(`http://127.0.0.1:${decision}/authz`, { headers: { [H.service]: 'web' } })).status).toBe(200);

    // The control plane asks this process's identity authority: a regulated egress without an
    // approved delegation is 401 + needs-approval (without AGENT_IDP_URL it would be a 403).
    const regulated = await fetch(`http://127.0.0.1:${decision}/authz`, {
      headers: {
        [H.actor]: 'research-agent',
        [H.service]: 'ledger',
        [H.onBehalfOf]: 'alice@example.com',
        [H.task]: 't-1',
        [H.targetKind]: 'tool',
        [H.action]: 'ledger:read',
        [H.resource]: 'acct/1',
      },
    });
    // A failure shows the body: which rule denied, and why.
    expect(regulated.status, await regulated.clone().text()).toBe(401);
    expect(regulated.headers.get(H.needsApproval)).toBe('true');

    // The forward proxy is on (AGENT_IDP_URL is set) and wants an agent VP.
    const proxied = await proxyGet(up.ports.proxy!, 'http://web.default.svc/');
    expect(proxied.status).toBe(407);
    expect(proxied.headers['proxy-authenticate']).toMatch(/^Bearer/);
    const queue = await json<unknown[]>(`http://127.0.0.1:${mgmt}/v1/egress/requests`);
    expect(queue.status).toBe(200);

    // The broker answers its probes and asks this process's decision engine (in process): an
    // unknown actor is refused, and the decision is audited like any /authz call.
    expect((await fetch(`http://127.0.0.1:${up.ports.broker}/health/readiness`)).status).toBe(200);
    const chat = await fetch(`http://127.0.0.1:${up.ports.broker}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-writ-actor': 'nobody' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chat.status).toBe(403);
    expect(await chat.json()).toMatchObject({ error: { message: expect.any(String) } });
    const audit = await json<{ actor?: string; service?: string; allow: boolean }[]>(`http://127.0.0.1:${mgmt}/v1/audit?limit=5`);
    expect(audit.body.some((r) => r.actor === 'nobody' && r.service === 'gpt-4o-mini' && !r.allow)).toBe(true);

    // An allowed completion: its usage is recorded in process (no BROKER_USAGE_URL) and shows in
    // the agent's budget and the token counter.
    const ok = await fetch(`http://127.0.0.1:${up.ports.broker}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', [H.actor]: 'research-agent', [H.onBehalfOf]: 'alice@example.com', [H.task]: 't-2' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 }),
    });
    expect(ok.status, await ok.clone().text()).toBe(200);
    const counted = async () => {
      const text = await (await fetch(`http://127.0.0.1:${mgmt}/metrics`)).text();
      return text.split('\n').find((l) => l.startsWith(`${metric('token_usage_total')}{`) && l.includes('agent="research-agent"'));
    };
    await expect.poll(counted, { timeout: 10_000, interval: 100 }).toMatch(/ 20$/);
  });

  it('SIGTERM exits 0; a restart on the same folder keeps registry, issuer DID and audit chain', async () => {
    const first = up!;
    const issuer = await json<{ did: string }>(`http://127.0.0.1:${first.ports.identity}/v1/issuer`);
    const post = (body: unknown) =>
      fetch(`http://127.0.0.1:${first.ports.mgmt}/v1/registry/services`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    // The examples belong to the folder source: the API cannot take one over (409 naming the owner).
    const takeover = await post({ name: 'web', upstream: 'web.default.svc:8081', public: true });
    expect(takeover.status).toBe(409);
    expect(((await takeover.json()) as { error: string }).error).toMatch(/managed by "folder:/);
    expect((await post({ name: 'api-svc', upstream: 'api-svc.default.svc:8081', public: true })).status).toBe(200);
    const before = await json<unknown[]>(`http://127.0.0.1:${first.ports.mgmt}/v1/audit?limit=1000`);
    expect(await stop(first)).toBe(0);

    up = await startMain(dataDir);
    const { mgmt, identity } = up.ports;
    // The API's entry survives the restart; the folder's example is as the folder declares it.
    const own = await json<{ upstream: string }>(`http://127.0.0.1:${mgmt}/v1/registry/services/api-svc`);
    expect(own.body.upstream).toBe('api-svc.default.svc:8081');
    const web = await json<{ upstream: string }>(`http://127.0.0.1:${mgmt}/v1/registry/services/web`);
    expect(web.body.upstream).toBe('web.default.svc:80');
    expect((await json<{ did: string }>(`http://127.0.0.1:${identity}/v1/issuer`)).body.did).toBe(issuer.body.did);
    const after = await json<unknown[]>(`http://127.0.0.1:${mgmt}/v1/audit?limit=1000`);
    expect(after.body.length).toBeGreaterThanOrEqual(before.body.length);
    const verify = await json<{ ok: boolean }>(`http://127.0.0.1:${mgmt}/v1/audit/verify`);
    expect(verify.body.ok).toBe(true);
  });
});
