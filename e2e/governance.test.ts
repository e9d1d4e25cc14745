/**
 * Governance reaches the decision, across processes: the identity authority and the control
 * plane run as their own entry points (PGlite in memory; each on a PostgreSQL database of its
 * own too when TEST_DATABASE_URL is set). A SCIM sync that deactivates an agent's owner runs the
 * cascade; within a second the agent's egress is 403 at /authz and through the forward proxy,
 * and its Membership VP is refused by the authority (the cascade revoked the VC).
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { close, listen } from '../runtime/lib/http.js';
import { startEntry, type Child } from '../runtime/lib/entry-testing.js';
import { loadIdentity, presentationFor } from '../runtime/identity/client.js';
import { ENTRA, entraSnapshot } from '../runtime/identity/enterprise/directory/fixtures.js';
import { TEST_DATABASE_URL } from '../runtime/store/testing.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const tsx = (entry: string) => [process.execPath, '--import', 'tsx', join(ROOT, entry)];
const ANY = '127.0.0.1:0';
const T = 'contoso';
const S = (oid: string) => `idp_a:${T}:${oid}`;

/** A database of its own on the test server, dropped afterwards. */
async function scratchDb(): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `writ_e2e_${randomBytes(5).toString('hex')}`;
  const admin = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  await admin.end();
  const u = new URL(TEST_DATABASE_URL!);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    async drop() {
      const a = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
      await a.unsafe(`drop database if exists ${name} with (force)`);
      await a.end();
    },
  };
}

const backends = TEST_DATABASE_URL ? ['pglite', 'postgres'] : ['pglite'];

