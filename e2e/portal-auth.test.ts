/**
 * The operator portal where the management API asks for a credential (`WRIT_API_AUTH=keys`, as
 * the Helm chart runs it), in Debian's Chromium against the real all-in-one: with no credential
 * the data calls are answered 401, the credential bar asks for one and the chain badge stays amber
 * (never verified); a wrong credential is refused; a key holding only `audit:read` turns the badge
 * green, is sent as `Authorization: Bearer` on the data calls and never appears in a URL; it
 * lasts for the tab across a reload, and "Forget credential" drops it.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { CHROMIUM, SHOTS } from './browser-testing.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../runtime/lib/brand.js';
import { startWrit, type Writ } from '../runtime/main.js';

const BOOT = 'bootstrap-secret-for-the-portal-auth-test-0123456789';

describe.skipIf(!existsSync(CHROMIUM))('operator portal with WRIT_API_AUTH=keys, in Chromium', () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-portal-auth-'));
  let writ: Writ;
  let browser: Browser;
  let page: Page;
  let reader = '';
  const pageErrors: string[] = [];
  /** Each data call the page made: its path and the Authorization header it carried. */
  const calls: { url: string; authorization?: string }[] = [];
  const base = () => `http://127.0.0.1:${writ.ports.mgmt}`;
  const badgeState = () => page.locator('#chain-badge').getAttribute('data-state');
  const barShown = () => page.locator('#signin').isVisible();
  const use = async (credential: string) => {
    await page.fill('#credential', credential);
    await page.press('#credential', 'Enter');
  };

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    writ = await startWrit({
      PATH: process.env.PATH,
      WRIT_DATA_DIR: join(dir, 'data'),
      WRIT_API_AUTH: 'keys',
      WRIT_BOOTSTRAP_ADMIN_KEY: BOOT,
      WRIT_EXAMPLES: 'false',
      BROKER_ENABLED: 'false',
      PORT: '0',
      DECISION_ADDR: '127.0.0.1:0',
      DECISION_GRPC_ADDR: '127.0.0.1:0',
      MGMT_ADDR: '127.0.0.1:0',
      EGRESS_PROXY_ADDR: '127.0.0.1:0',
      LOG_LEVEL: 'error',
    });
    // A key that may read the audit chain and nothing else.
    const res = await fetch(`http://127.0.0.1:${writ.ports.identity}/v1/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOT}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'portal-reader', scopes: ['audit:read'] }),
    });
    expect(res.status).toBe(201);
    reader = ((await res.json()) as { plaintext: string }).plaintext;

    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu', '--no-first-run'] });
    page = await browser.newPage({ viewport: { width: 1366, height: 860 } });
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    page.on('request', (r) => {
      const u = new URL(r.url());
      if (u.hostname !== '127.0.0.1') throw new Error(`portal fetched ${r.url()}`);
      if (r.resourceType() === 'fetch') calls.push({ url: r.url(), authorization: r.headers().authorization });
    });
  }, 120_000);

  afterAll(async () => {
    expect(pageErrors).toEqual([]);
    await browser?.close();
    await writ?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('with no credential: the bar asks for one and the badge is amber, never verified', async () => {
    await page.goto(`${base()}/portal/#/overview`);
    await expect.poll(barShown).toBe(true);
    expect(await page.locator('#signin-status').textContent()).toMatch(/needs a credential \(401\)/);
    await expect.poll(badgeState).toBe('unavailable');
    expect(await page.locator('#signout').isVisible()).toBe(false);
    // The shell's config is public: the footer counts the real metric before any credential.
    await expect.poll(() => page.locator('#metrics-status').textContent()).toContain(metric('authz_decisions_total'));
    await page.screenshot({ path: join(SHOTS, 'credential-needed.png'), fullPage: true });
  });

  it('a wrong credential is refused and asked for again', async () => {
    await use('writ_live_not-a-real-key');
    await expect.poll(() => page.locator('#signin-status').textContent()).toMatch(/refused this credential/);
    await expect.poll(barShown).toBe(true);
    expect(await badgeState()).not.toBe('verified');
  });

  it('a key with audit:read turns the badge green; it rides in the Authorization header, never in a URL', async () => {
    calls.length = 0;
    await use(reader);
    await expect.poll(badgeState).toBe('verified');
    expect(await barShown()).toBe(false);
    expect(await page.locator('#signout').isVisible()).toBe(true);
    const verify = calls.filter((c) => new URL(c.url).pathname === '/v1/audit/verify');
    expect(verify.length).toBeGreaterThan(0);
    for (const c of verify) expect(c.authorization).toBe(`Bearer ${reader}`);
    for (const c of calls) expect(c.url).not.toContain(reader);
    await page.screenshot({ path: join(SHOTS, 'credential-used.png'), fullPage: true });
  });

  it('the credential lasts for the tab across a reload; "Forget credential" drops it', async () => {
    await page.reload();
    await expect.poll(badgeState).toBe('verified');
    expect(await barShown()).toBe(false);
    await page.click('#signout');
    await expect.poll(barShown).toBe(true);
    await page.reload();
    await expect.poll(badgeState).toBe('unavailable');
    expect(await page.evaluate(() => (globalThis as any).sessionStorage.length)).toBe(0);
  });
});
