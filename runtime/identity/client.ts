/**
 * Agent-side client: turns a provision response (the identity file the sidecar reads) into a
 * VP-JWT wrapping the Membership VC, signed with the agent's own did:key. Used by the sidecar,
 * the tests and the benchmarks. Pure apart from the clock and the random nonce.
 */
import { randomUUID } from 'node:crypto';
import { SignJWT } from 'jose';
import { z } from 'zod';
import { VP_AUDIENCE } from '../lib/brand.js';
import { didKeyFromPublicKey, didKeyVerificationMethod, privateKeyFromBytes, rawPublicKey } from './did.js';
import { createPublicKey, type KeyObject } from 'node:crypto';

export const W3C_VC_CONTEXT = 'https://www.w3.org/2018/credentials/v1';

/** The fields of a provision response (SPEC 2.5) an agent needs; extra fields are ignored. */
export const AgentIdentitySchema = z.object({
  name: z.string().min(1).optional(),
  did: z.string().startsWith('did:key:z'),
  privateKeyB64: z.string().min(1),
  membershipVc: z.string().min(1),
  capabilityVcs: z.array(z.string()).optional(),
  issuerDid: z.string().optional(),
});
export type AgentIdentity = z.infer<typeof AgentIdentitySchema>;

export interface PresentationOptions {
  /** `aud` of the VP; default VP_AUDIENCE (`<brand>-egress`). */
  audience?: string;
  /** Freshness nonce; a random UUID when absent (the verifier requires one to be present). */
  nonce?: string;
  /** Lifetime in seconds; default 300. The sidecar passes 12 h (SPEC 8). */
  ttlSeconds?: number;
  /** Clock in epoch ms (tests). */
  now?: number;
}

export interface LoadedIdentity {
  did: string;
  kid: string;
  key: KeyObject;
  membershipVc: string;
}

/** Validates an identity (e.g. the parsed identity file) and imports its key once; throws on mismatch. */
export function loadIdentity(raw: unknown): LoadedIdentity {
  const id = AgentIdentitySchema.parse(raw);
  const bytes = Buffer.from(id.privateKeyB64, 'base64');
  const key = privateKeyFromBytes(new Uint8Array(bytes));
  const did = didKeyFromPublicKey(rawPublicKey(createPublicKey(key)));
  if (did !== id.did) throw new Error('privateKeyB64 does not match did');
  return { did, kid: didKeyVerificationMethod(did), key, membershipVc: id.membershipVc };
}

/** A VP-JWT (W3C VC-JWT encoding: `vp` claim, iss = holder did:key, aud, nonce, jti, nbf, exp). */
export async function presentationFor(identity: AgentIdentity | LoadedIdentity, opts: PresentationOptions = {}): Promise<string> {
  const id = 'key' in identity ? identity : loadIdentity(identity);
  const nowSec = Math.floor((opts.now ?? Date.now()) / 1000);
  const ttl = opts.ttlSeconds ?? 300;
  if (!Number.isFinite(ttl) || ttl <= 0) throw new Error('ttlSeconds must be a positive number');
  return new SignJWT({
    nonce: opts.nonce ?? randomUUID(),
    vp: {
      '@context': [W3C_VC_CONTEXT],
      type: ['VerifiablePresentation'],
      holder: id.did,
      verifiableCredential: [id.membershipVc],
    },
  })
    .setProtectedHeader({ alg: 'EdDSA', typ: 'JWT', kid: id.kid })
    .setIssuer(id.did)
    .setSubject(id.did)
    .setAudience(opts.audience ?? VP_AUDIENCE)
    .setJti(`urn:uuid:${randomUUID()}`)
    .setIssuedAt(nowSec)
    .setNotBefore(nowSec)
    .setExpirationTime(nowSec + Math.floor(ttl))
    .sign(id.key);
}
