/**
 * Test helper for the OAuth endpoints: an identity authority listening on 127.0.0.1 (issuer
 * `http://idp.test`, reached through `fetchVia`), a registry of the test's entries, a workforce
 * OIDC issuer whose JWKS a local server publishes, and agents, delegations and VPs made through
 * the authority's own API.
 */
import http from 'node:http';
import { webcrypto } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect } from 'vitest';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import type { Service } from '../../control-plane/types.js';
import type { Store } from '../../store/factory.js';
import type { TestBackend } from '../../store/testing.js';
import { presentationFor, type AgentIdentity } from '../client.js';
import { client, type Client } from '../server-testing.js';
import { startIdentityAuthority } from '../server.js';
import { loadConfig } from '../../lib/settings.js';
import { localRegistry } from './registry.js';

export const ISSUER = 'http://idp.test';
export const TOKEN_ENDPOINT = `${ISSUER}/oauth/token`;
export const OIDC_ISSUER = 'https://login.example.test';

export interface OAuthBed {
  port: number;
  api: Client;
  store: Store;
  services: Map<string, Service>;
  /** fetch with `http://idp.test` mapped to the listener. */
  fetchVia(url: string | URL, init?: RequestInit): Promise<Response>;
  /** A workforce OIDC token for `subject` (ES256, the bed's OIDC issuer, audience `writ`). */
  humanToken(subject: string, o?: { exp?: number }): Promise<string>;
  close(): Promise<void>;
}

async function oidcIssuer(): Promise<{ url: string; key: CryptoKey; close(): Promise<void> }> {
  const { publicKey, privateKey } = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256' };
  const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [jwk] })));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/jwks`, key: privateKey, close: () => new Promise((r) => server.close(() => r())) };
}

/** `env`: more identity-authority settings (e.g. a short `IDP_TOKEN_TTL_SECONDS`; with a `WRIT_BOOTSTRAP_ADMIN_KEY`, `api` presents it). */
export async function openBed(b: TestBackend, env: Record<string, string> = {}): Promise<OAuthBed> {
  const store = await b.open();
  const oidc = await oidcIssuer();
  const settings = {
    ...env,
    IDP_ISSUER_HOST: 'idp.test',
    IDP_PUBLIC_URL: ISSUER,
    OIDC_ISSUER,
    OIDC_JWKS_URL: oidc.url,
    OIDC_AUDIENCE: 'writ',
  };
  const started = await startIdentityAuthority({ store, config: loadConfig(settings), addr: '127.0.0.1:0' });
  await started.authority.whenReady();
  const services = new Map<string, Service>();
  started.authority.useRegistry(
    localRegistry(
      (name) => services.get(name),
      () => services.values(),
    ),
  );
  const origin = `http://127.0.0.1:${started.port}`;
  return {
    port: started.port,
    api: client(started.authority, env.WRIT_BOOTSTRAP_ADMIN_KEY),
    store,
    services,
    fetchVia: (url, init) => fetch(String(url).replace(ISSUER, origin), init),
    humanToken: (subject, o = {}) =>
      new SignJWT({ scope: 'openid' })
        .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
        .setIssuer(OIDC_ISSUER)
        .setAudience('writ')
        .setSubject(subject)
        .setIssuedAt()
        .setExpirationTime(o.exp ?? Math.floor(Date.now() / 1000) + 300)
        .sign(oidc.key),
    close: async () => {
      await started.close();
      await oidc.close();
      await store.close();
    },
  };
}

/** Opens the bed before the suite and closes it after; filled in once the suite starts. */
export function useBed(b: TestBackend): OAuthBed {
  const holder = {} as OAuthBed;
  beforeAll(async () => {
    Object.assign(holder, await openBed(b));
  });
  afterAll(async () => holder.close?.());
  return holder;
}

/** Registers and provisions agent `name`; its registry entry may call `calls` (tools). */
export async function agent(bed: OAuthBed, name: string, calls: string[] = []): Promise<AgentIdentity> {
  expect((await bed.api.post('/v1/agents', { name, role: 'worker', capabilities: [] })).status).toBe(201);
  const p = await bed.api.post(`/v1/agents/${name}/provision`);
  expect(p.status).toBe(200);
  bed.services.set(name, { name, upstream: `${name}.agents:80`, kind: 'agent', allowTools: calls });
  return p.json as AgentIdentity;
}

/** A tool entry in the registry. */
export function tool(bed: OAuthBed, name: string, extra: Partial<Service> = {}): void {
  bed.services.set(name, { name, upstream: `${name}.tools:80`, kind: 'tool', ...extra });
}

export interface DelegationSpec {
  task: string;
  action: string;
  resource: string;
  approver?: string;
  ttlSeconds?: number;
  /** `approve` (default), `deny` or `pending`. */
  outcome?: 'approve' | 'deny' | 'pending';
}

/** Requests a delegation for `agentName` and approves (or denies, or leaves) it: its id and VC. */
export async function delegation(bed: OAuthBed, agentName: string, d: DelegationSpec): Promise<{ id: string; vc?: string; vcJti?: string; notAfter?: number }> {
  const r = await bed.api.post('/v1/delegations/request', {
    actorName: agentName,
    task: d.task,
    action: d.action,
    resource: d.resource,
    reason: 'test',
    ttlSeconds: d.ttlSeconds,
  });
  expect(r.status).toBe(201);
  const id = r.json.id as string;
  if (d.outcome === 'pending') return { id };
  if (d.outcome === 'deny') {
    expect((await bed.api.post(`/v1/delegations/${id}/deny`, { approver: d.approver ?? 'alice', reason: 'no' })).status).toBe(200);
    return { id };
  }
  const a = await bed.api.post(`/v1/delegations/${id}/approve`, { approver: d.approver ?? 'alice' });
  expect(a.status).toBe(200);
  return { id, vc: a.json.vc, vcJti: a.json.vcJti, notAfter: a.json.notAfter };
}

/** The agent's Membership VP for the token endpoint (audience the issuer unless told). */
export const actorVp = (a: AgentIdentity, audience = ISSUER) => presentationFor(a, { audience });

/** RFC 8693 exchange of a delegation's VC (the subject) with the agent's Membership VP (the actor) for `audience`: the token endpoint's answer. */
export async function exchangeDelegation(bed: OAuthBed, a: AgentIdentity, vc: string, audience: string) {
  return postForm(bed, '/oauth/token', {
    grant_type: 'urn:ietf:params:oauth:grant-type:token-exchange',
    subject_token: vc,
    subject_token_type: 'urn:ietf:params:oauth:token-type:jwt',
    actor_token: await actorVp(a),
    actor_token_type: 'urn:ietf:params:oauth:token-type:jwt',
    audience,
  });
}

/** POSTs a form to `path` over the listener: status and JSON answer. */
export async function postForm(bed: OAuthBed, path: string, params: Record<string, string>, headers: Record<string, string> = {}) {
  const res = await bed.fetchVia(`${ISSUER}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams(params).toString(),
  });
  return { status: res.status, json: (await res.json()) as Record<string, any>, headers: res.headers };
}

/** The agent's did:key seed as a WebCrypto Ed25519 private key (PKCS#8 wrapping of the 32-byte seed), for a private_key_jwt client. */
export async function agentKey(a: AgentIdentity): Promise<webcrypto.CryptoKey> {
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(a.privateKeyB64, 'base64')]);
  return webcrypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, false, ['sign']);
}
