/**
 * The portal sub-app on its own: assets served from the fixed set with a strict CSP, the
 * config document, and the identity-authority forwarder (allowlist, query filter, JSON-only
 * POSTs, body cap, timeout, unreachable, unconfigured) against a real local HTTP server.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { close, listen } from '../lib/http.js';
import { metric } from '../lib/brand.js';
import { portalApp } from './index.js';

interface Seen {
  method: string;
  url: string;
  body: string;
  headers: http.IncomingHttpHeaders;
}

describe('portal sub-app', () => {
  const seen: Seen[] = [];
  let idp: http.Server;
  let base: string;
  const hung: http.ServerResponse[] = [];

  beforeAll(async () => {
    idp = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        seen.push({ method: req.method ?? '', url: req.url ?? '', body, headers: req.headers });
        if (req.url?.startsWith('/v1/delegations/slow/')) return void hung.push(res);
        const status = req.url?.includes('/missing/') ? 404 : 200;
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(status === 200 ? { path: req.url } : { error: { code: 'not_found', message: 'no such delegation' } }));
      });
    });
    base = `http://127.0.0.1:${await listen(idp, '127.0.0.1:0')}`;
  });
  afterAll(async () => {
    for (const r of hung) r.destroy();
    await close(idp);
  });

  it('serves the page, its modules and a config naming the decisions metric', async () => {
    const app = portalApp({ identityUrl: base });
    const redirect = await app.request('/portal');
    expect(redirect.status).toBe(308);
    expect(redirect.headers.get('location')).toBe('/portal/');
    const page = await app.request('/portal/');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.headers.get('content-security-policy')).toContain("default-src 'self'");
    const html = await page.text();
    expect(html).toContain('src="app.js"');
    expect(html).not.toMatch(/https?:\/\//);
    for (const f of ['app.js', 'lib.js', 'overview.js', 'approvals.js', 'agents.js', 'audit.js', 'tokens.js', 'style.css', 'icon.svg']) {
      const r = await app.request(`/portal/${f}`);
      expect(r.status, f).toBe(200);
      // Every asset is local: nothing is loaded from another origin.
      expect(await r.text(), f).not.toMatch(/(src|href|import|url)\s*\(?\s*['"]?https?:/);
    }
    expect((await app.request('/portal/nope.js')).status).toBe(404);
    expect((await app.request('/portal/%2e%2e/package.json')).status).toBe(404);
    const cfg = await (await app.request('/portal/api/config')).json();
    expect(cfg).toMatchObject({ decisionsMetric: metric('authz_decisions_total'), identityAuthority: true, ringSize: 1000 });
  });

  it('forwards exactly the allowlisted identity-authority routes', async () => {
    const app = portalApp({ identityUrl: `${base}/` });
    seen.length = 0;
    const ok = await app.request('/portal/api/identity/v1/governance/summary?tenant=acme', {
      headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', cookie: 'x=1' },
    });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ path: '/v1/governance/summary?tenant=acme' });
    expect(seen[0]!.headers.traceparent).toBe('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
    expect(seen[0]!.headers.cookie).toBeUndefined();
    expect((await app.request('/portal/api/identity/v1/governance/agents?status=active')).status).toBe(200);
    expect((await app.request('/portal/api/identity/v1/delegations')).status).toBe(200);
    const tokens = await app.request('/portal/api/identity/v1/tokens?delegation=d-1&agent=bot&limit=100&after=abc&tenant=acme');
    expect(tokens.status).toBe(200);
    expect(await tokens.json()).toEqual({ path: '/v1/tokens?delegation=d-1&agent=bot&limit=100&after=abc&tenant=acme' });

    const post = (path: string, body: string, type = 'application/json') => app.request(path, { method: 'POST', headers: { 'content-type': type }, body });
    const approved = await post('/portal/api/identity/v1/delegations/d-1/approve', '{"approver":"alice"}');
    expect(approved.status).toBe(200);
    expect(seen.at(-1)).toMatchObject({ method: 'POST', url: '/v1/delegations/d-1/approve', body: '{"approver":"alice"}' });
    // The identity authority's own status and error body come back as they are.
    const missing = await post('/portal/api/identity/v1/delegations/missing/deny', '{"approver":"a","reason":"r"}');
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ error: { code: 'not_found' } });

    const before = seen.length;
    // Not on the list: other routes, other methods, unknown query parameters, path tricks.
    for (const [method, path] of [
      ['GET', '/portal/api/identity/v1/agents'],
      ['GET', '/portal/api/identity/v1/keys'],
      ['POST', '/portal/api/identity/v1/tokens'],
      ['GET', '/portal/api/identity/v1/tokens/x'],
      ['POST', '/portal/api/identity/v1/governance/summary'],
      ['GET', '/portal/api/identity/v1/delegations/d-1/approve'],
      ['POST', '/portal/api/identity/v1/revoke'],
      ['POST', '/portal/api/identity/v1/delegations/../approve'],
      ['POST', '/portal/api/identity/v1/delegations/a%2F..%2Fb/approve'],
      ['GET', '/portal/api/identity//v1/delegations'],
    ] as const) {
      const r = await app.request(path, { method, headers: { 'content-type': 'application/json' }, body: method === 'POST' ? '{}' : undefined });
      expect(r.status, `${method} ${path}`).toBe(404);
    }
    expect((await app.request('/portal/api/identity/v1/governance/summary?url=http://evil')).status).toBe(400);
    expect((await app.request('/portal/api/identity/v1/tokens?status=active')).status).toBe(400);
    expect((await post('/portal/api/identity/v1/delegations/d-1/approve', '{"approver":"a"}', 'text/plain')).status).toBe(415);
    expect((await post('/portal/api/identity/v1/delegations/d-1/approve', JSON.stringify({ approver: 'x'.repeat(20_000) }))).status).toBe(413);
    expect(seen.length).toBe(before);
  });

  it('answers 503 unconfigured, 504 on timeout, 502 when unreachable', async () => {
    expect((await portalApp({}).request('/portal/api/identity/v1/delegations')).status).toBe(503);
    expect(await (await portalApp({}).request('/portal/api/config')).json()).toMatchObject({ identityAuthority: false });

    const slow = await portalApp({ identityUrl: base, timeoutMs: 200 }).request('/portal/api/identity/v1/delegations/slow/approve', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"approver":"a"}',
    });
    expect(slow.status).toBe(504);
    expect(await slow.json()).toEqual({ error: 'identity authority timed out after 200 ms' });

    const dead = http.createServer();
    const port = await listen(dead, '127.0.0.1:0');
    await close(dead);
    const gone = await portalApp({ identityUrl: `http://127.0.0.1:${port}` }).request('/portal/api/identity/v1/governance/summary');
    expect(gone.status).toBe(502);
    expect(await gone.json()).toEqual({ error: 'identity authority unreachable' });
  });
});
