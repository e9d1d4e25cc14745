/**
 * Pure key material (SPEC 2.10): minting, parsing and hashing of API-key plaintexts.
 *
 * Plaintext: `<keyPrefix(env)><id>_<secret>` where `id` is 16 hex chars (the public record id,
 * used to find the row) and `secret` is 32 random bytes in base64url (43 chars, 256 bits).
 * At rest: `HMAC-SHA-256(pepper, salt || secret)` with a 16-byte per-key salt. Verification
 * recomputes the HMAC and compares with `crypto.timingSafeEqual`.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { keyPrefix } from '../../../lib/brand.js';

export type KeyEnv = 'live' | 'test';
export const KEY_ENVS = ['live', 'test'] as const;

export const SECRET_BYTES = 32;
const SALT_BYTES = 16;
const ID_RE = /^[0-9a-f]{16}$/;
const SECRET_RE = /^[A-Za-z0-9_-]{43}$/;

export interface Minted {
  id: string;
  plaintext: string;
  prefix: string;
  last4: string;
  salt: string;
  hash: string;
}

export function hashSecret(pepper: Buffer, salt: string | Buffer, secret: string): Buffer {
  return createHmac('sha256', pepper)
    .update(typeof salt === 'string' ? Buffer.from(salt, 'base64url') : salt)
    .update(secret)
    .digest();
}

export function mint(env: KeyEnv, pepper: Buffer): Minted {
  const id = randomBytes(8).toString('hex');
  const secret = randomBytes(SECRET_BYTES).toString('base64url');
  const salt = randomBytes(SALT_BYTES).toString('base64url');
  const prefix = keyPrefix(env);
  const plaintext = `${prefix}${id}_${secret}`;
  return { id, plaintext, prefix, last4: plaintext.slice(-4), salt, hash: hashSecret(pepper, salt, secret).toString('base64url') };
}

export interface Parsed {
  env: KeyEnv;
  id: string;
  secret: string;
}

/** Splits a presented key; undefined when it is not shaped like one of ours. */
export function parseKey(key: string): Parsed | undefined {
  for (const env of KEY_ENVS) {
    const p = keyPrefix(env);
    if (!key.startsWith(p)) continue;
    const rest = key.slice(p.length);
    const id = rest.slice(0, 16);
    const secret = rest.slice(17);
    if (rest[16] !== '_' || !ID_RE.test(id) || !SECRET_RE.test(secret)) return undefined;
    return { env, id, secret };
  }
  return undefined;
}

const DUMMY_SALT = Buffer.alloc(SALT_BYTES).toString('base64url');
const DUMMY_HASH = Buffer.alloc(32);

/**
 * Constant-time check of `secret` against a stored hash (base64url text, or decoded bytes). With
 * no stored row it still computes one HMAC and one comparison, so a missing key costs the same as
 * a wrong one.
 */
export function secretMatches(pepper: Buffer, secret: string, stored: { salt: string | Buffer; hash: string | Buffer } | undefined): boolean {
  const expected = stored ? (typeof stored.hash === 'string' ? Buffer.from(stored.hash, 'base64url') : stored.hash) : DUMMY_HASH;
  const actual = hashSecret(pepper, stored?.salt ?? DUMMY_SALT, secret);
  const same = expected.length === actual.length && timingSafeEqual(expected, actual);
  return stored !== undefined && same;
}

export const masked = (prefix: string, id: string, last4: string): string => `${prefix}${id}_${'•'.repeat(8)}${last4}`;

/** Pepper from IDP_API_KEY_PEPPER: at least 32 bytes (raw text, or `base64:`/`hex:` encoded). */
export function pepperFromEnv(value: string): Buffer {
  const buf = value.startsWith('base64:')
    ? Buffer.from(value.slice(7), 'base64')
    : value.startsWith('hex:')
      ? Buffer.from(value.slice(4), 'hex')
      : Buffer.from(value, 'utf8');
  if (buf.length < 32) throw new Error('IDP_API_KEY_PEPPER must hold at least 32 bytes');
  return buf;
}
