/**
 * Sealing of a private key at rest, shared by every key Writ keeps in a store (the identity
 * authority's issuer key, identity/issuer-key.ts; the control plane's audit signing key,
 * control-plane/audit/checkpoint.ts): AES-256-GCM under a key derived with scrypt (per-row salt)
 * from an operator secret. The stored blob is base64 of iv (12 bytes), tag (16) and ciphertext.
 */
import { createCipheriv, createDecipheriv, randomBytes, scryptSync } from 'node:crypto';

function kek(secret: string, salt: Buffer): Buffer {
  return scryptSync(secret, salt, 32, { N: 1 << 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 });
}

/** `seed` sealed under `secret`: the blob and its salt, both base64. */
export function seal(seed: Uint8Array, secret: string): { privateKey: string; salt: string } {
  const salt = randomBytes(16);
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', kek(secret, salt), iv);
  const ct = Buffer.concat([c.update(seed), c.final()]);
  return { privateKey: Buffer.concat([iv, c.getAuthTag(), ct]).toString('base64'), salt: salt.toString('base64') };
}

/** The seed sealed in `blob`; throws `KeySealError` when `secret` is not the one it was sealed under. */
export function unseal(blob: string, salt: string, secret: string): Uint8Array {
  const buf = Buffer.from(blob, 'base64');
  const d = createDecipheriv('aes-256-gcm', kek(secret, Buffer.from(salt, 'base64')), buf.subarray(0, 12));
  d.setAuthTag(buf.subarray(12, 28));
  try {
    return new Uint8Array(Buffer.concat([d.update(buf.subarray(28)), d.final()]));
  } catch {
    throw new KeySealError();
  }
}

/** A sealed key that does not open with the secret given (the caller names its variable). */
export class KeySealError extends Error {
  constructor() {
    super('sealed key cannot be decrypted: wrong secret');
    this.name = 'KeySealError';
  }
}
