import { describe, expect, it } from 'vitest';
import { cachedCheck, credentialCheck, CREDENTIAL_CACHE_MS, type Principal } from './api-auth.js';

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

  it('denies when the key verifier fails and when there is no verifier', async () => {
    expect(await credentialCheck({ verifyKey: () => Promise.reject(new Error('down')) })('writ_key')).toBeUndefined();
    expect(await credentialCheck({})('h.good.s')).toBeUndefined();
  });
});
