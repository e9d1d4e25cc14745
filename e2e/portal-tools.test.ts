/**
 * The portal's MCP views (issue 42 item 9) in Debian's Chromium (playwright-core) against the real
 * all-in-one with its MCP gateway (`startWrit`, ephemeral ports, a temporary PGlite folder) and the
 * reference MCP server: the feed's tool chip on a decided tool call, an agent's effective tools in
 * the Agents view (per service, with the `when`, `approval: required` and `dataClass: regulated`
 * markers), and a held tool call in Approvals shown as one (service, tool, argument digest checked
 * against the arguments, the arguments as text, never as HTML), approved there while the agent's
 * call waits, which then completes. Skipped where `/usr/bin/chromium` is missing. Screenshots land
 * in `.artifacts/portal/` (gitignored) beside e2e/portal.test.ts's.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { CHROMIUM, openBrowser, SHOTS } from './browser-testing.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { startWrit, type Writ } from '../runtime/main.js';
import { startEverything, type Everything } from '../runtime/mcp/everything-testing.js';

/** What the page's elements look like to code evaluated in the browser (no DOM lib here). */
type El = { textContent: string | null; dataset: Record<string, string | undefined>; querySelectorAll(s: string): ArrayLike<El> };

// The arguments of the held call: markup in a value must be shown as text.
const HELD_ARGS = { messageType: 'success', note: '<img src=x onerror="globalThis.__xss=1">' };
// RFC 8785 form of HELD_ARGS (keys sorted, no spaces) and its SHA-256, computed outside Writ:
// printf '%s' '{"messageType":"success","note":"<img src=x onerror=\"globalThis.__xss=1\">"}' | sha256sum
const HELD_CANONICAL = '{"messageType":"success","note":"<img src=x onerror=\\"globalThis.__xss=1\\">"}';
const HELD_DIGEST = '151732b5c5a5d1c231c3c169e74e837ad796769a7e0cd0ce7b0712074f31ba64';
// SHA-256 of `{}`, the arguments of get-env.
const EMPTY_DIGEST = '44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a';