describe.each(backends)('governance cuts egress across processes on %s', { timeout: 120_000 }, (backend) => {
  let idp: Child;
  let cp: Child;
  let upstream: http.Server;
  let upPort: number;
  const dbs: { drop(): Promise<void> }[] = [];
  let idpUrl: string;
  let mgmt: string;
  let authz: string;
  let vp: () => Promise<string>;

  const json = async (url: string, method = 'GET', body?: unknown): Promise<{ status: number; body: any }> => {
    const r = await fetch(url, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : undefined };
  };

  /** A plain HTTP GET through the forward proxy with the agent's VP. */
  const viaProxy = (proxyPort: number, token: string) =>
    new Promise<{ status: number; reason?: string }>((resolve, reject) => {
      const req = http.request(
        {
          host: '127.0.0.1',
          port: proxyPort,
          method: 'GET',
          path: `http://127.0.0.1:${upPort}/hello`,
          headers: { host: `127.0.0.1:${upPort}`, 'proxy-authorization': `Bearer ${token}` },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, reason: res.headers[H.denyReason] as string | undefined }));
        },
      );
      req.on('error', reject);
      req.end();
    });

  beforeAll(async () => {
    upstream = http.createServer((_q, s) => s.end('hello from upstream'));
    upPort = await listen(upstream, '127.0.0.1:0');
    const idpEnv: Record<string, string> = { PORT: '0' };
    const cpEnv: Record<string, string> = { DECISION_ADDR: ANY, MGMT_ADDR: ANY, EGRESS_PROXY_ADDR: ANY };
    if (backend === 'postgres') {
      const a = await scratchDb();
      const b = await scratchDb();
      dbs.push(a, b);
      idpEnv.IDP_DB_URL = a.url;
      cpEnv.REGISTRY_DB_URL = b.url;
    } else {
      idpEnv.IDP_STORE_BACKEND = 'memory';
      cpEnv.REGISTRY_BACKEND = 'memory';
    }
    idp = await startEntry(tsx('runtime/identity/main.ts'), idpEnv);
    idpUrl = `http://127.0.0.1:${idp.ports.identity}`;
    for (let i = 0; (await fetch(`${idpUrl}/readyz`)).status !== 200; i++) {
      if (i > 200) throw new Error('identity authority never ready');
      await new Promise((r) => setTimeout(r, 100));
    }
    cp = await startEntry(tsx('runtime/control-plane/main.ts'), { ...cpEnv, AGENT_IDP_URL: idpUrl });
    mgmt = `http://127.0.0.1:${cp.ports.mgmt}`;
    authz = `http://127.0.0.1:${cp.ports.decision}/authz`;

    // The directory, the agent's identity and its governed record, all through the authority's API.
    expect((await json(`${idpUrl}/v1/directory/sync`, 'POST', { tenantId: T, ...entraSnapshot() })).status).toBe(200);
    expect((await json(`${idpUrl}/v1/agents`, 'POST', { name: 'gov-bot', role: 'worker', capabilities: [] })).status).toBe(201);
    const prov = await json(`${idpUrl}/v1/agents/gov-bot/provision`, 'POST');
    expect(prov.status).toBe(200);
    const identity = loadIdentity(prov.body);
    vp = () => presentationFor(identity, { audience: 'writ-egress', ttlSeconds: 600 });
    const reg = await json(`${idpUrl}/v1/governance/agents`, 'POST', {
      agentName: 'gov-bot',
      tenantId: T,
      ownerType: 'employee',
      ownerRef: S(ENTRA.alice),
      businessSponsor: S(ENTRA.engMgr),
      riskTier: 'medium',
      approvedRuntime: 'doks_prod',
      createdBy: 'alice@contoso.com',
    });
    expect(reg.status).toBe(201);
    for (const status of ['pending_approval', 'approved', 'active']) {
      expect((await json(`${idpUrl}/v1/governance/agents/gov-bot/transition`, 'POST', { status, by: 'erin@contoso.com' })).status).toBe(200);
    }
    const applied = await json(`${mgmt}/v1/registry/apply`, 'POST', {
      owner: 'folder:e2e',
      services: [
        { name: 'gov-bot', upstream: 'gov-bot.agents.svc:8080', kind: 'agent', allowTools: ['search'], egressAllow: ['echo'] },
        { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' },
        { name: 'echo', upstream: `127.0.0.1:${upPort}`, kind: 'service' },
      ],
    });
    expect(applied.body.created).toHaveLength(3);
  });

  afterAll(async () => {
    cp?.signal('SIGTERM');
    idp?.signal('SIGTERM');
    await Promise.all([cp?.exited, idp?.exited]);
    if (upstream) await close(upstream);
    for (const d of dbs) await d.drop();
  });

  /** An egress decision, with a fresh VP (as the sidecar sends) or in plain header mode. */
  const decide = async (withVp = true) => {
    const headers: Record<string, string> = { [H.actor]: 'gov-bot', [H.service]: 'search' };
    if (withVp) headers[H.agentVp] = await vp();
    const r = await fetch(authz, { headers });
    return { status: r.status, version: r.headers.get(H.policyVersion), body: (await r.json()) as { reason: string; rule: string } };
  };

  it('an active governed agent egresses at /authz and through the proxy', async () => {
    // The control plane fetched the standing on start; give its first poll a moment.
    let d = await decide();
    for (let i = 0; d.status !== 200 && i < 40; i++) {
      await new Promise((r) => setTimeout(r, 50));
      d = await decide();
    }
    expect(d.status).toBe(200);
    expect(Number(d.version)).toBeGreaterThanOrEqual(1);
    expect((await viaProxy(cp.ports.proxy!, await vp())).status).toBe(200);
  });

  it('the owner deactivated by a SCIM sync: within 1 s egress is 403 at /authz and the proxy, and the VP is refused', async () => {
    const snap = entraSnapshot();
    const users = snap.users.map((u) => ((u as { externalId?: string }).externalId === ENTRA.alice ? { ...u, active: false } : u));
    const token = await vp();
    const t0 = Date.now();
    const sync = await json(`${idpUrl}/v1/directory/sync`, 'POST', { tenantId: T, users, groups: snap.groups });
    expect(sync.status).toBe(200);
    expect(sync.body.cascade.agents_suspended).toBeGreaterThanOrEqual(1);
    // Header mode (no VP): only the governance standing can cut it.
    let d = await decide(false);
    while (d.status === 200 && Date.now() - t0 < 5000) {
      await new Promise((r) => setTimeout(r, 25));
      d = await decide(false);
    }
    const cutMs = Date.now() - t0;
    expect(d.status).toBe(403);
    expect(d.body.rule).toBe('identity');
    expect(d.body.reason).toMatch(/"gov-bot" is suspended \(governance\)/);
    expect(cutMs).toBeLessThanOrEqual(1000);
    // With a fresh VP the authority refuses the revoked Membership VC as well.
    const withVp = await decide();
    expect(withVp.status).toBe(403);
    expect(withVp.body.reason).toMatch(/revoked|suspended/);
    const proxied = await viaProxy(cp.ports.proxy!, token);
    expect(proxied.status).toBe(403);
    const check = await json(`${idpUrl}/v1/agents/verify-presentation`, 'POST', { vp: token });
    expect(check.body.ok).toBe(false);
    expect(check.body.reason).toMatch(/revoked/);
    console.log(`governance cut on ${backend}: ${cutMs} ms from sync response to 403`);
  });
});
