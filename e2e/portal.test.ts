/**
 * The operator portal in Debian's Chromium (playwright-core) against the real all-in-one
 * (`startWrit`, ephemeral ports, a temporary PGlite folder): the chain badge in each of its
 * states, governance buckets of a directory seeded through the identity authority's API, a
 * denied /authz call reaching the feed without a reload, a delegation approved in the portal
 * and its live countdown, a held forward-proxy request released by the Approvals view while
 * curl waits, the Agents and Audit views, and the footer equal to the metric.
 * Screenshots of every view land in `.artifacts/portal/` (gitignored).
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { CHROMIUM, openBrowser, SHOTS } from './browser-testing.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H, metric } from '../runtime/lib/brand.js';
import { close as closeServer, listen } from '../runtime/lib/http.js';
import { presentationFor, type AgentIdentity } from '../runtime/identity/client.js';
import { startWrit, type Writ } from '../runtime/main.js';
import { openStore } from '../runtime/store/factory.js';
import { curl } from '../runtime/control-plane/proxy/testkit.js';

const TENANT = 'acme';
/** What the page's elements look like to code evaluated in the browser (no DOM lib here). */
type El = { dataset: Record<string, string | undefined> };
const sub = (ext: string) => `idp_a:${TENANT}:${ext}`;

function envFor(dataDir: string): Record<string, string> {
  return {
    WRIT_DATA_DIR: dataDir,
    WRIT_EXAMPLES: 'false',
    BROKER_ENABLED: 'false',
    PORT: '0',
    DECISION_ADDR: '127.0.0.1:0',
    MGMT_ADDR: '127.0.0.1:0',
    EGRESS_PROXY_ADDR: '127.0.0.1:0',
    EGRESS_APPROVAL_TIMEOUT: '60s',
    LOG_LEVEL: 'warn',
  };
}

