/** Test helpers shared by the identity tests and benches: throwaway issuers and agent identities. */
import { generateKeyPairSync } from 'node:crypto';
import { didKeyFromPublicKey, didWeb, ed25519Multibase, ISSUER_KEY_FRAGMENT, rawPrivateSeed, rawPublicKey } from './did.js';
import { issueCredential, MEMBERSHIP_TYPE, type IssuerKey } from './vc.js';
import type { AgentIdentity } from './client.js';

export function makeIssuer(host = 'issuer.test'): IssuerKey {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const did = didWeb(host);
  return { did, kid: `${did}#${ISSUER_KEY_FRAGMENT}`, privateKey, publicKey, publicMultibase: ed25519Multibase(rawPublicKey(publicKey)) };
}

/** A fresh agent key pair and a Membership VC from `issuer` (ttl seconds, default 1 h). */
export async function makeAgent(
  issuer: IssuerKey,
  opts: { nowSec?: number; ttlSeconds?: number; name?: string } = {},
): Promise<AgentIdentity & { jti: string }> {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const did = didKeyFromPublicKey(rawPublicKey(publicKey));
  const nowSec = opts.nowSec ?? Math.floor(Date.now() / 1000);
  const vc = await issueCredential(issuer, {
    subjectDid: did,
    type: MEMBERSHIP_TYPE,
    claims: { name: opts.name ?? 'agent', role: 'worker', memberOf: issuer.did },
    ttlSeconds: opts.ttlSeconds ?? 3600,
    nowSec,
  });
  return {
    name: opts.name ?? 'agent',
    did,
    privateKeyB64: Buffer.from(rawPrivateSeed(privateKey)).toString('base64'),
    membershipVc: vc.jwt,
    capabilityVcs: [],
    issuerDid: issuer.did,
    jti: vc.jti,
  };
}
