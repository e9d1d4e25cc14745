/**
 * The forward proxy under bad input and failing upstreams, end to end: malformed, oversized and
 * slow requests on raw sockets, upstreams that hang or reset (plain, upload and tunnel), the
 * connections drained back to zero and the error metrics (plane-testing.ts). On PGlite, and on
 * PostgreSQL too when TEST_DATABASE_URL is set.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../lib/brand.js';
import { testBackends } from '../../store/testing.js';
import { eventually } from '../../lib/poll-testing.js';
import { startProxyPlane, type ProxyPlane } from './plane-testing.js';

/** Writes `data` on a raw socket and resolves with everything received until the server closes. */
function raw(port: number, data: string, opts: { endAfterMs?: number } = {}): Promise<string> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => s.write(data));
    let out = '';
    s.on('data', (c: Buffer) => (out += c.toString()));
    s.on('error', () => {});
    s.on('close', () => resolve(out));
    const t = setTimeout(() => s.destroy(), opts.endAfterMs ?? 8000);
    s.on('close', () => clearTimeout(t));
  });
}

describe.each(testBackends())('forward proxy on $name', (b) => {
  let plane: ProxyPlane | undefined;
  let run: ProxyPlane['run'];
  let mgmt: string;
  let bot: string;
  let certFile: string;
  let ports: ProxyPlane['ports'];
  let via: ProxyPlane['via'];

  beforeAll(async () => {
    plane = await startProxyPlane(b);
    ({ run, mgmt, bot, certFile, ports, via } = plane);
  });

  afterAll(async () => {
    await plane?.close();
  });

  it('bad input: malformed request line, origin-form target, missing Host, https absolute URI, oversized head, slowloris', async () => {
    const port = run.gateway.port!;
    expect(await raw(port, 'GARBAGE\r\n\r\n')).toMatch(/^HTTP\/1\.1 400/);
    const origin = await raw(port, 'GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n');
    expect(origin).toMatch(/^HTTP\/1\.1 400/);
    expect(origin).toContain('absolute URI');
    const noHost = await raw(port, `GET http://127.0.0.1:${ports.echo}/ HTTP/1.1\r\nConnection: close\r\n\r\n`);
    expect(noHost).toMatch(/^HTTP\/1\.1 400/);
    expect(noHost).toContain('missing Host');
    const tlsAbs = await raw(port, `GET https://127.0.0.1:${ports.tls}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(tlsAbs).toContain('CONNECT');
    expect(await raw(port, 'CONNECT nohostport HTTP/1.1\r\nHost: x\r\n\r\n')).toMatch(/^HTTP\/1\.1 400/);
    const upgrade = await raw(port, `GET http://127.0.0.1:${ports.echo}/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`);
    expect(upgrade).toMatch(/^HTTP\/1\.1 501/);
    const huge = await raw(port, `GET http://a/ HTTP/1.1\r\nHost: a\r\nX-Big: ${'a'.repeat(40 * 1024)}\r\n\r\n`);
    expect(huge).toMatch(/^HTTP\/1\.1 431/);
    const t0 = Date.now();
    const slow = await raw(port, 'GET http://a/ HTTP/1.1\r\nHost: a\r\nX-Slow: ');
    expect(slow).toMatch(/^HTTP\/1\.1 408/);
    expect(Date.now() - t0).toBeLessThan(7000);
    expect(await raw(port, 'GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n')).toMatch(/^HTTP\/1\.1 200[^]*\{"ok":true\}$/);
  });

  it('an upstream that hangs is 504, one that resets is 502; sockets return to zero', async () => {
    const h = await via(bot, [`http://127.0.0.1:${ports.hang}/`]);
    expect(h.status).toBe(504);
    const r = await via(bot, [`http://127.0.0.1:${ports.reset}/`]);
    expect(r.status).toBe(502);
    // An upload into an upstream that resets: 502 or a cut connection, never a crashed proxy.
    const upload = join(certFile, '..', 'reset-upload.bin');
    writeFileSync(upload, randomBytes(2 * 1024 * 1024));
    const up = await via(bot, ['--data-binary', `@${upload}`, `http://127.0.0.1:${ports.reset}/`]);
    expect([0, 502]).toContain(up.status);
    // A tunnel whose upstream resets mid-stream ends the client's connection, nothing else.
    const t = await via(bot, ['--cacert', certFile, `https://127.0.0.1:${ports.reset}/`]);
    expect(t.connect).toBe(200);
    expect(t.exit).not.toBe(0);
    expect((await via(bot, [`http://127.0.0.1:${ports.echo}/still-up`])).status).toBe(200);
    const gw = run.gateway.proxy!;
    await eventually(() => {
      const s = gw.stats();
      return s.clients === 0 && s.upstreams === 0 && s.tunnels === 0 && s.held === 0 ? s : undefined;
    }, 'proxy connections to drain');
    const text = await (await fetch(`${mgmt}/metrics`)).text();
    expect(text).toContain(`${metric('egress_proxy_upstream_errors_total')}{via="http",status="504"} 1`);
    expect(text).toMatch(new RegExp(`${metric('authz_decisions_total')}\\{service="echo",decision="allow",rule="inline"\\} \\d+`));
    expect(text).toContain(`${metric('egress_proxy_open')}{kind="clients"} 0`);
  });
});