async function call(url: string, method = 'GET', body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function ok(url: string, method = 'GET', body?: unknown): Promise<any> {
  const r = await call(url, method, body);
  if (r.status >= 300) throw new Error(`${method} ${url}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

const scimUser = (ext: string, name: string, department: string | undefined, active = true) => ({
  schemas: ['urn:ietf:params:scim:schemas:core:2.0:User', 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User'],
  externalId: ext,
  userName: `${ext}@acme.example`,
  active,
  displayName: name,
  emails: [{ value: `${ext}@acme.example`, primary: true }],
  'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User': department ? { department } : {},
});
const squad = { schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'], externalId: 'squad', displayName: 'Squad', members: [{ value: 'ann' }] };

describe.skipIf(!existsSync(CHROMIUM))('operator portal in Chromium against the all-in-one', () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-portal-'));
  const dataDir = join(dir, 'data');
  let writ: Writ;
  let ctx: BrowserContext;
  let page: Page;
  let ext: http.Server;
  let extPort = 0;
  const pageErrors: string[] = [];
  const base = () => `http://127.0.0.1:${writ.ports.mgmt}`;
  const idp = () => `http://127.0.0.1:${writ.ports.identity}`;
  const authz = (headers: Record<string, string>) => fetch(`http://127.0.0.1:${writ.ports.decision}/authz`, { headers });
  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  /** Opens a view: a fresh load when the page is elsewhere, else a hash change (no reload). */
  const view = async (name: string) => {
    if (page.url().startsWith(`${base()}/portal/`)) await page.evaluate((n) => ((globalThis as any).location.hash = `#/${n}`), name);
    else await page.goto(`${base()}/portal/#/${name}`);
    await page.waitForSelector(`nav a[data-view="${name}"][aria-current="page"]`);
  };

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    writ = await startWrit(envFor(dataDir));
    ext = http.createServer((req, res) => res.end(`external says hi to ${req.url}`));
    extPort = await listen(ext, '127.0.0.1:0');

    // Registry: a public and a regulated service, two agents.
    for (const s of [
      { name: 'web', upstream: 'web.default.svc:80', public: true, kind: 'service' },
      { name: 'ledger', upstream: 'ledger.tools.svc:8080', kind: 'tool', dataClass: 'regulated' },
      { name: 'researcher', upstream: 'researcher.agents.svc:8080', kind: 'agent', allowTools: ['ledger'], egressAllow: ['ledger'] },
      { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', egressAllow: [] },
    ]) {
      await ok(`${base()}/v1/registry/services`, 'POST', s);
    }

    // Directory: ann (Sales, in squad), ned (no department), old (Ops; deactivated below).
    const sync = (oldActive: boolean) =>
      ok(`${idp()}/v1/directory/sync`, 'POST', {
        tenantId: TENANT,
        idp: 'idp_a',
        users: [scimUser('ann', 'Ann Archer', 'Sales'), scimUser('ned', 'Ned North', undefined), scimUser('old', 'Olga Old', 'Ops', oldActive)],
        groups: [squad],
      });
    await sync(true);
    const gov = (agentName: string, extra: Record<string, unknown>) =>
      ok(`${idp()}/v1/governance/agents`, 'POST', { agentName, tenantId: TENANT, ownerType: 'employee', createdBy: 'portal-test', ...extra });
    const move = (name: string, status: string) => ok(`${idp()}/v1/governance/agents/${name}/transition`, 'POST', { status, by: 'portal-test' });
    const complete = { businessSponsor: sub('ann'), riskTier: 'low', approvedRuntime: 'local_dev' };
    await gov('g-healthy', { ownerRef: sub('ann'), ...complete });
    for (const s of ['pending_approval', 'approved', 'active']) await move('g-healthy', s);
    await gov('g-incomplete', { ownerRef: sub('ann') });
    await gov('g-nodept', { ownerRef: sub('ned'), ...complete });
    await gov('g-team', { ownerType: 'team', ownerRef: `${TENANT}:squad`, ...complete });
    await gov('g-old', { ownerRef: sub('old'), ...complete });
    await gov('g-retired', { ownerRef: sub('ann'), ...complete });
    await move('g-retired', 'retired');
    await sync(false);

    // Identity-authority agents with no governed record: the ungoverned fleet.
    for (const name of ['researcher', 'bot']) {
      await ok(`${idp()}/v1/agents`, 'POST', { name, role: 'worker', capabilities: [{ action: 'http:get', resource: '*' }] });
      await ok(`${idp()}/v1/agents/${name}/provision`, 'POST');
    }

    ({ ctx, page } = await openBrowser(dir, pageErrors));
    page.on('console', (m) => {
      if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) pageErrors.push(m.text());
    });
    // Nothing may be fetched from anywhere but the portal's own origin.
    page.on('request', (r) => {
      const u = new URL(r.url());
      if (u.hostname !== '127.0.0.1') throw new Error(`portal fetched ${r.url()}`);
    });
  }, 120_000);

  afterAll(async () => {
    expect(pageErrors).toEqual([]);
    await ctx?.close();
    await writ?.close();
    if (ext) await closeServer(ext);
    rmSync(dir, { recursive: true, force: true });
  });

  it('overview: the chain badge is verified and the governance panel matches the seeded directory', async () => {
    await view('overview');
    const badge = page.locator('#chain-badge');
    await expect.poll(() => badge.getAttribute('data-state')).toBe('verified');
    expect(await badge.textContent()).toBe('Chain verified');

    const summary = await ok(`${idp()}/v1/governance/summary`);
    await page.waitForSelector('#governed strong');
    const n = async (sel: string) => Number((await page.locator(sel).first().textContent())!.replace(/,/g, ''));
    // The seed: 5 governed (g-retired excluded), the two identity agents ungoverned.
    expect(await n('#governed strong')).toBe(5);
    expect(await n('#ungoverned strong')).toBe(2);
    const posture: Record<string, number> = {};
    for (const k of ['owner_inactive', 'blocked', 'active_healthy', 'other']) posture[k] = await n(`[data-bucket="${k}"] .count`);
    expect(posture).toEqual({ owner_inactive: 1, blocked: 1, active_healthy: 1, other: 2 });
    expect(posture).toEqual(summary.posture);
    // SPEC precedence: owner_inactive, then blocked, then active_healthy.
    expect(await page.locator('.posture li').evaluateAll((els) => els.map((e) => (e as unknown as El).dataset.bucket))).toEqual([
      'owner_inactive',
      'blocked',
      'active_healthy',
      'other',
    ]);
    const rows = async (table: string) =>
      Object.fromEntries(
        await page
          .locator(`${table} tbody tr`)
          .evaluateAll((els) => els.map((e) => [(e as unknown as El).dataset.key, Number((e as unknown as El).dataset.agents)])),
      );
    expect(await rows('#by-owner')).toEqual({ [sub('ann')]: 2, [sub('ned')]: 1, [sub('old')]: 1, '(team-owned)': 1 });
    expect(await rows('#by-dept')).toEqual({ Sales: 2, '(unassigned)': 1, Ops: 1, '(team-owned)': 1 });
    await shot('overview');
  });

  it('a denied /authz call appears in the feed within 2 s, without a reload', async () => {
    await view('overview');
    await page.waitForSelector('#feed li.feed-item');
    await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 42));
    const before = await page.locator('#feed li.feed-item').first().getAttribute('data-seq');
    // An egress call of a registered agent to a service that does not exist: a registry deny.
    const res = await authz({ [H.actor]: 'bot', [H.service]: 'no-such-service', [H.task]: 'feed-check', [H.targetKind]: 'tool' });
    expect(res.status).toBe(403);
    const t0 = Date.now();
    const item = page.locator(`#feed li.feed-item[data-allow="false"]`).filter({ hasText: 'no-such-service' });
    await item.first().waitFor({ timeout: 2000 });
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(Number(await item.first().getAttribute('data-seq'))).toBeGreaterThan(Number(before));
    expect(await item.first().locator('.chip-rule').textContent({ timeout: 1000 })).toBe('registry');
    const seq = Number(await item.first().getAttribute('data-seq'));
    const record = ((await ok(`${base()}/v1/audit?limit=50`)) as { seq: number; task?: string }[]).find((r) => r.seq === seq)!;
    expect(record.task).toBe('feed-check');
    expect(await item.first().locator('.chip-task').textContent({ timeout: 1000 })).toBe('task feed-check');
    expect(await page.evaluate(() => (globalThis as unknown as { marker?: number }).marker)).toBe(42);
  });

  it('a task delegation approved in the Approvals view; the allowed egress shows a live expiry countdown', async () => {
    const d = await ok(`${idp()}/v1/delegations/request`, 'POST', {
      actorName: 'researcher',
      task: 't-42',
      action: 'ledger:read',
      resource: 'acct/7',
      reason: 'quarter close',
      ttlSeconds: 3600,
    });
    await view('approvals');
    await page.fill('#approver', 'carol@acme.example');
    const row = page.locator(`#delegations tr[data-id="${d.id}"]`);
    await row.waitFor();
    await row.locator('button.approve').click();
    await expect.poll(async () => (await ok(`${idp()}/v1/delegations/${d.id}`)).status).toBe('approved');
    expect((await ok(`${idp()}/v1/delegations/${d.id}`)).approver).toBe('carol@acme.example');

    const res = await authz({
      [H.actor]: 'researcher',
      [H.service]: 'ledger',
      [H.onBehalfOf]: sub('ann'),
      [H.task]: 't-42',
      [H.targetKind]: 'tool',
      [H.action]: 'ledger:read',
      [H.resource]: 'acct/7',
    });
    expect(res.status).toBe(200);
    await view('overview');
    const chip = page.locator('#feed li.feed-item[data-allow="true"] .chip-delegation').first();
    await chip.waitFor({ timeout: 3000 });
    const first = await chip.locator('.countdown').textContent();
    expect(first).toMatch(/^expires in (59m|1h 0m) \d+s$|^expires in 1h 0m$/);
    await expect.poll(() => chip.locator('.countdown').textContent(), { timeout: 3000 }).not.toBe(first);
    await shot('overview-feed');
  });

  it('approving a held proxy request in the Approvals view releases the waiting curl', async () => {
    const prov = await ok(`${idp()}/v1/agents/bot/provision`, 'POST');
    const vp = await presentationFor(prov as AgentIdentity, { ttlSeconds: 600 });
    const target = `127.0.0.1:${extPort}`;
    const waiting = curl(['-x', `http://127.0.0.1:${writ.ports.proxy}`, '--proxy-header', `Proxy-Authorization: Bearer ${vp}`, `http://${target}/held`]);
    let settled = false;
    void waiting.then(() => (settled = true));

    await view('approvals');
    await page.fill('#approver', 'dave@acme.example');
    const row = page.locator(`#egress-requests tr[data-target="${target}"]`);
    await row.waitFor({ timeout: 10_000 });
    await expect.poll(() => page.locator('#pending-count').textContent(), { timeout: 5000 }).toBe('1');
    await shot('approvals');
    // At a narrower laptop width both decisions stay on screen, without scrolling sideways.
    await page.setViewportSize({ width: 1280, height: 800 });
    for (const b of ['button.approve', 'button.deny']) {
      const box = await row.locator(b).boundingBox();
      expect(box && box.x + box.width, b).toBeLessThanOrEqual(1280);
    }
    await page.setViewportSize({ width: 1366, height: 860 });
    expect(settled).toBe(false);
    await row.locator('button.approve').click();
    const r = await waiting;
    expect(r.status).toBe(200);
    expect(r.body).toBe('external says hi to /held');
    await expect.poll(() => page.locator('#approval-msg').textContent()).toMatch(/approved/);
    const decided = (await ok(`${base()}/v1/egress/requests`)) as { target: string; status: string; approver: string }[];
    expect(decided.find((x) => x.target === target)).toMatchObject({ status: 'approved', approver: 'dave@acme.example' });
  });

  it('agents view: owner health, activation blockers and lifecycle history', async () => {
    await view('agents');
    const healthy = page.locator('tr[data-agent="g-healthy"]');
    await healthy.waitFor();
    expect(await healthy.getAttribute('data-status')).toBe('active');
    expect(await healthy.locator('.blockers').textContent()).toBe('ready');
    await healthy.locator('details summary').click();
    expect(await healthy.locator('.history li').count()).toBeGreaterThanOrEqual(4);
    const old = page.locator('tr[data-agent="g-old"]');
    expect(await old.textContent()).toContain('owner inactive');
    expect(await page.locator('tr[data-agent="g-incomplete"] .chip-blocker').count()).toBeGreaterThan(0);
    // Keyboard: the search box filters.
    await page.focus('#agent-search');
    await page.keyboard.type('g-team');
    await expect.poll(() => page.locator('#agents tbody tr').count()).toBe(1);
    await page.fill('#agent-search', '');
    await shot('agents');
  });

  it('audit view: filters by decision, rule and actor; every held link checks out', async () => {
    await view('audit');
    await page.waitForSelector('#audit tbody tr');
    await page.selectOption('#f-decision', 'deny');
    expect(await page.locator('#audit tbody tr').evaluateAll((els) => els.every((e) => (e as unknown as El).dataset.allow === 'false'))).toBe(true);
    await page.selectOption('#f-rule', 'registry');
    expect(await page.locator('#audit tbody tr').count()).toBeGreaterThanOrEqual(1);
    await page.selectOption('#f-decision', '');
    await page.selectOption('#f-rule', '');
    await page.fill('#f-actor', 'researcher');
    const actors = await page.locator('#audit tbody tr td:nth-child(4)').allTextContents();
    expect(actors.length).toBeGreaterThan(0);
    expect(actors.every((a) => a.includes('researcher'))).toBe(true);
    await page.fill('#f-actor', '');
    expect(await page.locator('#audit .hashes .bad-text').count()).toBe(0);
    expect(await page.locator('#audit .hashes .ok-text').count()).toBeGreaterThan(3);
    await shot('audit');
  });

  it('the footer counts equal writ_authz_decisions_total', async () => {
    await view('overview');
    const text = await (await fetch(`${base()}/metrics`)).text();
    const want = { allow: 0, deny: 0 };
    for (const line of text.split('\n')) {
      const m = new RegExp(`^${metric('authz_decisions_total')}\\{[^}]*decision="(allow|deny)"[^}]*\\} (\\S+)$`).exec(line);
      if (m) want[m[1] as 'allow' | 'deny'] += Number(m[2]);
    }
    expect(want.allow).toBeGreaterThan(0);
    expect(want.deny).toBeGreaterThan(0);
    await expect.poll(() => page.locator('#count-allow').getAttribute('data-value'), { timeout: 8000 }).toBe(String(want.allow));
    await expect.poll(() => page.locator('#count-deny').getAttribute('data-value')).toBe(String(want.deny));
    expect(await page.locator('#count-allow').textContent()).toBe(want.allow.toLocaleString('en-US'));
  });

  it('tokens view: issued and revoked tokens beside their delegations, never a token value', async () => {
    await ok(`${base()}/v1/registry/services`, 'POST', { name: 'tok-bot', upstream: 'tok-bot.agents.svc:8080', kind: 'agent', allowTools: ['ledger'] });
    await ok(`${idp()}/v1/agents`, 'POST', { name: 'tok-bot', role: 'worker', capabilities: [] });
    const me = (await ok(`${idp()}/v1/agents/tok-bot/provision`, 'POST')) as AgentIdentity;
    const d = await ok(`${idp()}/v1/delegations/request`, 'POST', {
      actorName: 'tok-bot',
      task: 't-tok',
      action: 'ledger:read',
      resource: 'acct/*',
      reason: 'tokens view',
    });
    const approved = await ok(`${idp()}/v1/delegations/${d.id}/approve`, 'POST', { approver: 'carol@acme.example' });
    const { issuer } = await ok(`${idp()}/.well-known/oauth-authorization-server`);
    const exchange = async () => {
      const form = new URLSearchParams({
        grant_type: 'urn:ietf:params:oauth:grant-type:token-exchange',
        subject_token: approved.vc,
        subject_token_type: 'urn:ietf:params:oauth:token-type:jwt',
        actor_token: await presentationFor(me, { audience: issuer }),
        actor_token_type: 'urn:ietf:params:oauth:token-type:jwt',
        audience: 'ledger',
      });
      const r = await fetch(`${idp()}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: form.toString(),
      });
      const body = (await r.json()) as { access_token?: string };
      if (!body.access_token) throw new Error(`exchange refused: ${JSON.stringify(body)}`);
      return body.access_token;
    };
    const kept = await exchange();
    const revoked = await exchange();
    const revokeForm = new URLSearchParams({ token: revoked }).toString();
    expect(
      (await fetch(`${idp()}/oauth/revoke`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: revokeForm })).status,
    ).toBe(200);
    const jti = (t: string) => JSON.parse(Buffer.from(t.split('.')[1]!, 'base64url').toString()).jti as string;

    await view('tokens');
    await page.fill('#token-delegation', d.id);
    await page.press('#token-delegation', 'Enter');
    const rows = page.locator(`#tokens tr[data-delegation="${d.id}"]`);
    await expect.poll(() => rows.count()).toBe(2);
    expect(await page.locator(`#tokens tr[data-jti="${jti(kept)}"]`).getAttribute('data-status')).toBe('active');
    expect(await page.locator(`#tokens tr[data-jti="${jti(revoked)}"]`).getAttribute('data-status')).toBe('revoked');
    const text = (await page.locator('#tokens').textContent()) ?? '';
    for (const want of ['tok-bot', 'carol@acme.example', 'ledger', 't-tok', 'approved', 'revoked', 'active']) expect(text).toContain(want);
    const html = await page.content();
    for (const t of [kept, revoked]) expect(html).not.toContain(t.split('.')[2]);
    await shot('tokens');
  });

  it('amber when the control plane is stopped; red "broken at seq N" after a record is altered in the store', async () => {
    await view('overview');
    await expect.poll(() => page.locator('#chain-badge').getAttribute('data-state')).toBe('verified');
    const records = (await ok(`${base()}/v1/audit?limit=1000`)) as { seq: number }[];
    const victim = records[Math.floor(records.length / 2)]!.seq;
    await writ.close();
    // The page stays open on a stopped control plane: unknown, never verified.
    await expect.poll(() => page.locator('#chain-badge').getAttribute('data-state'), { timeout: 8000 }).toBe('unavailable');
    expect(await page.locator('#chain-badge').textContent()).toBe('Chain status unavailable');
    await shot('overview-unavailable');

    const store = await openStore({ backend: 'pglite', dataDir });
    await store.exec(`update audit_log set reason = 'tampered' where seq = ${victim}`);
    await store.close();
    writ = await startWrit(envFor(dataDir));
    await view('overview');
    await expect.poll(() => page.locator('#chain-badge').getAttribute('data-state'), { timeout: 8000 }).toBe('broken');
    expect(await page.locator('#chain-badge').textContent()).toBe(`Chain broken at seq ${victim}`);
    await shot('overview-broken');
  });
});
