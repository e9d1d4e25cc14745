/**
 * The egress gateway end to end with the real curl and a real control plane behind it (the forward
 * proxy tests' plane: identity authority, agents bot, lonely and the revoked gone, local upstreams):
 * plain HTTP and CONNECT allowed, denied, and denied while `/authz` is unreachable.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { testBackends } from '../store/testing.js';
import { startProxyPlane, type ProxyPlane } from '../control-plane/proxy/plane-testing.js';
import { curl } from '../control-plane/proxy/testkit.js';
import { startGateway, type Gateway } from './gateway.js';

const DENY = H.denyReason;

describe('egress gateway asking /authz', () => {
  let plane: ProxyPlane;
  let gw: Gateway;
  let gateway: string;
  const via = (gatewayUrl: string, vp: string | undefined, args: string[]) =>
    curl(['-x', gatewayUrl, ...(vp ? ['--proxy-header', `Proxy-Authorization: Bearer ${vp}`] : []), ...args]);

  beforeAll(async () => {
    plane = await startProxyPlane(testBackends()[0]!);
    gw = await startGateway({ authzUrl: `http://127.0.0.1:${plane.run.cp.decisionPort}/authz`, addr: '127.0.0.1:0' });
    gateway = `http://127.0.0.1:${gw.port}`;
  });
  afterAll(async () => {
    await gw?.close();
    await plane?.close();
  });

  it('allowed: plain HTTP forwarded with the decision headers, CONNECT tunnelled (TLS end to end)', async () => {
    const plain = await via(gateway, plane.bot, [`http://127.0.0.1:${plane.ports.echo}/x?y=1`]);
    expect(plain.status).toBe(200);
    const seen = JSON.parse(plain.body) as { url: string; headers: Record<string, string> };
    expect(seen.url).toBe('/x?y=1');
    expect(seen.headers[H.actor]).toBe('bot');
    expect(seen.headers[H.upstream]).toBe(`127.0.0.1:${plane.ports.echo}`);
    expect(seen.headers['proxy-authorization']).toBeUndefined();
    const tunnel = await via(gateway, plane.bot, ['--cacert', plane.certFile, `https://127.0.0.1:${plane.ports.tls}/hello`]);
    expect(tunnel.connect).toBe(200);
    expect(tunnel.status).toBe(200);
    expect(tunnel.body).toBe('tls hello /hello');
    // The decisions are the control plane's, in its audit log.
    const rows = await plane.audit();
    expect(rows.filter((r) => r.actor === 'bot' && r.allow && (r.service === 'echo' || r.service === 'tls')).length).toBeGreaterThanOrEqual(2);
  });

  it('denied: 403 with the decision point reason for an unlisted target, a revoked VP; 407 without a bearer', async () => {
    const lonely = await via(gateway, plane.lonely, [`http://127.0.0.1:${plane.ports.echo}/x`]);
    expect(lonely.status).toBe(403);
    expect(lonely.headers).toContain(`${DENY}: echo is not in lonely.egressallow`);
    const lonelyTunnel = await via(gateway, plane.lonely, ['--cacert', plane.certFile, `https://127.0.0.1:${plane.ports.tls}/`]);
    expect(lonelyTunnel.connect).toBe(403);
    expect(lonelyTunnel.exit).not.toBe(0);
    const revoked = await via(gateway, plane.gone, [`http://127.0.0.1:${plane.ports.echo}/x`]);
    expect(revoked.status).toBe(403);
    expect(revoked.headers).toContain('revoked');
    const none = await via(gateway, undefined, [`http://127.0.0.1:${plane.ports.echo}/x`]);
    expect(none.status).toBe(407);
    expect(none.headers).toContain('proxy-authenticate: bearer realm="writ-egress"');
  });

  it('denied while /authz is unreachable, and not ready then', async () => {
    // Port 1: refused (privileged, never handed to a test listener).
    const lost = await startGateway({ authzUrl: 'http://127.0.0.1:1/authz', addr: '127.0.0.1:0', authzTimeoutMs: 1000 });
    try {
      const url = `http://127.0.0.1:${lost.port}`;
      expect((await fetch(`${url}/readyz`)).status).toBe(200);
      const plain = await via(url, plane.bot, [`http://127.0.0.1:${plane.ports.echo}/x`]);
      expect(plain.status).toBe(403);
      expect(plain.headers).toContain(`${DENY}: decision point unreachable`);
      const tunnel = await via(url, plane.bot, ['--cacert', plane.certFile, `https://127.0.0.1:${plane.ports.tls}/`]);
      expect(tunnel.connect).toBe(403);
      expect(tunnel.exit).not.toBe(0);
      const ready = await fetch(`${url}/readyz`);
      expect(ready.status).toBe(503);
      expect(await ready.json()).toEqual({
        ready: false,
        error: 'not ready',
        reasons: ['decision point http://127.0.0.1:1/authz unreachable: every request is denied'],
      });
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
    } finally {
      await lost.close();
    }
  });
});
