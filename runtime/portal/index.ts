/**
 * The operator portal (SPEC "Portal: Authority Command Center"), served at `/portal/` on the
 * management listener: static ES modules and CSS from `assets/` (bundled, no CDN, no build
 * step), a small config document, and the identity-authority forwarder (forward.ts).
 *
 * Mounted on the management app: `app.route('/', portalApp({ identityUrl }))`. The portal reads
 * the control plane's own routes (`/v1/audit`, `/v1/audit/verify`, `/v1/egress/requests`,
 * `/metrics`) same-origin, and the identity authority's through `/portal/api/identity/...`.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hono } from 'hono';
import { BRAND_TITLE, metric } from '../lib/brand.js';
import { registerIdentityForwarder, type ForwardOptions } from './forward.js';

export const ASSETS_DIR = fileURLToPath(new URL('./assets/', import.meta.url));

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/** Every asset, read once at start: the served set is fixed, so no path ever reaches the disk. */
function loadAssets(dir: string): Map<string, { body: string; type: string }> {
  const out = new Map<string, { body: string; type: string }>();
  for (const name of readdirSync(dir)) {
    const type = TYPES[extname(name)];
    if (type) out.set(name, { body: readFileSync(join(dir, name), 'utf8'), type });
  }
  return out;
}

/** What the browser code needs to know about this deployment (names come from brand.ts). */
export function portalConfig(identity: boolean) {
  return {
    title: `${BRAND_TITLE} Authority Command Center`,
    brand: BRAND_TITLE,
    decisionsMetric: metric('authz_decisions_total'),
    identityAuthority: identity,
    ringSize: 1000,
  };
}

// Same-origin only; nothing inline, so a strict policy holds.
const SECURITY_HEADERS = {
  'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

export type PortalDeps = ForwardOptions;

export const PORTAL_BASE = '/portal';

/** The portal as a sub-app with its `/portal` prefix: mount it at the root (`app.route('/', portalApp(deps))`). */
export function portalApp(deps: PortalDeps = {}): Hono {
  const app = new Hono();
  const P = PORTAL_BASE;
  const assets = loadAssets(ASSETS_DIR);
  const config = portalConfig(!!deps.identityUrl);

  app.get(`${P}/api/config`, (c) => c.json(config, 200, { 'cache-control': 'no-store' }));
  registerIdentityForwarder(app, `${P}/api/identity`, deps);
  app.all(`${P}/api/*`, (c) => c.json({ error: 'not found' }, 404));

  const serve = (name: string) => {
    const a = assets.get(name);
    if (!a) return undefined;
    return new Response(a.body, { status: 200, headers: { 'content-type': a.type, 'cache-control': 'no-cache', ...SECURITY_HEADERS } });
  };
  app.get(P, (c) => c.redirect(`${P}/`, 308));
  app.get(`${P}/`, () => serve('index.html')!);
  app.get(`${P}/:file{[A-Za-z0-9_-]+\\.(?:js|css|svg)}`, (c) => serve(c.req.param('file')) ?? c.json({ error: 'not found' }, 404));
  return app;
}
