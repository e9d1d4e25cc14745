/**
 * Independent clients against the authorization server: oauth4webapi discovers it from its RFC
 * 8414 metadata and performs the RFC 8693 exchange and the client_credentials grant with
 * private_key_jwt; jose verifies the issued JWT against the published JWKS; oauth4webapi
 * introspects and revokes.
 */
import { describe, expect, it } from 'vitest';
import * as oauth from 'oauth4webapi';
import { createLocalJWKSet, jwtVerify } from 'jose';
import { webcrypto } from 'node:crypto';

type CryptoKey = webcrypto.CryptoKey;
import { testBackends } from '../../store/testing.js';
import type { AgentIdentity } from '../client.js';
import { actorVp, agent, delegation, ISSUER, tool, TOKEN_ENDPOINT, useBed, type OAuthBed } from './oauth-testing.js';

const EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const JWT_TYPE = 'urn:ietf:params:oauth:token-type:jwt';

/** The agent's did:key seed as a WebCrypto Ed25519 private key (PKCS#8 wrapping of the 32-byte seed). */
async function agentKey(a: AgentIdentity): Promise<CryptoKey> {
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(a.privateKeyB64, 'base64')]);
  return webcrypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, false, ['sign']) as Promise<CryptoKey>;
}

describe.each(testBackends())('OAuth with oauth4webapi and jose on $name', (b) => {
  const bed = useBed(b);
  const opts = (x: OAuthBed) => ({ [oauth.customFetch]: x.fetchVia as typeof fetch, [oauth.allowInsecureRequests]: true });

  async function discover(): Promise<oauth.AuthorizationServer> {
    const issuer = new URL(ISSUER);
    return oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...opts(bed) }));
  }

  async function verifyWithJwks(as: oauth.AuthorizationServer, token: string) {
    const jwks = (await (await bed.fetchVia(as.jwks_uri!)).json()) as { keys: object[] };
    return jwtVerify(token, createLocalJWKSet(jwks as never), { issuer: ISSUER, typ: 'at+jwt', algorithms: ['EdDSA'] });
  }

  it('discovers the metadata: issuer, endpoints, grants', async () => {
    const as = await discover();
    expect(as).toMatchObject({
      issuer: 'http://idp.test',
      token_endpoint: 'http://idp.test/oauth/token',
      jwks_uri: 'http://idp.test/.well-known/jwks.json',
      introspection_endpoint: 'http://idp.test/oauth/introspect',
      revocation_endpoint: 'http://idp.test/oauth/revoke',
      grant_types_supported: [EXCHANGE, 'client_credentials'],
    });
  });

  it('exchanges an approved delegation VC and the agent VP for a token jose verifies against the JWKS', async () => {
    const as = await discover();
    const ag = await agent(bed, 'x-agent', ['crm']);
    tool(bed, 'crm', { dataClass: 'regulated' });
    const d = await delegation(bed, 'x-agent', { task: 'T-1', action: 'crm:read', resource: 'crm/acme/*', approver: 'alice@example.com' });
    const res = await oauth.genericTokenEndpointRequest(
      as,
      { client_id: 'x-agent' },
      oauth.None(),
      EXCHANGE,
      { subject_token: d.vc!, subject_token_type: JWT_TYPE, actor_token: await actorVp(ag, TOKEN_ENDPOINT), actor_token_type: JWT_TYPE, audience: 'crm' },
      opts(bed),
    );
    const t = await oauth.processGenericTokenEndpointResponse(as, { client_id: 'x-agent' }, res);
    expect(t.token_type).toBe('bearer');
    expect(t.issued_token_type).toBe('urn:ietf:params:oauth:token-type:access_token');
    expect(t.scope).toBe('crm:read');
    expect(t.expires_in).toBe(300);
    const { payload, protectedHeader } = await verifyWithJwks(as, t.access_token);
    expect(protectedHeader).toMatchObject({ alg: 'EdDSA', typ: 'at+jwt' });
    expect(payload).toMatchObject({
      iss: 'http://idp.test',
      sub: 'alice@example.com',
      aud: 'crm',
      act: { sub: ag.did, name: 'x-agent' },
      client_id: 'x-agent',
      scope: 'crm:read',
      delegation: { id: d.id, vc_jti: d.vcJti, task: 'T-1', action: 'crm:read', resource: 'crm/acme/*' },
    });
    expect(payload.exp! - payload.iat!).toBe(300);
    expect(payload.jti).toMatch(/^urn:uuid:/);
  });

  it('caps the token at the delegation notAfter', async () => {
    const as = await discover();
    const ag = await agent(bed, 'short-agent', ['crm']);
    tool(bed, 'crm');
    const d = await delegation(bed, 'short-agent', { task: 'T-2', action: 'crm:read', resource: 'crm/x', ttlSeconds: 60 });
    const res = await oauth.genericTokenEndpointRequest(
      as,
      { client_id: 'short-agent' },
      oauth.None(),
      EXCHANGE,
      { subject_token: d.vc!, subject_token_type: JWT_TYPE, actor_token: await actorVp(ag), actor_token_type: JWT_TYPE, resource: 'crm' },
      opts(bed),
    );
    const t = await oauth.processGenericTokenEndpointResponse(as, { client_id: 'short-agent' }, res);
    const { payload } = await verifyWithJwks(as, t.access_token);
    expect(payload.exp).toBe(d.notAfter);
    expect(t.expires_in).toBeLessThanOrEqual(60);
  });

  it('client_credentials with private_key_jwt: sub and act are the agent; a replayed assertion is refused', async () => {
    const as = await discover();
    const ag = await agent(bed, 'cc-agent', ['search']);
    tool(bed, 'search', { requireScope: 'search:query' });
    const key = await agentKey(ag);
    const res = await oauth.clientCredentialsGrantRequest(as, { client_id: 'cc-agent' }, oauth.PrivateKeyJwt(key), { audience: 'search' }, opts(bed));
    const t = await oauth.processClientCredentialsResponse(as, { client_id: 'cc-agent' }, res);
    expect(t.scope).toBe('search:query');
    const { payload } = await verifyWithJwks(as, t.access_token);
    expect(payload).toMatchObject({ iss: 'http://idp.test', sub: ag.did, aud: 'search', act: { sub: ag.did, name: 'cc-agent' }, client_id: 'cc-agent' });
    expect(payload.delegation).toBeUndefined();

    // The same assertion twice (a fixed jti): the second is a replay.
    const fixed = oauth.PrivateKeyJwt(key, {
      [oauth.modifyAssertion]: (_h, p) => {
        p.jti = 'same-jti-1';
      },
    });
    const first = await oauth.clientCredentialsGrantRequest(as, { client_id: 'cc-agent' }, fixed, { audience: 'search' }, opts(bed));
    expect(first.status).toBe(200);
    const again = await oauth.clientCredentialsGrantRequest(as, { client_id: 'cc-agent' }, fixed, { audience: 'search' }, opts(bed));
    expect(again.status).toBe(401);
    expect(await again.json()).toMatchObject({ error: 'invalid_client', error_description: 'client_assertion replayed: its jti was already used' });
  });

  it('introspection answers the claims until the token is revoked (RFC 7662, RFC 7009)', async () => {
    const as = await discover();
    const ag = await agent(bed, 'life-agent', ['crm']);
    tool(bed, 'crm');
    const d = await delegation(bed, 'life-agent', { task: 'T-3', action: 'crm:read', resource: 'crm/*' });
    const res = await oauth.genericTokenEndpointRequest(
      as,
      { client_id: 'life-agent' },
      oauth.None(),
      EXCHANGE,
      { subject_token: d.vc!, subject_token_type: JWT_TYPE, actor_token: await actorVp(ag), actor_token_type: JWT_TYPE, audience: 'crm' },
      opts(bed),
    );
    const { access_token } = await oauth.processGenericTokenEndpointResponse(as, { client_id: 'life-agent' }, res);
    const rs = { client_id: 'resource-server' };
    const live = await oauth.processIntrospectionResponse(as, rs, await oauth.introspectionRequest(as, rs, oauth.None(), access_token, opts(bed)));
    expect(live).toMatchObject({ active: true, sub: 'alice', aud: 'crm', client_id: 'life-agent', scope: 'crm:read' });
    await oauth.processRevocationResponse(await oauth.revocationRequest(as, { client_id: 'life-agent' }, oauth.None(), access_token, opts(bed)));
    const dead = await oauth.processIntrospectionResponse(as, rs, await oauth.introspectionRequest(as, rs, oauth.None(), access_token, opts(bed)));
    expect(dead).toEqual({ active: false });
  });
});
