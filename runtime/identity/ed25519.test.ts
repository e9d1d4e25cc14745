import { generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { MAX_OFF_THREAD, verifyEd25519, waitingOffThread } from './ed25519.js';

describe('verifyEd25519', () => {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const other = generateKeyPairSync('ed25519').publicKey;

  it('accepts the signer key and rejects a changed message, a changed signature and another key', async () => {
    const m = randomBytes(1500);
    const s = sign(null, m, privateKey);
    expect(await verifyEd25519(m, publicKey, s)).toBe(true);
    const m2 = Buffer.from(m);
    m2[7]! ^= 1;
    expect(await verifyEd25519(m2, publicKey, s)).toBe(false);
    const s2 = Buffer.from(s);
    s2[0]! ^= 1;
    expect(await verifyEd25519(m, publicKey, s2)).toBe(false);
    expect(await verifyEd25519(m, other, s)).toBe(false);
  });

  it('answers false, never a throw, for a key that cannot verify Ed25519', async () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey;
    const m = randomBytes(32);
    expect(await verifyEd25519(m, rsa, sign(null, m, privateKey))).toBe(false);
  });

  it('gives every answer right when more are asked at once than may wait off the event loop', async () => {
    const n = MAX_OFF_THREAD * 4 + 8;
    const cases = Array.from({ length: n }, (_, i) => {
      const m = randomBytes(64);
      const s = sign(null, m, privateKey);
      // Every third one is tampered with: the answers must line up with their own question.
      if (i % 3 === 0) s[5]! ^= 0xff;
      return { m, s, want: i % 3 !== 0 };
    });
    const asked = cases.map((c) => verifyEd25519(c.m, publicKey, c.s));
    // The pool holds at most its bound; the rest were verified on this thread.
    expect(waitingOffThread()).toBe(MAX_OFF_THREAD);
    expect(await Promise.all(asked)).toEqual(cases.map((c) => c.want));
    expect(waitingOffThread()).toBe(0);
  });
});
