import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sha256 } from './sha256.js';

describe('sha256', () => {
  it('is SHA-256 of the UTF-8 bytes, as hex or base64url', () => {
    expect(sha256('abc', 'hex')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    for (const s of ['', 'writ-egress\neyJhbGciOiJFZERTQSJ9.e30.sig', 'Zoë ✓ 🚀', 'x'.repeat(100_000)]) {
      for (const enc of ['hex', 'base64url'] as const) expect(sha256(s, enc)).toBe(createHash('sha256').update(Buffer.from(s, 'utf8')).digest(enc));
    }
  });
});