describe.skipIf(!existsSync(CHROMIUM))('portal: MCP tool calls in the feed, Agents and Approvals', () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-portal-tools-'));
  let writ: Writ;
  let everything: Everything;
  let ctx: BrowserContext;
  let page: Page;
  let session = '';
  const pageErrors: string[] = [];
  const base = () => `http://127.0.0.1:${writ.ports.mgmt}`;
  const mcp = (body: object) =>
    fetch(`http://127.0.0.1:${writ.ports.broker}/mcp/everything`, {
      method: 'POST',
      headers: {
        [H.actor]: 'tooler',
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        ...(session ? { 'mcp-session-id': session } : {}),
      },
      body: JSON.stringify({ jsonrpc: '2.0', ...body }),
    });
  const view = async (name: string) => {
    if (page.url().startsWith(`${base()}/portal/`)) await page.evaluate((n) => ((globalThis as any).location.hash = `#/${n}`), name);
    else await page.goto(`${base()}/portal/#/${name}`);
    await page.waitForSelector(`nav a[data-view="${name}"][aria-current="page"]`);
  };

  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    everything = await startEverything();
    writ = await startWrit({
      WRIT_DATA_DIR: join(dir, 'data'),
      WRIT_EXAMPLES: 'false',
      PORT: '0',
      DECISION_ADDR: '127.0.0.1:0',
      MGMT_ADDR: '127.0.0.1:0',
      EGRESS_PROXY_ADDR: '127.0.0.1:0',
      BROKER_ADDR: '127.0.0.1:0',
      EGRESS_APPROVAL_TIMEOUT: '60s',
      LOG_LEVEL: 'warn',
    });
    for (const s of [
      { name: 'everything', upstream: everything.upstream, kind: 'tool', protocol: 'mcp' },
      { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' },
      {
        name: 'tooler',
        upstream: 'tooler.agents.svc:8080',
        kind: 'agent',
        allowTools: ['everything/echo', 'everything/get-sum', 'everything/get-annotated-message', 'everything/get-tiny*', 'search'],
        toolRules: [
          { tool: 'everything/get-sum', when: 'args.a + args.b < 100' },
          { tool: 'everything/get-annotated-message', approval: 'required' },
          { tool: 'everything/get-tiny*', dataClass: 'regulated' },
        ],
      },
    ]) {
      const r = await fetch(`${base()}/v1/registry/services`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(s) });
      expect(r.status, await r.text()).toBeLessThan(300);
    }
    const init = await mcp({
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } },
    });
    session = init.headers.get('mcp-session-id') ?? '';
    await init.text();
    expect(session).not.toBe('');
    ({ ctx, page } = await openBrowser(dir, pageErrors));
  }, 300_000);

  afterAll(async () => {
    expect(pageErrors).toEqual([]);
    await ctx?.close();
    await writ?.close();
    await everything?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the feed shows a denied tool call with its tool chip, the argument digest in its title', async () => {
    const denied = await mcp({ id: 2, method: 'tools/call', params: { name: 'get-env', arguments: {} } });
    expect(((await denied.json()) as { error: { code: number } }).error.code).toBe(-32001);
    await view('overview');
    const item = page.locator('#feed li.feed-item[data-action="tool.call"].deny').first();
    await item.waitFor({ timeout: 5000 });
    const chip = item.locator('.chip-tool');
    expect(await chip.textContent()).toBe('tool get-env');
    expect(await chip.getAttribute('title')).toBe(`arguments sha256:${EMPTY_DIGEST}`);
    await shot('overview-tool-chip');
  });

  it('the Agents view lists the effective tools per service with their rule markers', async () => {
    await view('agents');
    await page.waitForSelector('#agent-tools tr[data-agent="tooler"]');
    const rows = await page.$$eval('#agent-tools tr[data-agent="tooler"]', (trs) =>
      (trs as unknown as El[]).map((tr) => ({
        service: tr.dataset.service,
        tools: Array.from(tr.querySelectorAll('li')).map((li) => [li.dataset.tool, Array.from(li.querySelectorAll('.chip')).map((c) => c.textContent)]),
      })),
    );
    expect(rows).toEqual([
      {
        service: 'everything',
        tools: [
          ['echo', []],
          ['get-sum', ['when args.a + args.b < 100']],
          ['get-annotated-message', ['approval required']],
          ['get-tiny*', ['regulated']],
        ],
      },
      { service: 'search', tools: [['*', []]] },
    ]);
    expect(await page.locator('#agent-tools tr[data-service="everything"] .pill').textContent()).toBe('MCP');
    await shot('agents-tools');
  });

  it('a held tool call shows its service, tool, digest and arguments as text; approved in the portal, the call completes', async () => {
    const held = mcp({ id: 3, method: 'tools/call', params: { name: 'get-annotated-message', arguments: HELD_ARGS } }).then((r) => r.text());
    await page.evaluate(() => (globalThis as any).localStorage.setItem('portal.approver', 'alice'));
    await view('approvals');
    const cell = page.locator('#egress-requests .tool-call').first();
    await cell.waitFor({ timeout: 10_000 });
    expect(await cell.getAttribute('data-service')).toBe('everything');
    expect(await cell.getAttribute('data-tool')).toBe('get-annotated-message');
    expect(await cell.getAttribute('data-digest')).toBe(HELD_DIGEST);
    expect(await cell.locator('pre.tool-args').textContent()).toBe(JSON.stringify(JSON.parse(HELD_CANONICAL), null, 2));
    expect(await cell.locator('img').count()).toBe(0);
    expect(await page.evaluate(() => (globalThis as any).__xss)).toBeUndefined();
    await page.waitForFunction(() => (globalThis as any).document.querySelector('.digest-check')?.textContent === 'matches the arguments');
    await shot('approvals-tool-call');
    // The reason column keeps the rule's words without the arguments.
    expect(await page.locator('#egress-requests tbody tr').first().locator('td').nth(5).textContent()).toBe(
      "tool rule everything/get-annotated-message requires a human's approval",
    );
    await page.locator('#egress-requests tbody tr').first().locator('button.approve').click();
    const answer = await held;
    expect(answer).toContain('"text":"Operation completed successfully"');
  });
});
