/**
 * The official MCP SDK client doing its own OAuth (issue 43): `PrivateKeyJwtProvider` (the SDK's
 * client_credentials with a private_key_jwt assertion) against a gateway route with no token in
 * hand. The SDK meets the 401, reads the RFC 9728 metadata the challenge names, discovers Writ's
 * authorization server (RFC 8414), signs a client assertion with the agent's did:key (EdDSA),
 * gets a token for the route (RFC 8707 `resource`), and calls the tool with it; nothing of the
 * agent's reaches the server.
 */
import { webcrypto } from 'node:crypto';
import { createLocalJWKSet, jwtVerify, type JSONWebKeySet } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { PrivateKeyJwtProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { createIdentityClient, type IdentityClient } from '../control-plane/identity-client.js';
import { testBackends } from '../store/testing.js';
import { agent, ISSUER, openBed, tool, type OAuthBed } from '../identity/oauth/oauth-testing.js';
import type { AgentIdentity } from '../identity/client.js';
import { startMcpHarness, type McpHarness } from './gateway-testing.js';

let bed: OAuthBed;
let idc: IdentityClient;
let h: McpHarness;
let me: AgentIdentity;

beforeAll(async () => {
  bed = await openBed(testBackends()[0]!);
  idc = createIdentityClient({ baseUrl: `http://127.0.0.1:${bed.port}`, pollMs: 500 });
  expect(await idc.tokens().load()).toBe(true);
  expect(await idc.pollRevocations()).toBe(true);
  expect(await idc.pollStanding()).toBe(true);
  h = await startMcpHarness({ identity: idc });
  await h.agent({ name: 'sdk-agent', allowTools: ['everything/echo'] });
  me = await agent(bed, 'sdk-agent', ['everything']);
  tool(bed, 'everything');
});
afterAll(async () => {
  await h?.close();
  await idc?.close();
  await bed?.close();
});

/** The agent's did:key private key as a JWK (OKP, Ed25519), as the SDK's provider takes it. */
async function privateJwk(a: AgentIdentity): Promise<Record<string, unknown>> {
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(a.privateKeyB64, 'base64')]);
  const key = await webcrypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, true, ['sign']);
  return (await webcrypto.subtle.exportKey('jwk', key)) as Record<string, unknown>;
}

describe('the MCP SDK client gets its own token from Writ and calls through the gateway', () => {
  it('401 -> metadata -> authorization server -> client_credentials (private_key_jwt) -> the call', async () => {
    const provider = new PrivateKeyJwtProvider({ clientId: 'sdk-agent', privateKey: await privateJwk(me), algorithm: 'EdDSA', expectedIssuer: ISSUER });
    const client = new Client({ name: 'sdk-oauth', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(h.url), { authProvider: provider, fetch: bed.fetchVia as typeof fetch }));
    const r = await client.callTool({ name: 'echo', arguments: { message: 'with my own token' } });
    expect((r as { content: { text: string }[] }).content[0]!.text).toBe('Echo: with my own token');
    await client.close();

    // The token the SDK got, verified independently against the published JWKS.
    const token = provider.tokens()!.access_token;
    const jwks = createLocalJWKSet((await (await bed.fetchVia(`${ISSUER}/.well-known/jwks.json`)).json()) as JSONWebKeySet);
    const { payload } = await jwtVerify(token, jwks, { issuer: ISSUER, audience: 'everything' });
    expect([payload.sub, payload.act, payload.client_id]).toEqual([me.did, { sub: me.did, name: 'sdk-agent' }, 'sdk-agent']);
    // Nothing of the agent's reached the server.
    for (const seen of h.everything.headers) expect(seen.authorization).toBeUndefined();
  });

  it('the authorization endpoint the metadata names exists and refuses, saying where tokens are had', async () => {
    const meta = (await (await bed.fetchVia(`${ISSUER}/.well-known/oauth-authorization-server`)).json()) as { authorization_endpoint: string };
    expect(meta.authorization_endpoint).toBe(`${ISSUER}/oauth/authorize`);
    for (const init of [{}, { method: 'POST', body: new URLSearchParams({ response_type: 'code', client_id: 'sdk-agent' }) }]) {
      const res = await bed.fetchVia(`${meta.authorization_endpoint}?response_type=code&client_id=sdk-agent&redirect_uri=https://evil.example/cb`, init);
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
});
