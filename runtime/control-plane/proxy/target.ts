/**
 * Where a proxied request goes, parsed from the request target (RFC 9112 3.2): the absolute form
 * `http://host[:port]/path?q` of a plain request, or the authority form `host:port` of CONNECT.
 * Pure; every rejection carries a message fit for a 400 body.
 */
import { normaliseHost, parseHostPort, portOf } from '../../lib/host-name.js';

export interface ProxyTarget {
  /** Lower-case host without a trailing dot; IPv6 literals keep their brackets. */
  host: string;
  port: number;
  /** `host:port`, the key matched against registry `upstream`s and `egressAllow` entries. */
  hostPort: string;
  /** What node:net / node:http connect to (IPv6 without brackets). */
  connectHost: string;
  /** Origin-form path and query sent upstream (plain HTTP only). */
  path: string;
  /** The resource as a URL, for approval records (`http://host:port/path`, or `host:port` for CONNECT). */
  resource: string;
}

export type Parsed = { ok: true; target: ProxyTarget } | { ok: false; error: string };

function make(host: string, port: number, path: string, scheme: 'http' | 'connect'): ProxyTarget {
  const hostPort = `${host}:${port}`;
  return {
    host,
    port,
    hostPort,
    connectHost: host.startsWith('[') ? host.slice(1, -1) : host,
    path,
    resource: scheme === 'http' ? `http://${hostPort}${path}` : hostPort,
  };
}

/** `CONNECT host:port`: the port is required (RFC 9110 9.3.6). */
export function parseConnectTarget(authority: string | undefined): Parsed {
  const a = (authority ?? '').trim();
  const p = parseHostPort(a);
  if ('error' in p) {
    const shown = JSON.stringify(a.slice(0, 200));
    return { ok: false, error: p.error === 'form' ? `CONNECT needs a host:port target, got ${shown}` : `invalid ${p.error} in CONNECT target ${shown}` };
  }
  return { ok: true, target: make(p.host, p.port, '', 'connect') };
}

/**
 * Absolute-form `http://host[:port]/path?query`. `https://` is refused: a TLS origin is reached
 * with CONNECT, so TLS stays end to end and the proxy never holds plaintext of it.
 */
export function parseAbsoluteTarget(url: string | undefined): Parsed {
  const u = url ?? '';
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/([^/?#]*)([^#]*)/.exec(u);
  if (!m) return { ok: false, error: 'a proxy request needs an absolute URI (http://host/path), or CONNECT host:port for TLS' };
  const scheme = m[1]!.toLowerCase();
  if (scheme === 'https') return { ok: false, error: 'https:// targets go through CONNECT (TLS stays end to end); send CONNECT host:443' };
  if (scheme !== 'http') return { ok: false, error: `unsupported scheme ${JSON.stringify(scheme)}: only http:// and CONNECT are proxied` };
  const authority = m[2]!;
  if (authority.includes('@')) return { ok: false, error: 'userinfo in the request URI is not allowed' };
  const am = /^(\[[^\]]*\]|[^:]*)(?::(\d*))?$/.exec(authority);
  const host = am ? normaliseHost(am[1]!) : undefined;
  if (!am || !host) return { ok: false, error: `invalid host in request URI ${JSON.stringify(u.slice(0, 200))}` };
  const port = portOf(am[2], 80);
  if (!port) return { ok: false, error: `invalid port in request URI ${JSON.stringify(u.slice(0, 200))}` };
  let path = m[3] || '/';
  if (!path.startsWith('/')) path = `/${path}`;
  // node's parser already refuses control characters and spaces in the request target.
  return { ok: true, target: make(host, port, path, 'http') };
}
