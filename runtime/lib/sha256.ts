/**
 * SHA-256 of a string's UTF-8 bytes, as hex or base64url: Node's one-shot `crypto.hash` where it
 * exists (>= 20.12: no Hash object, about half the cost of createHash for a short string), else
 * createHash. Hot paths use it: the audit record hash, the VP cache key, directory row digests.
 */
import crypto from 'node:crypto';

type Encoding = 'hex' | 'base64url';
const oneShot = (crypto as { hash?: (alg: string, data: string, enc: Encoding) => string }).hash;

export const sha256: (s: string, enc: Encoding) => string = oneShot
  ? (s, enc) => oneShot('sha256', s, enc)
  : (s, enc) => crypto.createHash('sha256').update(s, 'utf8').digest(enc);
