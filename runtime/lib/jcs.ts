/**
 * RFC 8785 JSON Canonicalization Scheme for values parsed from JSON: object keys sorted by UTF-16
 * code units, no whitespace, numbers and strings as ECMAScript's JSON.stringify writes them
 * (which is what the RFC specifies). `argsDigest` is the SHA-256 (hex) of that text: what an
 * approval of a tool call is bound to and what the audit record names instead of the arguments.
 */
import { sha256 } from './sha256.js';

export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') {
    if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError('RFC 8785: a number must be finite');
    const s = JSON.stringify(v) as string | undefined;
    if (s === undefined) throw new TypeError(`RFC 8785: ${typeof v} is not JSON`);
    return s;
  }
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o)
    .filter((k) => o[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`;
}

/** SHA-256 (hex) of the canonical form of `args` (absent arguments are `{}`). */
export function argsDigest(args: unknown): string {
  return sha256(canonicalJson(args ?? {}), 'hex');
}
