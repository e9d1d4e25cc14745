/**
 * The forward proxy's approval holds end to end with the real curl: an external host or a
 * regulated target without a delegation is held, approved or denied through the management routes
 * over HTTP, expired when the client goes away or the approval times out, and woken across
 * replicas by LISTEN/NOTIFY. Agent VPs from a real identity authority (plane-testing.ts). On
 * PGlite, and on PostgreSQL too when TEST_DATABASE_URL is set.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../../lib/brand.js';
import { close as closeServer, listen } from '../../lib/http.js';
import type { Store } from '../../store/factory.js';
import { openTestPostgres, testBackends, testSchema, TEST_DATABASE_URL } from '../../store/testing.js';
import { createIdentityAuthority } from '../../identity/server.js';
import { startControlPlaneWithEgress } from '../egress-gateway.js';
import type { IdentityPort } from '../identity-port.js';
import type { EgressRequest } from '../approvals/record.js';
import { echoServer, post, startProxyPlane, type ProxyPlane } from './plane-testing.js';
import { curl, inProcessIdentity, jtiOf, provisionAgent } from './testkit.js';
import { eventually } from '../../lib/poll-testing.js';
import { loadConfig } from '../../lib/settings.js';

const DENY = H.denyReason;

describe.each(testBackends())('forward proxy on $name', (b) => {
  let plane: ProxyPlane | undefined;
  let store: Store;
  let identity: IdentityPort;
  let proxy: string;
  let mgmt: string;
  let bot: string;
  let certFile: string;
  let ports: ProxyPlane['ports'];
  let via: ProxyPlane['via'];
  let pending: ProxyPlane['pending'];
  let get: ProxyPlane['get'];
  let audit: ProxyPlane['audit'];

  beforeAll(async () => {
    plane = await startProxyPlane(b);
    ({ store, identity, proxy, mgmt, bot, certFile, ports, via, pending, get, audit } = plane);
  });

  afterAll(async () => {
    await plane?.close();
  });

  it('an external host is held; approving it on the management route forwards', async () => {
    const target = `127.0.0.1:${ports.ext}`;
    const res = via(bot, [`http://${target}/hello`]);
    const req = await pending(target);
    expect(req).toMatchObject({ actor: 'bot', service: 'external', action: 'http:get', resource: `http://${target}/hello`, status: 'pending' });
    expect(req.actorDid).toMatch(/^did:key:z/);
    const a = await post(`${mgmt}/v1/egress/requests/${req.id}/approve`, { approver: 'alice' });
    expect(a.status).toBe(200);
    const r = await res;
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body)).toMatchObject({ url: '/hello' });
    const rows = await audit();
    expect(rows.find((x) => x.action === 'egress.approval' && x.reason.includes(req.id))).toMatchObject({ subject: 'alice', allow: true });
    expect(rows.filter((x) => x.action === 'egress.proxy' && x.reason.includes(req.id))).toEqual([
      expect.objectContaining({ allow: true, rule: 'delegation', actor: 'bot', service: 'external' }),
    ]);
  });

  it('the held request is the one sent, whatever action and resource the agent declares: an approver sees and approves it', async () => {
    const target = `127.0.0.1:${ports.ext}`;
    const res = via(bot, [
      '-X',
      'POST',
      '-H',
      `${H.action}: http:get`,
      '-H',
      `${H.resource}: http://${target}/status`,
      `http://${target}/admin/delete-everything`,
    ]);
    const req = await pending(target);
    expect(req).toMatchObject({ action: 'http:post', resource: `http://${target}/admin/delete-everything` });
    expect(req.reason).toContain(`the agent declared http:get http://${target}/status`);
    expect((await post(`${mgmt}/v1/egress/requests/${req.id}/deny`, { approver: 'alice', reason: 'no' })).status).toBe(200);
    expect((await res).status).toBe(403);
  });

  it('an approved delegation covers only the request it names: another method or a path out of its prefix is held', async () => {
    const target = `localhost:${ports.echo}`;
    const idp = async (path: string, body: unknown) => {
      const r = await plane!.authority.app.request(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return (await r.json()) as { id: string };
    };
    const task = 'd-scope';
    const d = await idp('/v1/delegations/request', { actorName: 'bot', task, action: 'http:get', resource: `http://${target}/public/*`, reason: 'reports' });
    await idp(`/v1/delegations/${d.id}/approve`, { approver: 'alice' });
    const ok = await via(bot, ['-H', `${H.task}: ${task}`, `http://${target}/public/q3`]);
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.body)).toMatchObject({ url: '/public/q3' });
    // Declaring the delegated action and resource does not make a DELETE of /admin one of them.
    const declared = ['-X', 'DELETE', '-H', `${H.task}: ${task}`, '-H', `${H.action}: http:get`, '-H', `${H.resource}: http://${target}/public/q3`];
    for (const args of [
      [...declared, `http://${target}/admin/users`],
      ['--path-as-is', '-H', `${H.task}: ${task}`, `http://${target}/public/../admin/users`],
      ['-H', `${H.task}: ${task}`, `http://${target}/public/%2e%2e/admin/users`],
    ]) {
      const res = via(bot, args);
      const req = await pending(target);
      expect(req.resource, args.join(' ')).toMatch(/\/admin\/users$/);
      expect((await post(`${mgmt}/v1/egress/requests/${req.id}/deny`, { approver: 'alice', reason: 'no' })).status).toBe(200);
      expect((await res).status, args.join(' ')).toBe(403);
    }
  });

  it('revoking an agent closes its open tunnel and denies its held request when a human approves it after', async () => {
    const f = await provisionAgent(plane!.authority, 'fleeting');
    await plane!.run.cp.plane.registry.upsert({ name: 'fleeting', upstream: 'fleeting.agents.svc:8080', kind: 'agent', egressAllow: ['echo'] });
    // A tunnel to the echo service that keeps talking (its idle timeout never fires).
    const tunnel = net.connect(Number(new URL(proxy).port), '127.0.0.1');
    let got = '';
    tunnel.on('data', (d) => (got += d.toString('latin1')));
    const closed = new Promise<void>((resolve) => tunnel.on('close', () => resolve()));
    tunnel.on('error', () => {});
    tunnel.write(`CONNECT 127.0.0.1:${ports.echo} HTTP/1.1\r\nhost: 127.0.0.1:${ports.echo}\r\nproxy-authorization: Bearer ${f.vp}\r\n\r\n`);
    await eventually(() => got.startsWith('HTTP/1.1 200'), 'the tunnel opens');
    const talk = setInterval(() => tunnel.writable && tunnel.write('GET /ping HTTP/1.1\r\nhost: echo\r\n\r\n'), 100);
    try {
      await eventually(() => got.includes('/ping'), 'the echo answers through the tunnel');
      const target = `127.0.0.1:${ports.ext}`;
      const held = via(f.vp, [`http://${target}/after-revoke`]);
      const req = await pending(target);
      const rv = await plane!.authority.app.request('/v1/revoke', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ vcJti: jtiOf(f.identity.membershipVc) }),
      });
      expect(rv.status).toBe(200);
      await closed;
      expect((await post(`${mgmt}/v1/egress/requests/${req.id}/approve`, { approver: 'alice' })).status).toBe(200);
      const r = await held;
      expect(r.status).toBe(403);
      expect(r.headers).toMatch(/revoked/);
      const rows = await audit();
      // A revoked VP is refused before the registry is read: the record names the target, not its entry.
      expect(rows.find((x) => x.reason.startsWith('open tunnel closed:'))).toMatchObject({
        allow: false,
        rule: 'identity',
        service: `127.0.0.1:${ports.echo}`,
        reason: 'open tunnel closed: invalid agent VP: membership credential revoked',
      });
    } finally {
      clearInterval(talk);
      tunnel.destroy();
    }
  });

  it('a CONNECT to an external host is held; once approved the TLS tunnel opens end to end', async () => {
    const target = `localhost:${ports.tls}`;
    const res = via(bot, ['--cacert', certFile, `https://${target}/held`]);
    const req = await pending(target);
    expect(req).toMatchObject({ service: 'external', action: 'http:connect', resource: target });
    expect((await post(`${mgmt}/v1/egress/requests/${req.id}/approve`, { approver: 'alice' })).status).toBe(200);
    const r = await res;
    expect(r.connect).toBe(200);
    expect(r.body).toBe('tls hello /held');
  });

  it('a regulated target without a delegation is held; denying it answers 403 with the reason', async () => {
    const target = `localhost:${ports.echo}`;
    const res = via(bot, ['-H', `${H.task}: t-1`, `http://${target}/acct`]);
    const req = await pending(target);
    expect(req).toMatchObject({ service: 'ledger', reason: expect.stringContaining('needs approval') });
    expect((await post(`${mgmt}/v1/egress/requests/${req.id}/deny`, { approver: 'bob', reason: 'not for this task' })).status).toBe(200);
    const r = await res;
    expect(r.status).toBe(403);
    expect(r.headers).toContain(`${DENY}: egress request ${req.id} denied: bob: not for this task`);
    expect(JSON.parse(r.body)).toMatchObject({ egressRequest: req.id });
  });

  it('a scoping header sent twice is denied at once, never held for a human', async () => {
    const target = `localhost:${ports.echo}`;
    const r = await via(bot, ['-H', `${H.task}: t-1`, '-H', `${H.resource}: acct/1`, '-H', `${H.resource}: other/2`, `http://${target}/acct`]);
    expect(r.status).toBe(403);
    expect(r.headers).toContain(`${DENY}: ${H.resource} sent more than once`);
  });

  it('the client going away while held expires the request, plain or CONNECT (its half-close is noticed)', async () => {
    for (const [target, url] of <[string, string][]>[
      [`127.0.0.1:${ports.ext}`, `http://127.0.0.1:${ports.ext}/killed`],
      // Not a registry upstream (127.0.0.1:<tls> is one) nor approved by a test above (localhost:<tls>).
      [`[::1]:${ports.tls}`, `https://[::1]:${ports.tls}/killed`],
    ]) {
      const ac = new AbortController();
      const killer = curl(['-x', proxy, '--proxy-header', `Proxy-Authorization: Bearer ${bot}`, url], { signal: ac.signal });
      const req = await pending(target);
      ac.abort();
      await killer.catch(() => {});
      const done = await eventually(async () => {
        const r = await get(req.id);
        return r?.status === 'expired' ? r : undefined;
      }, `the request for ${target} to expire`);
      expect(done.denyReason).toBe('client disconnected while held');
      expect(done.target).toBe(target);
    }
  });

  it('a short approval timeout expires the hold: 403, request expired; the audit chain verifies', async () => {
    // A second plane on the same store is a second replica: its own audit chain id.
    const short = await startControlPlaneWithEgress({
      store,
      config: loadConfig({ AUDIT_CHAIN_ID: `short-${b.name}` }),
      identity,
      decisionAddr: '127.0.0.1:0',
      mgmtAddr: '127.0.0.1:0',
      proxyAddr: '127.0.0.1:0',
      queue: { timeoutMs: 300, replicaId: `short-${b.name}` },
    });
    try {
      const r = await curl([
        '-x',
        `http://127.0.0.1:${short.gateway.port}`,
        '--proxy-header',
        `Proxy-Authorization: Bearer ${bot}`,
        `http://127.0.0.1:${ports.ext}/late`,
      ]);
      expect(r.status).toBe(403);
      expect(r.headers).toMatch(new RegExp(`${DENY}: egress request [0-9a-f-]+ expired: approval timed out`));
      const id = JSON.parse(r.body).egressRequest as string;
      expect((await short.gateway.queue!.get(id))?.status).toBe('expired');
    } finally {
      await short.close();
    }
    expect(await (await fetch(`${mgmt}/v1/audit/verify`)).json()).toEqual({ ok: true, brokenAtSeq: -1 });
  });
});

describe.skipIf(!TEST_DATABASE_URL)('forward proxy across replicas on postgres', () => {
  it('an approval made on another replica wakes the held request (LISTEN/NOTIFY)', async () => {
    const schema = testSchema();
    const sa = await openTestPostgres({ schema, keepSchema: true });
    const sb = await openTestPostgres({ schema });
    const authority = createIdentityAuthority({ store: sa, config: loadConfig({ IDP_ISSUER_HOST: 'idp.test' }) });
    const identity = inProcessIdentity(authority);
    const ext = echoServer();
    const extPort = await listen(ext, '127.0.0.1:0');
    const opts = (store: Store, replicaId: string) => ({
      store,
      // Each replica writes its own audit chain.
      config: loadConfig({ AUDIT_CHAIN_ID: replicaId }),
      identity,
      decisionAddr: '127.0.0.1:0',
      mgmtAddr: '127.0.0.1:0',
      proxyAddr: '127.0.0.1:0',
      // Only the notification can wake the hold within the test.
      queue: { timeoutMs: 60_000, replicaId, pollMs: 600_000 },
    });
    const a = await startControlPlaneWithEgress(opts(sa, 'replica-a'));
    const b = await startControlPlaneWithEgress(opts(sb, 'replica-b'));
    try {
      const { vp } = await provisionAgent(authority, 'bot');
      await a.cp.plane.registry.upsert({ name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', egressAllow: [] });
      const res = curl(['-x', `http://127.0.0.1:${a.gateway.port}`, '--proxy-header', `Proxy-Authorization: Bearer ${vp}`, `http://127.0.0.1:${extPort}/x`]);
      const bMgmt = `http://127.0.0.1:${b.cp.mgmtPort}`;
      const req = await eventually(async () => {
        const list = (await (await fetch(`${bMgmt}/v1/egress/requests?status=pending`)).json()) as EgressRequest[];
        return list[0];
      }, 'the pending request on replica b');
      expect((await post(`${bMgmt}/v1/egress/requests/${req.id}/approve`, { approver: 'carol' })).status).toBe(200);
      const r = await res;
      expect(r.status).toBe(200);
      expect(JSON.parse(r.body)).toMatchObject({ url: '/x' });
    } finally {
      await a.close();
      await b.close();
      await closeServer(ext);
      await authority.close();
      await sa.close();
      await sb.close();
    }
  });
});
