/**
 * The node:http fast path of verify-presentation answers exactly what the Hono route answers:
 * every request is sent over a real socket and straight to the app, and the answers compared.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../lib/log.js';
import type { Store } from '../store/factory.js';
import { openTestPglite } from '../store/testing.js';
import { presentationFor } from './client.js';
import { plainVerifyRequest } from './fast-verify.js';
import { startIdentityAuthority } from './server.js';
import { loadConfig } from '../lib/settings.js';

describe('verify-presentation fast path', () => {
  let store: Store;
  let idp: Awaited<ReturnType<typeof startIdentityAuthority>>;
  let vp: string;
  beforeAll(async () => {
    setLogLevel('error');
    store = await openTestPglite();
    idp = await startIdentityAuthority({ store, config: loadConfig({ IDP_ISSUER_HOST: 'idp.fast.test', OTEL_SDK_DISABLED: 'true' }), addr: '127.0.0.1:0' });
    await idp.authority.whenReady();
    const app = idp.authority.app;
    const post = async (p: string, b?: unknown): Promise<any> =>
      (await app.request(p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b ?? {}) })).json();
    await post('/v1/agents', { name: 'fast', role: 'worker', capabilities: [] });
    vp = await presentationFor(await post('/v1/agents/fast/provision'));
  });
  afterAll(async () => {
    await idp?.close();
    await store?.close();
  });

  it('answers every request as the Hono route does', async () => {
    const [h, p] = vp.split('.') as [string, string, string];
    const cases: { body: string; headers?: Record<string, string> }[] = [
      { body: JSON.stringify({ vp }) },
      { body: JSON.stringify({ vp, audience: 'someone-else' }) },
      { body: JSON.stringify({ vp, nonce: 'not-the-nonce' }) },
      { body: JSON.stringify({ vp: `${h}.${p}.${'A'.repeat(86)}` }) },
      { body: JSON.stringify({ vp: 'a.b.c' }) },
      { body: JSON.stringify({ vp, extra: 1 }) },
      { body: JSON.stringify({ vp: `${vp}\u0000` }) },
      { body: JSON.stringify({ vp: '' }) },
      { body: JSON.stringify({ vp: 42 }) },
      { body: JSON.stringify([vp]) },
      { body: '{"vp": ' },
      { body: JSON.stringify({ vp }), headers: { 'content-type': 'text/plain' } },
      // Malformed media types: whatever the routed API answers (415).
      { body: JSON.stringify({ vp }), headers: { 'content-type': 'application/json; ;;;==' } },
      { body: JSON.stringify({ vp }), headers: { 'content-type': 'application/json; foo' } },
      { body: JSON.stringify({ vp }), headers: { 'content-type': 'application/json; charset=utf-8' } },
      { body: JSON.stringify({ vp }), headers: { 'content-type': 'APPLICATION/JSON;CHARSET="UTF-8"' } },
      { body: JSON.stringify({ vp }), headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' } },
      // A browser on another site: refused by the app's cross-origin check, on the fast path too.
      { body: JSON.stringify({ vp }), headers: { origin: 'http://evil.example' } },
      { body: JSON.stringify({ vp }), headers: { 'sec-fetch-site': 'cross-site' } },
    ];
    for (const c of cases) {
      const init = { method: 'POST', headers: { 'content-type': 'application/json', ...c.headers }, body: c.body };
      const viaSocket = await fetch(`http://127.0.0.1:${idp.port}/v1/agents/verify-presentation`, init);
      const viaApp = await idp.authority.app.request('/v1/agents/verify-presentation', init);
      expect({ body: c.body.slice(0, 40), status: viaSocket.status, json: await viaSocket.json() }).toEqual({
        body: c.body.slice(0, 40),
        status: viaApp.status,
        json: await viaApp.json(),
      });
    }
  });

  it("refuses a malformed or non-UTF-8 Content-Type with the routed API's 415 over the wire, never a 200", async () => {
    for (const type of ['application/json; ;;;==', 'application/json; foo', 'application/json;charset=latin1']) {
      for (const path of ['/v1/agents/verify-presentation', '/v1/agents']) {
        const r = await fetch(`http://127.0.0.1:${idp.port}${path}`, { method: 'POST', headers: { 'content-type': type }, body: JSON.stringify({ vp }) });
        expect({ type, path, status: r.status, json: await r.json() }).toEqual({
          type,
          path,
          status: 415,
          json: { error: { code: 'unsupported_media_type', message: 'Content-Type must be application/json in UTF-8' } },
        });
      }
    }
  });

  it('takes only plain requests', () => {
    expect(plainVerifyRequest(Buffer.from(JSON.stringify({ vp }))))?.toEqual({ vp });
    expect(plainVerifyRequest(Buffer.from(JSON.stringify({ vp, audience: 'a', nonce: 'n' })))).toEqual({ vp, audience: 'a', nonce: 'n' });
    for (const b of [{ vp, x: 1 }, { vp: `${vp}\n` }, { vp, audience: '' }, { vp, nonce: 'é' }, { vp: 1 }, [vp], null]) {
      expect(plainVerifyRequest(Buffer.from(JSON.stringify(b)))).toBeUndefined();
    }
  });
});
