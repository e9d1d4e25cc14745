/**
 * Interop: an independent library (did-jwt-vc over did-jwt, did-resolver and key-did-resolver)
 * verifies the credentials a real identity authority issues over HTTP, resolving our did:web
 * issuer from the authority's own GET /.well-known/did.json and the agent's did:key locally.
 * Then our verifier (POST /v1/agents/verify-presentation, over HTTP) rejects every bad
 * presentation with a specific reason, and did-jwt-vc is shown to reject what it can see.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyCredential, verifyPresentation, type VerifiedCredential } from 'did-jwt-vc';
import { Resolver, type DIDResolver } from 'did-resolver';
import { getResolver as keyDidResolver } from 'key-did-resolver';
import { decodeJwt } from 'jose';
import { VP_AUDIENCE } from '../lib/brand.js';
import { setLogLevel } from '../lib/log.js';
import type { Store } from '../store/factory.js';
import { testBackends } from '../store/testing.js';
import { presentationFor } from './client.js';
import { startIdentityAuthority } from './server.js';
import { CAPABILITY_TYPE, MEMBERSHIP_TYPE } from './vc.js';
import { loadConfig } from '../lib/settings.js';

type Json = any;
/** did-jwt-vc's own (nested) did-resolver typing of a resolver; ours is structurally the same at runtime. */
type Resolvable = Parameters<typeof verifyCredential>[1];
type Cap = { action: string; resource: string; constraints?: Record<string, unknown> };
setLogLevel('warn');

interface Running {
  url: string;
  issuerDid: string;
  store: Store;
  close(): Promise<void>;
}

async function authority(open: () => Promise<Store>, host: string): Promise<Running> {
  const store = await open();
  const s = await startIdentityAuthority({ store, config: loadConfig({ IDP_ISSUER_HOST: host }), addr: '127.0.0.1:0' });
  await s.authority.whenReady();
  return {
    url: `http://127.0.0.1:${s.port}`,
    issuerDid: s.authority.issuerDid,
    store,
    close: async () => {
      await s.close();
      await store.close();
    },
  };
}

async function call(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: Json }> {
  const res = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}

/**
 * did:web per its spec: the method-specific id is the host (%3A for a port, `:` for path
 * segments), the document is at https://<host>/.well-known/did.json. `hosts` plays DNS + TLS:
 * the host name maps to the loopback base URL of the authority that claims it.
 */
function didWebResolver(hosts: Map<string, string>, fetched: string[]): Record<string, DIDResolver> {
  return {
    web: async (did, parsed) => {
      const [host, ...path] = parsed.id.split(':').map(decodeURIComponent);
      const base = hosts.get(host!);
      const notFound = { didResolutionMetadata: { error: 'notFound' }, didDocument: null, didDocumentMetadata: {} };
      if (!base) return notFound;
      const url = `${base}${path.length ? `/${path.join('/')}/did.json` : '/.well-known/did.json'}`;
      const res = await fetch(url);
      if (res.status !== 200) return notFound;
      const doc = (await res.json()) as Json;
      fetched.push(url);
      if (doc.id !== did)
        return { didResolutionMetadata: { error: 'invalidDid', message: `document id ${doc.id} is not ${did}` }, didDocument: null, didDocumentMetadata: {} };
      return { didResolutionMetadata: { contentType: 'application/did+ld+json' }, didDocument: doc, didDocumentMetadata: {} };
    },
  };
}

