/**
 * DID primitives, pure: base58btc, did:key for Ed25519 (multicodec 0xed01 + raw key, base58btc
 * multibase `z`), did:web from a host, the issuer DID document, and Ed25519 key encodings.
 */
import { createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';

const ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';
const INDEX = new Map([...ALPHABET].map((c, i) => [c, i]));

export function base58btcEncode(bytes: Uint8Array): string {
  let zeros = 0;
  while (zeros < bytes.length && bytes[zeros] === 0) zeros++;
  const digits: number[] = [];
  for (let i = zeros; i < bytes.length; i++) {
    let carry = bytes[i]!;
    for (let j = 0; j < digits.length; j++) {
      carry += digits[j]! << 8;
      digits[j] = carry % 58;
      carry = (carry / 58) | 0;
    }
    while (carry > 0) {
      digits.push(carry % 58);
      carry = (carry / 58) | 0;
    }
  }
  return (
    '1'.repeat(zeros) +
    digits
      .reverse()
      .map((d) => ALPHABET[d])
      .join('')
  );
}

/** Longest input base58btcDecode accepts: the decode is quadratic, so its input is bounded first. */
export const BASE58_MAX_CHARS = 128;

export function base58btcDecode(s: string): Uint8Array {
  if (s.length > BASE58_MAX_CHARS) throw new Error(`base58btc input too long (${s.length} > ${BASE58_MAX_CHARS} characters)`);
  let zeros = 0;
  while (zeros < s.length && s[zeros] === '1') zeros++;
  const bytes: number[] = [];
  for (let i = zeros; i < s.length; i++) {
    const v = INDEX.get(s[i]!);
    if (v === undefined) throw new Error('invalid base58btc character');
    let carry = v;
    for (let j = 0; j < bytes.length; j++) {
      carry += bytes[j]! * 58;
      bytes[j] = carry & 0xff;
      carry >>= 8;
    }
    while (carry > 0) {
      bytes.push(carry & 0xff);
      carry >>= 8;
    }
  }
  const out = new Uint8Array(zeros + bytes.length);
  out.set(bytes.reverse(), zeros);
  return out;
}

/** Multicodec varint prefix of an Ed25519 public key (0xed encoded as varint: ed 01). */
const ED25519_PUB = [0xed, 0x01] as const;

/** `z6Mk…`: base58btc multibase of the multicodec-prefixed Ed25519 public key. */
export function ed25519Multibase(raw: Uint8Array): string {
  if (raw.length !== 32) throw new Error('Ed25519 public key must be 32 bytes');
  const buf = new Uint8Array(34);
  buf.set(ED25519_PUB, 0);
  buf.set(raw, 2);
  return 'z' + base58btcEncode(buf);
}

/** Length of every Ed25519 multibase key: `z` + 47 base58btc characters (the 34-byte value starts 0xed01). */
export const ED25519_MULTIBASE_CHARS = 48;
/** Length of every Ed25519 did:key (`did:key:` + the multibase key). */
export const DID_KEY_CHARS = 'did:key:'.length + ED25519_MULTIBASE_CHARS;

/** Raw 32-byte Ed25519 key from a `z6Mk…` multibase; throws on anything else (the length is checked before decoding). */
export function ed25519FromMultibase(mb: string): Uint8Array {
  if (mb.length !== ED25519_MULTIBASE_CHARS) throw new Error(`Ed25519 multibase key must have length ${ED25519_MULTIBASE_CHARS}`);
  if (!mb.startsWith('z')) throw new Error('multibase must be base58btc (z)');
  const buf = base58btcDecode(mb.slice(1));
  if (buf.length !== 34 || buf[0] !== ED25519_PUB[0] || buf[1] !== ED25519_PUB[1]) {
    throw new Error('not an Ed25519 multicodec key');
  }
  return buf.slice(2);
}

export function didKeyFromPublicKey(raw: Uint8Array): string {
  return `did:key:${ed25519Multibase(raw)}`;
}

/** Resolves a did:key to its raw Ed25519 key; the DID itself is the key (no network). */
export function publicKeyFromDidKey(did: string): Uint8Array {
  if (!did.startsWith('did:key:')) throw new Error('not a did:key');
  if (did.length !== DID_KEY_CHARS) throw new Error(`an Ed25519 did:key has length ${DID_KEY_CHARS}`);
  const id = did.slice('did:key:'.length);
  if (id.includes('#') || id.includes(':')) throw new Error('did:key must not carry a fragment or path');
  return ed25519FromMultibase(id);
}

/** Verification method id of a did:key (the spec's convention: `did:key:z…#z…`). */
export function didKeyVerificationMethod(did: string): string {
  return `${did}#${did.slice('did:key:'.length)}`;
}

/**
 * did:web of a host (and optional path): `localhost:8090` -> `did:web:localhost%3A8090`; an
 * already-encoded host is kept; path slashes become colons (did:web spec §3.1).
 */
export function didWeb(host: string): string {
  const trimmed = host
    .trim()
    .replace(/^https?:\/\//, '')
    .replace(/\/+$/, '');
  if (!trimmed) throw new Error('issuer host must not be empty');
  const [authority, ...path] = trimmed.split('/');
  const enc = authority!.replace(/%3A/gi, ':').replace(/:/g, '%3A');
  return ['did:web', enc, ...path.map((p) => encodeURIComponent(p))].join(':');
}

export const ISSUER_KEY_FRAGMENT = 'key-1';

/** A did:web DID document with one Ed25519VerificationKey2020 method (publicKeyMultibase z6Mk…). */
export function issuerDidDocument(did: string, publicKey: Uint8Array) {
  const vm = `${did}#${ISSUER_KEY_FRAGMENT}`;
  return {
    '@context': ['https://www.w3.org/ns/did/v1', 'https://w3id.org/security/suites/ed25519-2020/v1'],
    id: did,
    verificationMethod: [{ id: vm, type: 'Ed25519VerificationKey2020', controller: did, publicKeyMultibase: ed25519Multibase(publicKey) }],
    authentication: [vm],
    assertionMethod: [vm],
  };
}

const b64u = (b: Uint8Array) => Buffer.from(b).toString('base64url');

export function publicKeyObject(raw: Uint8Array): KeyObject {
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: b64u(raw) }, format: 'jwk' });
}

export function rawPublicKey(key: KeyObject): Uint8Array {
  const jwk = key.export({ format: 'jwk' });
  return new Uint8Array(Buffer.from(jwk.x!, 'base64url'));
}

/** The 32-byte RFC 8032 seed of an Ed25519 private key. */
export function rawPrivateSeed(key: KeyObject): Uint8Array {
  const jwk = key.export({ format: 'jwk' });
  return new Uint8Array(Buffer.from(jwk.d!, 'base64url'));
}

/**
 * Private KeyObject from a 32-byte seed (what we issue), a 64-byte seed||public (libsodium, Go)
 * or a PKCS#8 DER blob; the public key is recomputed from the seed.
 */
export function privateKeyFromBytes(bytes: Uint8Array): KeyObject {
  if (bytes.length === 32 || bytes.length === 64) {
    const seed = bytes.subarray(0, 32);
    // Derive x via a throwaway PKCS#8 import, then build the JWK form.
    const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(seed)]);
    return createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' });
  }
  return createPrivateKey({ key: Buffer.from(bytes), format: 'der', type: 'pkcs8' });
}
