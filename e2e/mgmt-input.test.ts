/**
 * The control plane's management API answers bad input with 400 in its own `{error}` shape, never
 * a 503 "store unavailable" or a 500 (issue 15 item 2): a NUL or an unpaired surrogate in a body
 * string, a path or a query parameter, and free-form JSON nested thousands deep. Real listener,
 * real store (PGlite; PostgreSQL too when TEST_DATABASE_URL is set).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../runtime/lib/log.js';
import { startControlPlane, type RunningControlPlane } from '../runtime/control-plane/server.js';
import type { Store } from '../runtime/store/factory.js';
import { testBackends } from '../runtime/store/testing.js';

setLogLevel('error');
type Json = any;

describe.each(testBackends())('management API input hygiene on $name', (b) => {
  let store: Store;
  let cp: RunningControlPlane;
  let base: string;
  const call = async (method: string, path: string, body?: string) => {
    const res = await fetch(base + path, { method, headers: body === undefined ? {} : { 'content-type': 'application/json' }, body });
    const text = await res.text();
    let json: Json;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, json, text };
  };
  const expect400 = (r: { status: number; json: Json; text: string }, what: string) => {
    expect(r.status, `${what}: ${r.text.slice(0, 200)}`).toBe(400);
    expect(typeof r.json?.error, what).toBe('string');
  };

  beforeAll(async () => {
    store = await b.open();
    cp = await startControlPlane({ store, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0', durableAudit: false });
    base = `http://127.0.0.1:${cp.mgmtPort}`;
  });
  afterAll(async () => {
    await cp?.close();
    await store?.close();
  });

  it('registry upsert with a lone surrogate or a NUL owner is a 400, not 503 store unavailable', async () => {
    for (const owner of ['\\ud800', 'a\\u0000b', '\\udc00x']) {
      const r = await call('POST', '/v1/registry/services', `{"name":"svc","upstream":"svc:80","owner":"${owner}"}`);
      expect400(r, owner);
      expect(r.json.error).not.toMatch(/unavailable/);
    }
    const ok = await call('POST', '/v1/registry/services', '{"name":"svc","upstream":"svc:80","owner":"team \\ud83d\\ude00"}');
    expect(ok.status).toBe(200);
  });

  it('usage with a NUL is exactly invalid body; path and query NULs are 400; deep JSON is 400', async () => {
    const u = await call('POST', '/v1/usage', '{"agent":"a\\u0000","model":"m","tokens":1,"costUsd":0}');
    expect(u.status).toBe(400);
    expect(u.json).toEqual({ error: 'invalid body' });
    expect400(await call('GET', '/v1/registry/services/a%00b'), 'path');
    expect400(await call('GET', '/v1/audit?limit=1%00'), 'query');
    const deep = `{"name":"svc2","upstream":"svc2:80","owner":${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}}`;
    expect400(await call('POST', '/v1/registry/services', deep), 'deep');
  });
});
