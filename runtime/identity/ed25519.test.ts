import { generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { MAX_OFF_THREAD, verifyEd25519, waitingOffThread } from './ed25519.js';

describe('verifyEd25519', () => {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const other = generateKeyPairSync('ed25519').publicKey;
  const m0 = randomBytes(64);
  const s0 = sign(null, m0, privateKey);

  /** Keeps the event loop busy for `ms` (as a saturated request thread is). */
  const spin = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end);
  };
  /** Two busy windows, each ended by a verification (which reads the utilisation): the thread counts as saturated. */
  const saturate = async () => {
    for (let i = 0; i < 2; i++) {
      spin(60);
      expect(await verifyEd25519(m0, publicKey, s0)).toBe(true);
    }
  };

  it('accepts the signer key and rejects a changed message, a changed signature and another key, on either thread', async () => {
    const m = randomBytes(1500);
    const s = sign(null, m, privateKey);
    const m2 = Buffer.from(m);
    m2[7]! ^= 1;
    const s2 = Buffer.from(s);
    s2[0]! ^= 1;
    for (const busy of [false, true]) {
      if (busy) await saturate();
      else await sleep(200);
      const answers = await Promise.all([
        verifyEd25519(m, publicKey, s),
        verifyEd25519(m2, publicKey, s),
        verifyEd25519(m, publicKey, s2),
        verifyEd25519(m, other, s),
      ]);
      expect(answers).toEqual([true, false, false, false]);
    }
  });

  it('answers false, never a throw, for a key that cannot verify Ed25519', async () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey;
    const m = randomBytes(32);
    expect(await verifyEd25519(m, rsa, sign(null, m, privateKey))).toBe(false);
    await saturate();
    expect(await verifyEd25519(m, rsa, sign(null, m, privateKey))).toBe(false);
  });

  it('verifies on the request thread while it is not saturated: no hand-off for a request at a time', async () => {
    await sleep(200);
    const asked = verifyEd25519(m0, publicKey, s0);
    expect(waitingOffThread()).toBe(0);
    expect(await asked).toBe(true);
  });

  it('on a saturated thread, hands off at most MAX_OFF_THREAD and gives every answer right', async () => {
    const n = MAX_OFF_THREAD * 4 + 8;
    const cases = Array.from({ length: n }, (_, i) => {
      const m = randomBytes(64);
      const s = sign(null, m, privateKey);
      // Every third one is tampered with: the answers must line up with their own question.
      if (i % 3 === 0) s[5]! ^= 0xff;
      return { m, s, want: i % 3 !== 0 };
    });
    await saturate();
    const asked = cases.map((c) => verifyEd25519(c.m, publicKey, c.s));
    // The pool holds its bound (none on a one-core machine); the rest were verified on this thread.
    expect(waitingOffThread()).toBe(MAX_OFF_THREAD);
    expect(await Promise.all(asked)).toEqual(cases.map((c) => c.want));
    expect(waitingOffThread()).toBe(0);
  });
});
