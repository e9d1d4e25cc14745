/**
 * The forward proxy end to end with the real curl: who may pass (407 without a bearer, 403 for a
 * bad or revoked VP or a target not allowlisted), plain HTTP forwarded with streaming bodies and
 * rewritten headers, CONNECT (TLS to a local server with a self-signed certificate, verified by
 * curl), agent VPs from a real identity authority (plane-testing.ts). On PGlite, and on
 * PostgreSQL too when TEST_DATABASE_URL is set.
 */
import { createHash, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../../lib/brand.js';
import { testBackends } from '../../store/testing.js';
import { startProxyPlane, type ProxyPlane } from './plane-testing.js';
import { curl } from './testkit.js';

const DENY = H.denyReason;

describe.each(testBackends())('forward proxy on $name', (b) => {
  let plane: ProxyPlane | undefined;
  let proxy: string;
  let bot: string;
  let lonely: string;
  let gone: string;
  let certFile: string;
  let ports: ProxyPlane['ports'];
  let via: ProxyPlane['via'];
  let audit: ProxyPlane['audit'];

  beforeAll(async () => {
    plane = await startProxyPlane(b);
    ({ proxy, bot, lonely, gone, certFile, ports, via, audit } = plane);
  });

  afterAll(async () => {
    await plane?.close();
  });

  it('407 with Proxy-Authenticate without credentials or with a non-Bearer scheme', async () => {
    const none = await via(undefined, [`http://127.0.0.1:${ports.echo}/x`]);
    expect(none.status).toBe(407);
    expect(none.headers).toContain('proxy-authenticate: bearer realm="writ-egress"');
    const basic = await curl(['-x', proxy, '--proxy-header', 'Proxy-Authorization: Basic Ym90OnB3', `http://127.0.0.1:${ports.echo}/x`]);
    expect(basic.status).toBe(407);
    const tunnel = await via(undefined, ['--cacert', certFile, `https://127.0.0.1:${ports.tls}/`]);
    expect(tunnel.connect).toBe(407);
    expect(tunnel.exit).not.toBe(0);
  });

  it('403 with the deny reason for a garbage VP, a revoked VP, and an agent whose egressAllow lacks the target', async () => {
    const garbage = await via('not-a-vp', [`http://127.0.0.1:${ports.echo}/x`]);
    expect(garbage.status).toBe(403);
    expect(garbage.headers).toMatch(new RegExp(`${DENY}: invalid agent vp`));
    const revoked = await via(gone, [`http://127.0.0.1:${ports.echo}/x`]);
    expect(revoked.status).toBe(403);
    expect(revoked.headers).toContain('revoked');
    const notListed = await via(lonely, [`http://127.0.0.1:${ports.echo}/x`]);
    expect(notListed.status).toBe(403);
    expect(notListed.headers).toContain(`${DENY}: echo is not in lonely.egressallow`);
    expect(JSON.parse(notListed.body)).toMatchObject({ allow: false, rule: 'inline' });
    const tunnel = await via(lonely, ['--cacert', certFile, `https://127.0.0.1:${ports.tls}/`]);
    expect(tunnel.connect).toBe(403);
    expect(tunnel.headers).toContain(`${DENY}: tls is not in lonely.egressallow`);
  });

  it('403 for two Proxy-Authorization lines, even when the first is a good VP: one credential speaks for the agent', async () => {
    for (const [a, b2] of [
      [bot, lonely],
      [bot, bot],
    ]) {
      const twice = await curl([
        '-x',
        proxy,
        '--proxy-header',
        `Proxy-Authorization: Bearer ${a}`,
        '--proxy-header',
        `Proxy-Authorization: Bearer ${b2}`,
        `http://127.0.0.1:${ports.echo}/x`,
      ]);
      expect(twice.status).toBe(403);
      expect(twice.headers).toContain(`${DENY}: proxy-authorization sent more than once`);
    }
    expect((await via(bot, [`http://127.0.0.1:${ports.echo}/x`])).status).toBe(200);
  });

  it('allow: streams a 1 MiB upload and a 3 MiB download, strips hop-by-hop and proxy headers, stamps the decision', async () => {
    const file = join(certFile, '..', 'upload.bin');
    const data = randomBytes(1024 * 1024);
    writeFileSync(file, data);
    const r = await via(bot, [
      '-H',
      'Connection: keep-alive, X-Secret-Hop',
      '-H',
      'X-Secret-Hop: 1',
      '-H',
      'Keep-Alive: timeout=5',
      '-H',
      'TE: trailers',
      '-H',
      `${H.actor}: admin`,
      '-H',
      `${H.onBehalfOf}: alice`,
      '--data-binary',
      `@${file}`,
      `http://127.0.0.1:${ports.echo}/up?q=1`,
    ]);
    expect(r.status).toBe(200);
    const seen = JSON.parse(r.body) as { method: string; url: string; headers: Record<string, string>; bytes: number; sha: string };
    expect(seen).toMatchObject({ method: 'POST', url: '/up?q=1', bytes: data.length, sha: createHash('sha256').update(data).digest('hex') });
    for (const h of ['proxy-authorization', 'x-secret-hop', 'keep-alive', 'te', 'proxy-connection']) expect(seen.headers[h], h).toBeUndefined();
    expect(seen.headers.host).toBe(`127.0.0.1:${ports.echo}`);
    expect(seen.headers[H.actor]).toBe('bot');
    expect(seen.headers[H.subject]).toBe('alice');
    expect(seen.headers[H.agentDid]).toMatch(/^did:key:z/);
    expect(seen.headers.via).toContain('writ-egress');
    expect(r.headers).toContain('x-kept: yes');
    expect(r.headers).not.toContain('x-up-hop');
    expect(r.headers).not.toContain('proxy-authenticate');

    const big = await via(bot, [`http://127.0.0.1:${ports.echo}/big?n=${3 * 1024 * 1024}`]);
    expect(big.status).toBe(200);
    expect(big.body.length).toBe(3 * 1024 * 1024);
    const rows = (await audit()).filter((a) => a.action === 'egress.proxy' && a.service === 'echo' && a.allow);
    expect(rows.at(-1)).toMatchObject({ actor: 'bot', rule: 'inline' });
  });

  it('allow: HTTPS through CONNECT, TLS end to end (curl verifies the upstream certificate)', async () => {
    const r = await via(bot, ['--cacert', certFile, `https://127.0.0.1:${ports.tls}/secret`]);
    expect(r.exit).toBe(0);
    expect(r.connect).toBe(200);
    expect(r.status).toBe(200);
    expect(r.body).toBe('tls hello /secret');
  });

  it('CONNECT: a port that is not allowed is 403 before any tunnel; a closed upstream is 502', async () => {
    // 127.0.0.1:<ext> is not a registry upstream: an external host on a port other than 443.
    const r = await via(bot, [`https://127.0.0.1:${ports.ext}/`]);
    expect(r.connect).toBe(403);
    expect(r.headers).toContain(`connect to port ${ports.ext} is not allowed`);
    const c = await via(bot, ['--cacert', certFile, `https://127.0.0.1:${ports.closed}/`]);
    expect(c.connect).toBe(502);
    const p = await via(bot, [`http://127.0.0.1:${ports.closed}/`]);
    expect(p.status).toBe(502);
  });
});
