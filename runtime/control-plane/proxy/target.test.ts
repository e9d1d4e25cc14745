import { describe, expect, it } from 'vitest';
import { hasBody } from '../../lib/http.js';
import { rewriteHeaders, safeHeaderValue } from './headers.js';
import { parseAbsoluteTarget, parseConnectTarget } from './target.js';

describe('request targets', () => {
  it('parses absolute http URIs with default and explicit ports, IPv6, query', () => {
    expect(parseAbsoluteTarget('http://Example.COM./a?b=1')).toEqual({
      ok: true,
      target: {
        host: 'example.com',
        port: 80,
        hostPort: 'example.com:80',
        connectHost: 'example.com',
        path: '/a?b=1',
        resource: 'http://example.com:80/a?b=1',
      },
    });
    expect(parseAbsoluteTarget('http://h:8080')).toMatchObject({ ok: true, target: { hostPort: 'h:8080', path: '/' } });
    expect(parseAbsoluteTarget('http://[::1]:81/x')).toMatchObject({ ok: true, target: { hostPort: '[::1]:81', connectHost: '::1' } });
  });

  it('refuses https, other schemes, userinfo, bad hosts and ports', () => {
    for (const [u, msg] of [
      ['https://h/', /CONNECT/],
      ['ftp://h/', /unsupported scheme/],
      ['http://u:p@h/', /userinfo/],
      ['http://bad_host!/', /invalid host/],
      ['http://h:0/', /invalid port/],
      ['http://h:70000/', /invalid port/],
      ['/relative', /absolute URI/],
      ['http://a..b/', /invalid host/],
    ] as const) {
      const r = parseAbsoluteTarget(u);
      expect(r.ok, u).toBe(false);
      if (!r.ok) expect(r.error, u).toMatch(msg);
    }
  });

  it('parses CONNECT authorities and requires a port', () => {
    expect(parseConnectTarget('API.example.com:443')).toMatchObject({ ok: true, target: { hostPort: 'api.example.com:443', resource: 'api.example.com:443' } });
    expect(parseConnectTarget('[2001:db8::1]:443')).toMatchObject({ ok: true, target: { connectHost: '2001:db8::1' } });
    for (const a of ['h', 'h:', ':443', 'h:99999', 'http://h:443', 'u@h:443', '[zz]:443', '']) expect(parseConnectTarget(a).ok, a).toBe(false);
  });

  it('writes an IP address one way, however the request spells it (the resolver reads them all alike)', () => {
    // Each of these reaches 127.0.0.1 through getaddrinfo (inet_aton): matched, held and shown as that.
    for (const h of ['2130706433', '0x7f.1', '127.1', '0177.0.0.1', '0x7f000001', '127.0.0.1.']) {
      expect(parseAbsoluteTarget(`http://${h}:8080/x`), h).toMatchObject({
        ok: true,
        target: { host: '127.0.0.1', hostPort: '127.0.0.1:8080', connectHost: '127.0.0.1' },
      });
      expect(parseConnectTarget(`${h}:443`), h).toMatchObject({ ok: true, target: { hostPort: '127.0.0.1:443' } });
    }
    expect(parseConnectTarget('[::FFFF:127.0.0.1]:443')).toMatchObject({ ok: true, target: { hostPort: '[::ffff:7f00:1]:443', connectHost: '::ffff:7f00:1' } });
    expect(parseConnectTarget('[0:0:0:0:0:0:0:1]:443')).toMatchObject({ ok: true, target: { hostPort: '[::1]:443' } });
    // Numbers that are no address are refused, not handed to the resolver; names stay names.
    for (const h of ['08', '256.1.1.1', '1.2.3.4.5', 'svc.123']) expect(parseAbsoluteTarget(`http://${h}/`).ok, h).toBe(false);
    expect(parseAbsoluteTarget('http://0x/')).toMatchObject({ ok: true, target: { host: '0.0.0.0' } });
    expect(parseAbsoluteTarget('http://1e100.net/')).toMatchObject({ ok: true, target: { host: '1e100.net' } });
    expect(parseAbsoluteTarget('http://10.0.0.1/')).toMatchObject({ ok: true, target: { host: '10.0.0.1' } });
  });
});

describe('hop-by-hop rewriting', () => {
  it('drops hop-by-hop fields, fields named by Connection, Proxy-* and (on requests) X-Writ-*; appends Via', () => {
    const raw = [
      'Host',
      'h',
      'Connection',
      'keep-alive, X-Hop',
      'connection',
      'Other',
      'X-Hop',
      '1',
      'Other',
      '2',
      'Keep-Alive',
      'timeout=5',
      'Proxy-Authorization',
      'Bearer secret',
      'Proxy-Connection',
      'keep-alive',
      'TE',
      'trailers',
      'Trailer',
      'X',
      'Transfer-Encoding',
      'chunked',
      'Upgrade',
      'websocket',
      'X-Writ-Actor',
      'admin',
      'Set-Cookie',
      'a=1',
      'Set-Cookie',
      'b=2',
      'Via',
      '1.0 fred',
    ];
    const out = rewriteHeaders(raw, { dropOwn: true, add: { 'x-writ-actor': 'bot' } });
    expect(out).toEqual(['Host', 'h', 'Set-Cookie', 'a=1', 'Set-Cookie', 'b=2', 'x-writ-actor', 'bot', 'Via', '1.0 fred, 1.1 writ-egress']);
    expect(rewriteHeaders(['X-Writ-Subject', 's'])).toEqual(['X-Writ-Subject', 's', 'Via', '1.1 writ-egress']);
  });

  it('knows when a request has a body and makes reasons header-safe', () => {
    expect(hasBody({})).toBe(false);
    expect(hasBody({ 'content-length': '0' })).toBe(false);
    expect(hasBody({ 'content-length': '3' })).toBe(true);
    expect(hasBody({ 'transfer-encoding': 'chunked' })).toBe(true);
    expect(safeHeaderValue('a\r\nInjected: 1 é')).toBe('a Injected: 1 ?');
    expect(safeHeaderValue('x'.repeat(600)).length).toBe(512);
  });
});
