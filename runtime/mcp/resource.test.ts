/**
 * Each MCP gateway route is an RFC 9728 protected resource (issue 43 item 6), against a real
 * identity authority followed by the control plane: a call without a credential is answered 401
 * with `WWW-Authenticate: Bearer resource_metadata=...` (so is a bearer token of another issuer:
 * never a credential); the official MCP SDK client's auth module
 * reads the challenge and the metadata (from the challenge, and by RFC 9728 path insertion) and
 * oauth4webapi finds the authorization server it names and gets a token there (client_credentials,
 * private_key_jwt); a token lacking a scope the entry needs is answered 403 `insufficient_scope`
 * naming every scope needed, in one challenge; with all of them the SDK client calls the tool.
 * The SDK's own OAuth client (`PrivateKeyJwtProvider`) does the whole dance itself: the 401, the
 * metadata, Writ's authorization server (whose metadata names an authorization endpoint, which
 * MCP clients require, that refuses), a client_credentials token with an EdDSA assertion, the call.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as oauth from 'oauth4webapi';
import { createLocalJWKSet, jwtVerify, SignJWT, type JSONWebKeySet } from 'jose';
import { generateKeyPairSync, webcrypto } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { PrivateKeyJwtProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { discoverOAuthProtectedResourceMetadata, extractWWWAuthenticateParams, selectResourceURL } from '@modelcontextprotocol/sdk/client/auth.js';
import { createIdentityClient, type IdentityClient } from '../control-plane/identity-client.js';
import { testBackends } from '../store/testing.js';
import { agent, agentKey, ISSUER, openBed, tool, type OAuthBed } from '../identity/oauth/oauth-testing.js';
import type { AgentIdentity } from '../identity/client.js';
import { startMcpHarness, type McpHarness } from './gateway-testing.js';

const INITIALIZE = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
};

let bed: OAuthBed;
let idc: IdentityClient;
let h: McpHarness;
let me: AgentIdentity;
let base: string;

beforeAll(async () => {
  bed = await openBed(testBackends()[0]!);
  idc = createIdentityClient({ baseUrl: `http://127.0.0.1:${bed.port}`, pollMs: 500 });
  expect(await idc.tokens().load()).toBe(true);
  expect(await idc.pollRevocations()).toBe(true);
  expect(await idc.pollStanding()).toBe(true);
  h = await startMcpHarness({ identity: idc });
  base = `http://127.0.0.1:${h.broker.port}`;
  await h.run.cp.plane.registry.upsert({
    name: 'everything',
    upstream: h.everything.upstream,
    kind: 'tool',
    protocol: 'mcp',
    requireScope: 'tools:read tools:write',
  });
  await h.agent({ name: 'rs-agent', allowTools: ['everything/echo'] });
  me = await agent(bed, 'rs-agent', ['everything']);
  tool(bed, 'everything', { requireScope: 'tools:read tools:write' });
});
afterAll(async () => {
  await h?.close();
  await idc?.close();
  await bed?.close();
});

const post = (headers: Record<string, string> = {}) =>
  fetch(h.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: JSON.stringify(INITIALIZE),
  });

const opts = () => ({ [oauth.customFetch]: bed.fetchVia as typeof fetch, [oauth.allowInsecureRequests]: true });

/** The agent's did:key private key as a JWK (OKP, Ed25519), as the SDK's provider takes it. */
async function privateJwk(a: AgentIdentity): Promise<Record<string, unknown>> {
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(a.privateKeyB64, 'base64')]);
  const key = await webcrypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, true, ['sign']);
  return (await webcrypto.subtle.exportKey('jwk', key)) as Record<string, unknown>;
}

async function tokenWith(scope: string): Promise<string> {
  const as = await oauth.processDiscoveryResponse(new URL(ISSUER), await oauth.discoveryRequest(new URL(ISSUER), { algorithm: 'oauth2', ...opts() }));
  const res = await oauth.clientCredentialsGrantRequest(
    as,
    { client_id: 'rs-agent' },
    oauth.PrivateKeyJwt(await agentKey(me)),
    { audience: 'everything', scope },
    opts(),
  );
  return (await oauth.processClientCredentialsResponse(as, { client_id: 'rs-agent' }, res)).access_token;
}

