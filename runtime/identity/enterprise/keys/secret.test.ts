/** Pure key material and the pepper choice (env, or one stored in the database). */
import { describe, expect, it } from 'vitest';
import { openTestPglite } from '../../../store/testing.js';
import { mint, parseKey, pepperFromEnv, secretMatches } from './secret.js';
import { keyService } from './service.js';

describe('key material', () => {
  const pepper = Buffer.alloc(32, 7);
  it('mints distinct 256-bit secrets that round-trip through parse and match only themselves', () => {
    const a = mint('test', pepper);
    const b = mint('live', pepper);
    expect(a.plaintext).not.toBe(b.plaintext);
    const pa = parseKey(a.plaintext)!;
    expect(pa).toMatchObject({ env: 'test', id: a.id });
    expect(secretMatches(pepper, pa.secret, a)).toBe(true);
    expect(secretMatches(pepper, pa.secret, b)).toBe(false);
    expect(secretMatches(Buffer.alloc(32, 8), pa.secret, a)).toBe(false);
    expect(secretMatches(pepper, pa.secret, undefined)).toBe(false);
  });
  it('pepper from env: >= 32 bytes, raw, base64: or hex:', () => {
    expect(() => pepperFromEnv('short')).toThrow(/32 bytes/);
    expect(pepperFromEnv('hex:' + 'ab'.repeat(32))).toHaveLength(32);
    expect(pepperFromEnv('base64:' + Buffer.alloc(40).toString('base64'))).toHaveLength(40);
    expect(() => keyService({ db: undefined as never, now: Date.now, pepper: 'x' })).toThrow(/32 bytes/);
  });
  it('without IDP_API_KEY_PEPPER a stored pepper is created once, so keys survive a restart', async () => {
    const store = await openTestPglite();
    try {
      const one = keyService({ db: store.db, now: Date.now });
      const { plaintext } = await one.create({ name: 'x', env: 'test', scopes: [] });
      const two = keyService({ db: store.db, now: Date.now });
      expect((await two.verify(plaintext)).valid).toBe(true);
      const other = keyService({ db: store.db, now: Date.now, pepper: 'z'.repeat(32) });
      expect((await other.verify(plaintext)).reason).toBe('invalid_key');
    } finally {
      await store.close();
    }
  }, 90_000); // the first PGlite of a worker boots in seconds, tens of them on a loaded machine
});