describe.each(testBackends())('interop with did-jwt-vc on $name', (b) => {
  // A: the authority under test. B: another issuer (its own DID and key). F: a forger that
  // claims A's DID but holds its own key (another store).
  let A: Running;
  let B: Running;
  let F: Running;
  const fetched: string[] = [];
  let resolver: Resolvable;

  beforeAll(async () => {
    [A, B, F] = await Promise.all([authority(b.open, 'idp-a.interop.test'), authority(b.open, 'idp-b.interop.test'), authority(b.open, 'idp-a.interop.test')]);
    const hosts = new Map([
      ['idp-a.interop.test', A.url],
      ['idp-b.interop.test', B.url],
    ]);
    resolver = new Resolver({ ...keyDidResolver(), ...didWebResolver(hosts, fetched) }) as unknown as Resolvable;
  });
  afterAll(async () => {
    await Promise.all([A, B, F].filter(Boolean).map((x) => x.close()));
  });

  async function provision(on: Running, name: string, caps: Cap[] = [{ action: 'crm:read', resource: 'crm/acme/*' }]): Promise<Json> {
    expect((await call(on.url, 'POST', '/v1/agents', { name, role: 'analyst', capabilities: caps })).status).toBe(201);
    const p = await call(on.url, 'POST', `/v1/agents/${name}/provision`);
    expect(p.status).toBe(200);
    return p.json;
  }
  const verifyOurs = async (vp: string, extra: Record<string, string> = {}) => {
    const r = await call(A.url, 'POST', '/v1/agents/verify-presentation', { vp, ...extra });
    expect(r.status).toBe(200);
    return r.json;
  };
  /** did-jwt-vc's verdict on a VP: 'ok' or the error message. */
  const libVp = (vp: string, opts: { domain?: string; challenge?: string } = {}) =>
    verifyPresentation(vp, resolver, { domain: VP_AUDIENCE, ...opts }).then(
      () => 'ok',
      (e: Error) => e.message,
    );

  it('did-jwt-vc verifies our Membership and capability VCs against the did:web document the authority serves', async () => {
    const p = await provision(A, 'interop-1', [
      { action: 'crm:read', resource: 'crm/acme/*' },
      { action: 'db:write', resource: 'db/orders', constraints: { maxRows: 10 } },
    ]);
    expect(p.issuerDid).toBe('did:web:idp-a.interop.test');
    expect(p.did).toMatch(/^did:key:z6Mk/);

    const before = fetched.length;
    const m: VerifiedCredential = await verifyCredential(p.membershipVc, resolver);
    expect(fetched.length).toBeGreaterThan(before);
    expect(fetched.at(-1)).toBe(`${A.url}/.well-known/did.json`);
    expect(m.issuer).toBe(A.issuerDid);
    expect(m.signer.id).toBe(`${A.issuerDid}#key-1`);
    expect(m.payload.sub).toBe(p.did);
    expect(m.verifiableCredential.issuer.id).toBe(A.issuerDid);
    expect(m.verifiableCredential.credentialSubject).toMatchObject({ id: p.did, name: 'interop-1', role: 'analyst', memberOf: A.issuerDid });
    expect(m.verifiableCredential.type).toEqual(['VerifiableCredential', MEMBERSHIP_TYPE]);
    expect(m.verifiableCredential.id).toBe(decodeJwt(p.membershipVc).jti);
    expect(m.verifiableCredential.expirationDate).toBeDefined();

    expect(p.capabilityVcs).toHaveLength(2);
    const caps = await Promise.all((p.capabilityVcs as string[]).map((vc) => verifyCredential(vc, resolver)));
    for (const c of caps) {
      expect(c.issuer).toBe(A.issuerDid);
      expect(c.verifiableCredential.type).toEqual(['VerifiableCredential', CAPABILITY_TYPE]);
      expect(c.verifiableCredential.credentialSubject.id).toBe(p.did);
    }
    expect(caps.map((c) => c.verifiableCredential.credentialSubject)).toEqual([
      { id: p.did, agent: 'interop-1', action: 'crm:read', resource: 'crm/acme/*' },
      { id: p.did, agent: 'interop-1', action: 'db:write', resource: 'db/orders', constraints: { maxRows: 10 } },
    ]);
  });

  it('did-jwt-vc verifies a VP minted by presentationFor (domain = aud, challenge = nonce); ours agrees', async () => {
    const p = await provision(A, 'interop-2');
    const vp = await presentationFor(p, { nonce: 'n-123' });
    const v = await verifyPresentation(vp, resolver, { domain: VP_AUDIENCE, challenge: 'n-123' });
    expect(v.issuer).toBe(p.did);
    expect(v.signer.id).toBe(`${p.did}#${p.did.slice('did:key:'.length)}`);
    expect(v.payload.aud).toBe(VP_AUDIENCE);
    expect(v.payload.nonce).toBe('n-123');
    expect(v.verifiablePresentation.holder).toBe(p.did);
    expect(v.verifiablePresentation.type).toEqual(['VerifiablePresentation']);
    const [inner] = v.verifiablePresentation.verifiableCredential as Json[];
    expect(inner.proof.jwt).toBe(p.membershipVc);
    // The embedded Membership VC verifies on its own, issued by A to the VP holder.
    const m = await verifyCredential(inner.proof.jwt, resolver);
    expect(m.issuer).toBe(A.issuerDid);
    expect(m.verifiableCredential.credentialSubject.id).toBe(v.issuer);

    expect(await verifyOurs(vp, { nonce: 'n-123' })).toMatchObject({ ok: true, agentName: 'interop-2', agentDid: p.did, reason: 'verified' });
    expect(await verifyOurs(vp)).toMatchObject({ ok: true, agentName: 'interop-2' });
  });

  it('rejects every bad presentation over HTTP with a specific reason (did-jwt-vc verdict alongside)', async () => {
    const p = await provision(A, 'interop-bad');
    const other = await provision(A, 'interop-other');
    const foreign = await provision(B, 'interop-foreign');
    const forged = await provision(F, 'interop-forged');
    const revokedAgent = await provision(A, 'interop-revoked');

    const good = await presentationFor(p);
    const [h, , s] = good.split('.') as [string, string, string];
    const tamperedVp = `${h}.${Buffer.from(JSON.stringify({ ...decodeJwt(good), nonce: 'changed' })).toString('base64url')}.${s}`;
    const revokedVp = await presentationFor(revokedAgent);
    expect((await verifyOurs(revokedVp)).ok).toBe(true);
    const jti = decodeJwt(revokedAgent.membershipVc).jti;
    expect(await call(A.url, 'POST', '/v1/revoke', { vcJti: jti })).toMatchObject({ status: 200, json: { revoked: true, vcJti: jti } });

    // [case, vp, our request extras, our reason, did-jwt-vc options, did-jwt-vc verdict ('ok' where it cannot know)]
    const table: [string, string, Record<string, string>, RegExp, { domain?: string; challenge?: string }, RegExp][] = [
      ['wrong audience', await presentationFor(p, { audience: 'elsewhere' }), {}, /^presentation audience mismatch$/, {}, /audience|domain/i],
      ['wrong nonce', await presentationFor(p, { nonce: 'a' }), { nonce: 'b' }, /^presentation nonce mismatch$/, { challenge: 'b' }, /challenge/],
      ['expired VP', await presentationFor(p, { ttlSeconds: 10, now: Date.now() - 3600_000 }), {}, /^presentation expired$/, {}, /expired/],
      ['tampered payload, signature kept', tamperedVp, {}, /^presentation signature invalid$/, {}, /invalid_signature/],
      ['membership VC from another issuer', await presentationFor(foreign), {}, /^membership credential not issued by this issuer$/, {}, /^ok$/],
      ['membership VC signed with another key under our DID', await presentationFor(forged), {}, /^membership credential signature invalid$/, {}, /^ok$/],
      [
        "VP by agent B holding agent A's VC",
        await presentationFor({ ...other, membershipVc: p.membershipVc }),
        {},
        /^membership credential not issued to the presentation holder$/,
        {},
        /^ok$/,
      ],
      ['revoked membership VC', revokedVp, {}, /^membership credential revoked$/, {}, /^ok$/],
    ];
    const seen: Record<string, { ours: string; didJwtVc: string }> = {};
    for (const [name, vp, extra, ours, libOpts, lib] of table) {
      const r = await verifyOurs(vp, extra);
      expect(r.ok, name).toBe(false);
      expect(r.agentName, name).toBeNull();
      expect(r.reason, name).toMatch(ours);
      const verdict = await libVp(vp, libOpts);
      expect(verdict, name).toMatch(lib);
      seen[name] = { ours: r.reason, didJwtVc: verdict };
    }
    // The holder-bound failures name the holder they saw.
    expect((await verifyOurs(revokedVp)).agentDid).toBe(revokedAgent.did);
    // The untouched presentation still verifies (the table did not pass by rejecting everything).
    expect(await verifyOurs(good)).toMatchObject({ ok: true, agentName: 'interop-bad' });
    expect(await libVp(good)).toBe('ok');
    expect(Object.keys(seen)).toHaveLength(table.length);
  });

  it('did-jwt-vc rejects a tampered VC, a corrupted signature and a VC signed with a key the issuer document does not publish', async () => {
    const p = await provision(A, 'interop-tamper');
    const [h, pl, s] = (p.membershipVc as string).split('.') as [string, string, string];
    const claims = decodeJwt(p.membershipVc) as Json;
    claims.vc.credentialSubject.role = 'admin';
    const tampered = `${h}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${s}`;
    await expect(verifyCredential(tampered, resolver)).rejects.toThrow(/invalid_signature/);
    const badSig = `${h}.${pl}.${s.slice(0, -6)}${s.endsWith('AAAAAA') ? 'BBBBBB' : 'AAAAAA'}`;
    await expect(verifyCredential(badSig, resolver)).rejects.toThrow(/invalid_signature/);
    // The forger's VC claims A's DID; A's published document does not hold the forger's key.
    const forged = await provision(F, 'interop-forged-2');
    await expect(verifyCredential(forged.membershipVc, resolver)).rejects.toThrow(/invalid_signature/);
    // Ours rejects the tampered VC too, inside an otherwise valid VP.
    expect((await verifyOurs(await presentationFor({ ...p, membershipVc: tampered }))).reason).toBe('membership credential signature invalid');
    // Untouched, it verifies.
    expect((await verifyCredential(p.membershipVc, resolver)).issuer).toBe(A.issuerDid);
  });
});
