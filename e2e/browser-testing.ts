/**
 * Chromium for the portal's browser tests (playwright-core, the system's Chromium): where it is
 * (the tests skip without it), where screenshots go, and a headless persistent profile whose page
 * records its uncaught errors.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';
export const SHOTS = fileURLToPath(new URL('../.artifacts/portal/', import.meta.url));
/** Headless without the sandbox (containers), the GPU, or anything Chromium fetches by itself. */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** A persistent headless profile under `dir` and its page; the page's uncaught errors go to `pageErrors`. */
export async function openBrowser(dir: string, pageErrors: string[]): Promise<{ ctx: BrowserContext; page: Page }> {
  const ctx = await chromium.launchPersistentContext(join(dir, 'chromium-profile'), {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1366, height: 860 },
  });
  const page = ctx.pages()[0] ?? (await ctx.newPage());
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  return { ctx, page };
}