describe('MCP gateway routes as OAuth protected resources (RFC 9728)', () => {
  it('no credential: 401 with resource_metadata; the SDK finds the metadata and oauth4webapi the authorization server', async () => {
    const res = await post();
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe(`Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp/everything"`);
    expect(await res.json()).toMatchObject({
      jsonrpc: '2.0',
      id: 1,
      error: { code: -32001, message: expect.stringMatching(/^denied by policy: empty actor/) },
    });

    const { resourceMetadataUrl, scope, error } = extractWWWAuthenticateParams(res);
    expect([String(resourceMetadataUrl), scope, error]).toEqual([`${base}/.well-known/oauth-protected-resource/mcp/everything`, undefined, undefined]);
    const fromChallenge = await discoverOAuthProtectedResourceMetadata(h.url, { resourceMetadataUrl });
    const wellKnown = await discoverOAuthProtectedResourceMetadata(h.url);
    const expected = {
      resource: `${base}/mcp/everything`,
      authorization_servers: ['http://idp.test'],
      bearer_methods_supported: ['header'],
      resource_name: 'everything',
      scopes_supported: ['tools:read', 'tools:write'],
    };
    expect(fromChallenge).toEqual(expected);
    expect(wellKnown).toEqual(expected);

    const asUrl = new URL(fromChallenge.authorization_servers![0]!);
    const as = await oauth.processDiscoveryResponse(asUrl, await oauth.discoveryRequest(asUrl, { algorithm: 'oauth2', ...opts() }));
    expect([as.issuer, as.token_endpoint]).toEqual(['http://idp.test', 'http://idp.test/oauth/token']);
  });

  it('challenge headers: a literal table', async () => {
    const meta = `resource_metadata="${base}/.well-known/oauth-protected-resource/mcp/everything"`;
    const partial = await tokenWith('tools:read');
    const [hd, p] = partial.split('.');
    const foreign = await new SignJWT({ act: { sub: 'did:key:zOther', name: 'rs-agent' } })
      .setProtectedHeader({ alg: 'EdDSA', typ: 'at+jwt' })
      .setIssuer('https://login.other.test')
      .setAudience('everything')
      .sign(generateKeyPairSync('ed25519').privateKey);
    const rows: [string, Record<string, string>, number, string][] = [
      ['nothing', {}, 401, `Bearer ${meta}`],
      ['a name, no credential, vc not required: passes', { 'x-writ-actor': 'rs-agent' }, 200, ''],
      ['an unknown name: a registry refusal, answered in JSON-RPC', { 'x-writ-actor': 'nobody' }, 200, ''],
      ['a bearer token of another issuer, no name: no credential', { authorization: 'Bearer opaque-token' }, 401, `Bearer ${meta}`],
      ["another issuer's access token (at+jwt), no name: no credential", { authorization: `Bearer ${foreign}` }, 401, `Bearer ${meta}`],
      ['a Basic credential, no name: no credential', { authorization: 'Basic cnMtYWdlbnQ6cHc=' }, 401, `Bearer ${meta}`],
      ['a bearer token of another issuer with a name: the name passes', { authorization: 'Bearer opaque-token', 'x-writ-actor': 'rs-agent' }, 200, ''],
      [
        'a token missing one scope',
        { authorization: `Bearer ${partial}` },
        403,
        `Bearer error="insufficient_scope", scope="tools:read tools:write", ${meta}, error_description="access token lacks scope tools:write for everything"`,
      ],
      [
        'an altered token',
        { authorization: `Bearer ${hd}.${p}.${'A'.repeat(86)}` },
        401,
        `Bearer error="invalid_token", ${meta}, error_description="invalid access token: token signature invalid"`,
      ],
    ];
    for (const [what, headers, status, challenge] of rows) {
      const res = await post(headers);
      await res.arrayBuffer();
      expect([what, res.status, res.headers.get('www-authenticate') ?? '']).toEqual([what, status, challenge]);
    }
  });

  it('a token with every scope: the SDK client calls the tool', async () => {
    const t = await tokenWith('tools:read tools:write');
    const transport = new StreamableHTTPClientTransport(new URL(h.url), { requestInit: { headers: { authorization: `Bearer ${t}` } } });
    const c = new Client({ name: 'oauth-client', version: '1.0.0' });
    await c.connect(transport);
    try {
      const r = (await c.callTool({ name: 'echo', arguments: { message: 'scoped' } })) as { content: { text: string }[] };
      expect(r.content[0]!.text).toBe('Echo: scoped');
    } finally {
      await c.close();
    }
  });

  it("the SDK's own OAuth (PrivateKeyJwtProvider): 401 -> metadata -> authorization server -> client_credentials -> the call", async () => {
    const provider = new PrivateKeyJwtProvider({ clientId: 'rs-agent', privateKey: await privateJwk(me), algorithm: 'EdDSA', expectedIssuer: ISSUER });
    const c = new Client({ name: 'sdk-oauth', version: '1.0.0' });
    await c.connect(new StreamableHTTPClientTransport(new URL(h.url), { authProvider: provider, fetch: bed.fetchVia as typeof fetch }));
    try {
      const r = (await c.callTool({ name: 'echo', arguments: { message: 'with my own token' } })) as { content: { text: string }[] };
      expect(r.content[0]!.text).toBe('Echo: with my own token');
    } finally {
      await c.close();
    }
    // The token the SDK got (the scopes the metadata lists, for the route), verified independently against the JWKS.
    const jwks = createLocalJWKSet((await (await bed.fetchVia(`${ISSUER}/.well-known/jwks.json`)).json()) as JSONWebKeySet);
    const { payload } = await jwtVerify(provider.tokens()!.access_token, jwks, { issuer: ISSUER, audience: 'everything' });
    expect([payload.sub, payload.act, payload.scope]).toEqual([me.did, { sub: me.did, name: 'rs-agent' }, 'tools:read tools:write']);
    for (const seen of h.everything.headers) expect(seen.authorization).toBeUndefined();
  });

  it('the authorization endpoint the metadata names (MCP clients require one) exists and refuses, saying where tokens are had', async () => {
    const meta = (await (await bed.fetchVia(`${ISSUER}/.well-known/oauth-authorization-server`)).json()) as { authorization_endpoint: string };
    expect(meta.authorization_endpoint).toBe(`${ISSUER}/oauth/authorize`);
    for (const init of [{}, { method: 'POST', body: new URLSearchParams({ response_type: 'code', client_id: 'rs-agent' }) }]) {
      const res = await bed.fetchVia(`${meta.authorization_endpoint}?response_type=code&client_id=rs-agent&redirect_uri=https://evil.example/cb`, init);
      expect([res.status, res.headers.get('location'), res.headers.get('cache-control'), await res.json()]).toEqual([
        400,
        null,
        'no-store',
        {
          error: 'unsupported_response_type',
          error_description:
            "no interactive authorization here: agents get tokens at http://idp.test/oauth/token (token exchange, RFC 8693, for a human's delegation; client_credentials with private_key_jwt, RFC 7523)",
        },
      ]);
    }
  });

  it('metadata: only for MCP entries, GET only', async () => {
    await h.run.cp.plane.registry.upsert({ name: 'plain', upstream: 'plain.svc:80', kind: 'tool' });
    const rows: [string, string, number][] = [
      ['GET', '/.well-known/oauth-protected-resource/mcp/nope', 404],
      ['GET', '/.well-known/oauth-protected-resource/mcp/plain', 404],
      ['GET', '/.well-known/oauth-protected-resource/mcp/a/b', 404],
      ['POST', '/.well-known/oauth-protected-resource/mcp/everything', 405],
      ['GET', '/.well-known/oauth-protected-resource/mcp/everything', 200],
      ['POST', '/.well-known/oauth-protected-resource', 405],
      ['GET', '/.well-known/oauth-protected-resource', 200],
      ['GET', '/.well-known/oauth-protected-resourcex', 404],
    ];
    for (const [method, path, status] of rows) {
      const res = await fetch(`${base}${path}`, { method });
      await res.arrayBuffer();
      expect([method, path, res.status]).toEqual([method, path, status]);
    }
  });

  it('root metadata (RFC 9728 3.1): where the SDK falls back when a route has no document; it names the base, for which no token is issued', async () => {
    const root = {
      resource: base,
      authorization_servers: ['http://idp.test'],
      bearer_methods_supported: ['header'],
      resource_name: `Writ MCP gateway (a token is for one route: ${base}/mcp/{service})`,
    };
    // No document at /.well-known/oauth-protected-resource/mcp/nope (404): the SDK's fallback reads the root one.
    expect(await discoverOAuthProtectedResourceMetadata(`${base}/mcp/nope`)).toEqual(root);
    expect(await (await fetch(`${base}/.well-known/oauth-protected-resource`)).json()).toEqual(root);
    // The SDK takes the base as the RFC 8707 resource of any route under it; the token endpoint says what to ask for instead.
    expect(String(await selectResourceURL(`${base}/mcp/everything`, {} as never, root))).toBe(`${base}/`);
    const as = await oauth.processDiscoveryResponse(new URL(ISSUER), await oauth.discoveryRequest(new URL(ISSUER), { algorithm: 'oauth2', ...opts() }));
    const res = await oauth.clientCredentialsGrantRequest(as, { client_id: 'rs-agent' }, oauth.PrivateKeyJwt(await agentKey(me)), { resource: base }, opts());
    expect([res.status, await res.json()]).toEqual([
      400,
      {
        error: 'invalid_target',
        error_description: `${base} is no MCP gateway route nor a service's oauthResource: a token is for one registry entry, named by its route (http(s)://<host>/mcp/<name>), its resource or its name`,
      },
    ]);
  });
});
