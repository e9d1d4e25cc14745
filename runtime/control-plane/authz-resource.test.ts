/**
 * `/authz` for a service behind Envoy that opts in as an OAuth protected resource (issue 43 item
 * 6: its registry entry's `oauthResource`), on a real control plane (vc identity mode) following a
 * real identity authority over HTTP with `MGMT_PUBLIC_URL` set: an egress call (`X-Writ-Actor`)
 * refused for want of a credential is 401 with
 * `WWW-Authenticate: Bearer resource_metadata=...`, an invalid Writ token 401 `invalid_token`, a
 * missing scope 403 `insufficient_scope`, the same over HTTP and gRPC ext_authz (the denied
 * response's status and headers, which Envoy passes back to the client); a service that does not
 * opt in is answered as before. The control plane serves the metadata the challenge names, and
 * oauth4webapi gets a token with the entry's `oauthResource` as its RFC 8707 `resource`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as oauth from 'oauth4webapi';
import { decodeJwt, SignJWT } from 'jose';
import { generateKeyPairSync } from 'node:crypto';
import { H } from '../lib/brand.js';
import { setLogLevel } from '../lib/log.js';
import { eventually } from '../lib/poll-testing.js';
import { agent, agentKey, ISSUER, openBed, type OAuthBed } from '../identity/oauth/oauth-testing.js';
import type { AgentIdentity } from '../identity/client.js';
import { testBackends } from '../store/testing.js';
import { startFollowingPlane, type FollowingPlane } from './following-testing.js';
import { asHttp, checkClient, checkRequest, type CheckClient } from './grpc/testing.js';
import type { Service } from './types.js';

const PUBLIC = 'https://writ.example.test';
const RESOURCE = 'https://orders.example.test';
const META = `resource_metadata="${PUBLIC}/.well-known/oauth-protected-resource/services/orders"`;

describe.each(testBackends())('/authz challenges for a service that opts in on $name', (b) => {
  let bed: OAuthBed;
  let plane: FollowingPlane;
  let grpc: CheckClient;
  let me: AgentIdentity;

  beforeAll(async () => {
    setLogLevel('error');
    bed = await openBed(b);
    const entries: Service[] = [
      { name: 'orders', upstream: 'orders.svc:8080', kind: 'service', requireScope: 'orders.read orders.write', oauthResource: RESOURCE },
      { name: 'plain', upstream: 'plain.svc:8080', kind: 'service' },
      { name: 'ar-bot', upstream: 'ar-bot.agents.svc:8080', kind: 'agent', egressAllow: ['orders', 'plain'] },
    ];
    me = await agent(bed, 'ar-bot');
    for (const e of entries) bed.services.set(e.name, e);
    plane = await startFollowingPlane(bed, entries, { MGMT_PUBLIC_URL: `${PUBLIC}/`, AGENT_IDENTITY_MODE: 'vc' });
    grpc = checkClient(plane.run.cp.grpcPort);
  }, 60_000);
  afterAll(async () => {
    grpc?.close();
    await plane?.close();
    await bed?.close();
  });

  const opts = () => ({ [oauth.customFetch]: bed.fetchVia as typeof fetch, [oauth.allowInsecureRequests]: true });
  /** oauth4webapi's client_credentials grant with private_key_jwt for `target` (RFC 8707 resource). */
  async function grant(target: Record<string, string>): Promise<Response> {
    const as = await oauth.processDiscoveryResponse(new URL(ISSUER), await oauth.discoveryRequest(new URL(ISSUER), { algorithm: 'oauth2', ...opts() }));
    return oauth.clientCredentialsGrantRequest(as, { client_id: 'ar-bot' }, oauth.PrivateKeyJwt(await agentKey(me)), target, opts());
  }

  /** One call over HTTP /authz and over gRPC ext_authz: [status, WWW-Authenticate] of each. */
  async function both(service: string, headers: Record<string, string>) {
    const h = { [H.service]: service, ...headers };
    const r = await fetch(`http://127.0.0.1:${plane.run.cp.decisionPort}/authz/v1/orders`, { headers: h });
    await r.arrayBuffer();
    const g = asHttp(await grpc.check(checkRequest({ method: 'GET', path: '/v1/orders', host: 'orders.example.test', headers: h })));
    return { http: [r.status, r.headers.get('www-authenticate')], grpc: [g.status, g.headers['www-authenticate'] ?? null] };
  }

  it('the challenge table, over HTTP and gRPC ext_authz', async () => {
    const full = ((await (await grant({ resource: RESOURCE })).json()) as { access_token: string }).access_token;
    const partial = ((await (await grant({ audience: 'orders', scope: 'orders.read' })).json()) as { access_token: string }).access_token;
    const [hd, p] = full.split('.');
    const foreign = await new SignJWT({ act: { sub: 'did:key:zOther', name: 'ar-bot' } })
      .setProtectedHeader({ alg: 'EdDSA', typ: 'at+jwt' })
      .setIssuer('https://login.other.test')
      .setAudience('orders')
      .sign(generateKeyPairSync('ed25519').privateKey);
    // The plane reads the authority's key and revocations with its first polls.
    const bot = (more: Record<string, string> = {}) => ({ [H.actor]: 'ar-bot', ...more });
    await eventually(async () => (await both('orders', bot({ authorization: `Bearer ${full}` }))).http[0] === 200, 'the token accepted');
    const rows: [string, string, Record<string, string>, unknown[]][] = [
      ['an empty name, nothing else', 'orders', { [H.actor]: '' }, [401, `Bearer ${META}`]],
      ["an empty name and another issuer's token: no credential", 'orders', { [H.actor]: '', authorization: `Bearer ${foreign}` }, [401, `Bearer ${META}`]],
      ['the name alone (vc identity mode)', 'orders', bot(), [401, `Bearer ${META}`]],
      ['the name and an opaque bearer: no credential', 'orders', bot({ authorization: 'Bearer opaque' }), [401, `Bearer ${META}`]],
      [
        'the name and an altered Writ token',
        'orders',
        bot({ authorization: `Bearer ${hd}.${p}.${'A'.repeat(86)}` }),
        [401, `Bearer error="invalid_token", ${META}, error_description="invalid access token: token signature invalid"`],
      ],
      [
        'the name and a token missing a scope',
        'orders',
        bot({ authorization: `Bearer ${partial}` }),
        [
          403,
          `Bearer error="insufficient_scope", scope="orders.read orders.write", ${META}, error_description="access token lacks scope orders.write for orders"`,
        ],
      ],
      ['the name and a token with every scope', 'orders', bot({ authorization: `Bearer ${full}` }), [200, null]],
      ['a service that does not opt in, the name alone', 'plain', bot(), [403, null]],
      // Without X-Writ-Actor the call is ingress (SPEC 4.1): a human's workforce credential, not Writ's to challenge for.
      ['no Writ header at all (ingress)', 'orders', {}, [403, null]],
    ];
    for (const [what, service, headers, want] of rows) {
      expect([what, await both(service, headers)]).toEqual([what, { http: want, grpc: want }]);
    }
  });

  it('the control plane serves the metadata the challenge names; the token endpoint takes its resource', async () => {
    const mgmt = `http://127.0.0.1:${plane.run.cp.mgmtPort}`;
    const doc = await fetch(`${mgmt}/.well-known/oauth-protected-resource/services/orders`);
    expect([doc.status, await doc.json()]).toEqual([
      200,
      {
        resource: RESOURCE,
        authorization_servers: [ISSUER],
        bearer_methods_supported: ['header'],
        resource_name: 'orders',
        scopes_supported: ['orders.read', 'orders.write'],
      },
    ]);
    const none = await fetch(`${mgmt}/.well-known/oauth-protected-resource/services/plain`);
    expect([none.status, await none.json()]).toEqual([
      404,
      { error: 'not_found', error_description: 'no registry entry "plain" is an OAuth protected resource (oauthResource)' },
    ]);
    const issued = (await (await grant({ resource: RESOURCE })).json()) as { access_token: string; scope: string };
    expect([decodeJwt(issued.access_token).aud, issued.scope]).toEqual(['orders', 'orders.read orders.write']);
    const unknown = await grant({ resource: 'https://nowhere.example.test' });
    expect([unknown.status, ((await unknown.json()) as { error: string }).error]).toEqual([400, 'invalid_target']);
  });
});
