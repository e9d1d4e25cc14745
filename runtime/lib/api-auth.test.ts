import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { apiAuth, cachedCheck, credentialCheck, CREDENTIAL_CACHE_MS, holdsAll, type Principal } from './api-auth.js';

const principal = (id: string): Principal => ({ kind: 'key', id, scopes: new Set() });

describe('cachedCheck', () => {
  it('answers from the cache within CREDENTIAL_CACHE_MS and asks again after it', async () => {
    let t = 0;
    const asked: string[] = [];
    const check = cachedCheck(
      async (tok) => (asked.push(tok), principal(tok)),
      () => t,
    );
    await check('a');
    await check('a');
    expect(asked).toEqual(['a']);
    t += CREDENTIAL_CACHE_MS;
    await check('a');
    expect(asked).toEqual(['a', 'a']);
  });

  it('evicts the oldest entry when full instead of forgetting every answer', async () => {
    const asked: string[] = [];
    const check = cachedCheck(
      async (tok) => (asked.push(tok), principal(tok)),
      () => 0,
      3,
    );
    for (const tok of ['a', 'b', 'c', 'd']) await check(tok);
    asked.length = 0;
    await check('b');
    await check('c');
    await check('d');
    expect(asked).toEqual([]);
    await check('a');
    expect(asked).toEqual(['a']);
  });
});

describe('credentialCheck', () => {
  const oidc = {
    verify: async (token: string) =>
      token === 'h.good.s' ? { ok: true as const, subject: 'alice', claims: { scope: 'registry:read' } } : { ok: false as const, reason: 'bad' },
  };
  const verifyKey = async (token: string) => (token === 'writ_key' ? { id: 'k1', scopes: ['audit:read'] } : undefined);

  it('sends a JWT to the OIDC verifier and anything else to the key verifier', async () => {
    const check = credentialCheck({ oidc, verifyKey });
    const o = await check('h.good.s');
    expect(o?.id).toBe('oidc:alice');
    expect([...(o?.scopes ?? [])]).toEqual(['registry:read']);
    expect(await check('h.bad.s')).toBeUndefined();
    const k = await check('writ_key');
    expect(k?.id).toBe('key:k1');
    expect(await check('writ_other')).toBeUndefined();
  });

  it('asks the key verifier every time (a revoked key stops at once) and remembers OIDC answers', async () => {
    let keyAsks = 0;
    let oidcAsks = 0;
    const check = credentialCheck({
      oidc: { verify: async (t) => (oidcAsks++, oidc.verify(t)) },
      verifyKey: async (t) => (keyAsks++, verifyKey(t)),
    });
    await check('writ_key');
    await check('writ_key');
    await check('h.good.s');
    await check('h.good.s');
    expect([keyAsks, oidcAsks]).toEqual([2, 1]);
  });

  it('carries the tenant a key is bound to, and apiAuth refuses such a key', async () => {
    const check = credentialCheck({ verifyKey: async () => ({ id: 'k2', scopes: ['admin'], tenantId: 'acme' }) });
    expect((await check('writ_t'))?.tenant).toBe('acme');
    expect((await credentialCheck({ verifyKey })('writ_key'))?.tenant).toBeUndefined();
    const app = new Hono();
    app.use('*', apiAuth({ mode: 'keys', check, deny: (c, status, message) => c.json({ error: message }, status) }));
    app.get('/v1/registry/services', (c) => c.json([]));
    const res = await app.request('/v1/registry/services', { headers: { authorization: 'Bearer writ_t' } });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: string }).error).toMatch(/bound to tenant "acme"/);
  });

  it('holdsAll: a caller holds what its scopes list or admin holds; no caller (auth off) holds all', () => {
    const p = (...s: string[]): Principal => ({ kind: 'key', id: 'k', scopes: new Set(s) });
    expect(holdsAll(p('keys:admin'), ['keys:admin'])).toBe(true);
    expect(holdsAll(p('keys:admin'), ['keys:admin', 'admin'])).toBe(false);
    expect(holdsAll(p('admin'), ['anything', 'admin'])).toBe(true);
    expect(holdsAll(undefined, ['admin'])).toBe(true);
  });

  it('denies when the key verifier fails and when there is no verifier', async () => {
    expect(await credentialCheck({ verifyKey: () => Promise.reject(new Error('down')) })('writ_key')).toBeUndefined();
    expect(await credentialCheck({})('h.good.s')).toBeUndefined();
  });
});
