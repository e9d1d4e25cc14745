/**
 * A host name or IP address in its one spelling, as it appears in a URI or an authority (RFC
 * 3986): what the forward proxy reads from a request target (control-plane/proxy/target.ts) and
 * the dry-run reads from the host it is asked about, so both decide on the same name. Pure.
 */

const DNS_HOST = /^[a-z0-9_](?:[a-z0-9_.-]{0,251}[a-z0-9_])?$/;
const IPV6 = /^\[[0-9a-f:.]+\]$/;

/** A last label the WHATWG URL host parser reads as a number: the host is an IPv4 address. */
const NUMERIC_LABEL = /(?:^|\.)(?:\d+|0x[0-9a-f]*)$/;

/**
 * An IP address in its one canonical spelling (`127.0.0.1`, `[::ffff:7f00:1]`), as the WHATWG URL
 * parser writes it; undefined when it is no address. The resolver would connect
 * `2130706433`, `0x7f.1` or `127.1` to 127.0.0.1 (inet_aton), while an approval record or an
 * egressAllow entry showed them as something else.
 */
function canonicalAddress(h: string): string | undefined {
  try {
    return new URL(`http://${h}/`).hostname;
  } catch {
    return undefined;
  }
}

/** Validates and normalises a host as it appears in a URI or authority. */
export function normaliseHost(raw: string): string | undefined {
  let h = raw.toLowerCase();
  if (h.endsWith('.') && !h.startsWith('[')) h = h.slice(0, -1);
  if (IPV6.test(h)) return h.includes(':') ? canonicalAddress(h) : undefined;
  if (!DNS_HOST.test(h) || h.includes('..')) return undefined;
  return NUMERIC_LABEL.test(h) ? canonicalAddress(h) : h;
}

/** A port as written (1-65535); `fallback` when absent, undefined when malformed. */
export function portOf(raw: string | undefined, fallback: number | undefined): number | undefined {
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d{1,5}$/.test(raw)) return undefined;
  const n = Number(raw);
  return n >= 1 && n <= 65535 ? n : undefined;
}

/**
 * An authority `host:port` (the port required, as CONNECT's), normalised: `{host, port}`, or a
 * message naming what is wrong with it.
 */
export function parseHostPort(authority: string): { host: string; port: number } | { error: 'form' | 'host' | 'port' } {
  const m = /^(\[[^\]]*\]|[^:[\]/@\s]+):(\d{1,5})$/.exec(authority);
  if (!m) return { error: 'form' };
  const host = normaliseHost(m[1]!);
  if (!host) return { error: 'host' };
  const port = portOf(m[2], undefined);
  return port ? { host, port } : { error: 'port' };
}
