/**
 * Header rewriting for plain-HTTP forwarding (RFC 9110 7.6.1): hop-by-hop fields are removed in
 * both directions (Connection and every field it names, Keep-Alive, Proxy-*, TE, Trailer,
 * Transfer-Encoding, Upgrade), so Proxy-Authorization never reaches an upstream. Works on node's
 * `rawHeaders` (a flat [name, value, ...] list), which keeps order, case and repeated fields.
 */
import { BRAND } from '../../lib/brand.js';
import { accessTokenShaped } from '../../lib/access-token.js';
import { bearerToken, isVpJwt } from '../decision/credentials.js';

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade']);
/** Prefix of the proxy's own request headers (`X-Writ-*`); the client's are never forwarded. */
const OWN_PREFIX = `x-${BRAND}-`;
export const VIA = `1.1 ${BRAND}-egress`;

/** The field names listed by a Connection value (comma-separated), lower-cased, added to `out`. */
function addTokens(value: string, out: Set<string> | undefined): Set<string> | undefined {
  // The usual keep-alive value names only a field that is hop-by-hop anyway.
  if (value.length === 10 && value.toLowerCase() === 'keep-alive') return out;
  for (const t of value.split(',')) {
    const n = t.trim().toLowerCase();
    if (n) (out ??= new Set()).add(n);
  }
  return out;
}

/** The field names listed by every Connection header of `raw`, lower-cased. */
function connectionTokens(raw: readonly string[]): Set<string> | undefined {
  let out: Set<string> | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.length === 10 && raw[i]!.toLowerCase() === 'connection') out = addTokens(raw[i + 1]!, out);
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
  /** Replaces every Host field with this one, appended last (requests). */
  host?: string;
}

/** True for a field never forwarded: hop-by-hop (fixed list, Proxy-*, named by Connection) or dropped by `opts`. */
function dropped(lower: string, named: Set<string> | undefined, opts: RewriteOptions): boolean {
  if (HOP_BY_HOP.has(lower) || lower.startsWith('proxy-') || named?.has(lower)) return true;
  if (opts.dropOwn && lower.startsWith(OWN_PREFIX)) return true;
  if (opts.dropExpect && lower === 'expect') return true;
  return opts.host !== undefined && lower === 'host';
}

function rewrite(raw: readonly string[], named: Set<string> | undefined, opts: RewriteOptions): string[] {
  const out: string[] = [];
  let via: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    const lower = name.toLowerCase();
    if (dropped(lower, named, opts)) continue;
    if (lower === 'via') {
      via = via === undefined ? raw[i + 1]! : `${via}, ${raw[i + 1]!}`;
      continue;
    }
    out.push(name, raw[i + 1]!);
  }
  if (opts.add) for (const k in opts.add) out.push(k, opts.add[k]!);
  out.push('Via', via === undefined ? VIA : `${via}, ${VIA}`);
  if (opts.host !== undefined) out.push('Host', opts.host);
  return out;
}

/** `raw` without hop-by-hop fields, plus `add` and a Via entry; a fresh flat list. */
export function rewriteHeaders(raw: readonly string[], opts: RewriteOptions = {}): string[] {
  return rewrite(raw, connectionTokens(raw), opts);
}

/**
 * A forwarded request's fields: `rawHeaders` without hop-by-hop fields, client `X-Writ-*` and
 * Expect; then the decision's headers, Via, and `Host: host`. `connection` is node's parsed
 * Connection value (every Connection field, joined), which names further hop-by-hop fields.
 */
export function rewriteRequestHeaders(raw: readonly string[], connection: string | undefined, add: Record<string, string> | undefined, host: string): string[] {
  const named = connection ? addTokens(connection, undefined) : undefined;
  return rewrite(raw, named, { dropOwn: true, dropExpect: true, add, host });
}

/** An upstream answer's fields (undici's raw Buffer list) without hop-by-hop ones, plus Via. */
export function rewriteResponseHeaders(raw: readonly Buffer[]): string[] {
  const h: string[] = new Array<string>(raw.length);
  let named: Set<string> | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toString('latin1');
    const value = raw[i + 1]!.toString('latin1');
    h[i] = name;
    h[i + 1] = value;
    if (name.length === 10 && name.toLowerCase() === 'connection') named = addTokens(value, named);
  }
  return rewrite(h, named, {});
}

/** A header value node will accept: no CR/LF or other control characters, bounded length. */
export function safeHeaderValue(s: string, max = 512): string {
  // eslint-disable-next-line no-control-regex
  const v = s.replace(/[\u0000-\u0008\u000a-\u001f\u007f]+/g, ' ').replace(/[^\t\x20-\x7e]/g, '?');
  return v.length > max ? `${v.slice(0, max - 1)}~` : v;
}

/** A Writ credential in a header an upstream would read: an access token or a Membership VP as a bearer token. */
const agentToken = (value: string) => {
  const t = bearerToken(value);
  return t !== undefined && (accessTokenShaped(t) || isVpJwt(t));
};

/**
 * Forwarded fields without the agent's Writ credentials (issue 43 item 7: a Writ access token or a
 * VP in `Authorization` never reaches an upstream; Proxy-* and X-Writ-* are already gone), and with
 * the upstream's own credential in its header when the target has one (replacing the agent's).
 */
export function withoutAgentTokens(raw: string[], cred: { header: string; value: string } | undefined): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const lower = raw[i]!.toLowerCase();
    if (lower === cred?.header || (lower === 'authorization' && agentToken(raw[i + 1]!))) continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  if (cred) out.push(cred.header, cred.value);
  return out;
}
