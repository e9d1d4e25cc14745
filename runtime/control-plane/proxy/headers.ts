/**
 * Header rewriting for plain-HTTP forwarding (RFC 9110 7.6.1): hop-by-hop fields are removed in
 * both directions (Connection and every field it names, Keep-Alive, Proxy-*, TE, Trailer,
 * Transfer-Encoding, Upgrade), so Proxy-Authorization never reaches an upstream. Works on node's
 * `rawHeaders` (a flat [name, value, ...] list), which keeps order, case and repeated fields.
 */
import { BRAND } from '../../lib/brand.js';

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade']);
/** Prefix of the proxy's own request headers (`X-Writ-*`); the client's are never forwarded. */
const OWN_PREFIX = `x-${BRAND}-`;
export const VIA = `1.1 ${BRAND}-egress`;

/** The field names listed by every Connection header of `raw`, lower-cased. */
function connectionTokens(raw: readonly string[]): Set<string> | undefined {
  let out: Set<string> | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() !== 'connection') continue;
    for (const t of raw[i + 1]!.split(',')) {
      const n = t.trim().toLowerCase();
      if (n) (out ??= new Set()).add(n);
    }
  }
  return out;
}

export interface RewriteOptions {
  /** Drop `X-Writ-*` fields (requests: the proxy stamps its own decision headers instead). */
  dropOwn?: boolean;
  /** Appended after the kept fields. */
  add?: Record<string, string>;
  /** Drop Expect (requests: the proxy answered 100-continue to the client itself). */
  dropExpect?: boolean;
}

/** `raw` without hop-by-hop fields, plus `add` and a Via entry; a fresh flat list. */
export function rewriteHeaders(raw: readonly string[], opts: RewriteOptions = {}): string[] {
  const named = connectionTokens(raw);
  const out: string[] = [];
  let via: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || lower.startsWith('proxy-') || named?.has(lower)) continue;
    if (opts.dropOwn && lower.startsWith(OWN_PREFIX)) continue;
    if (opts.dropExpect && lower === 'expect') continue;
    if (lower === 'via') {
      via = via === undefined ? raw[i + 1]! : `${via}, ${raw[i + 1]!}`;
      continue;
    }
    out.push(name, raw[i + 1]!);
  }
  if (opts.add) for (const [k, v] of Object.entries(opts.add)) out.push(k, v);
  out.push('Via', via === undefined ? VIA : `${via}, ${VIA}`);
  return out;
}

/** Sets (replaces) one field of a flat raw list in place. */
export function setHeader(raw: string[], name: string, value: string): void {
  const lower = name.toLowerCase();
  for (let i = raw.length - 2; i >= 0; i -= 2) if (raw[i]!.toLowerCase() === lower) raw.splice(i, 2);
  raw.push(name, value);
}

/** True when a request announces a body (Content-Length > 0 or any Transfer-Encoding). */
export function hasBody(h: { 'content-length'?: string; 'transfer-encoding'?: string }): boolean {
  if (h['transfer-encoding'] !== undefined) return true;
  const cl = h['content-length'];
  return cl !== undefined && cl !== '0';
}

/** A header value node will accept: no CR/LF or other control characters, bounded length. */
export function safeHeaderValue(s: string, max = 512): string {
  // eslint-disable-next-line no-control-regex
  const v = s.replace(/[\u0000-\u0008\u000a-\u001f\u007f]+/g, ' ').replace(/[^\t\x20-\x7e]/g, '?');
  return v.length > max ? `${v.slice(0, max - 1)}~` : v;
}
