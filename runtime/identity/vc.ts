/**
 * Verifiable credentials as VC-JWTs (W3C VC data model 1.1, JWT encoding): issuance with jose,
 * and the pure verification core of SPEC 4.4 (steps 1 and 2: holder signature + audience +
 * nonce + validity, then the issuer-signed Membership VC for this holder). Revocation and the
 * DID -> agent mapping (step 3) need the store and are applied by the caller.
 */
import { randomUUID, type KeyObject } from 'node:crypto';
import { SignJWT } from 'jose';
import { W3C_VC_CONTEXT } from './client.js';
import { verifyEd25519 } from './ed25519.js';
import { DID_KEY_CHARS, didKeyVerificationMethod, publicKeyFromDidKey, publicKeyObject } from './did.js';
import { parseJws, type Jws } from '../lib/jws.js';

export const MEMBERSHIP_TYPE = 'AgentMembershipCredential';
export const CAPABILITY_TYPE = 'AgentCapabilityCredential';
export const DELEGATION_TYPE = 'TaskDelegationCredential';

export interface IssuerKey {
  did: string;
  /** Verification method id, the JWT `kid`. */
  kid: string;
  privateKey: KeyObject;
  publicKey: KeyObject;
  publicMultibase: string;
}

export interface IssueInput {
  subjectDid: string;
  type: string;
  claims: Record<string, unknown>;
  ttlSeconds: number;
  nowSec: number;
  /** URL of the status list the credential is listed on when revoked. */
  statusListUrl?: string;
}

export interface Issued {
  jwt: string;
  jti: string;
  nbf: number;
  exp: number;
}

export async function issueCredential(issuer: IssuerKey, input: IssueInput): Promise<Issued> {
  const jti = `urn:uuid:${randomUUID()}`;
  const nbf = input.nowSec;
  const exp = input.nowSec + Math.floor(input.ttlSeconds);
  const vc: Record<string, unknown> = {
    '@context': [W3C_VC_CONTEXT],
    type: ['VerifiableCredential', input.type],
    credentialSubject: { id: input.subjectDid, ...input.claims },
  };
  if (input.statusListUrl) vc.credentialStatus = { id: `${input.statusListUrl}#${encodeURIComponent(jti)}`, type: 'RevocationList' };
  const jwt = await new SignJWT({ vc })
    .setProtectedHeader({ alg: 'EdDSA', typ: 'JWT', kid: issuer.kid })
    .setIssuer(issuer.did)
    .setSubject(input.subjectDid)
    .setJti(jti)
    .setIssuedAt(nbf)
    .setNotBefore(nbf)
    .setExpirationTime(exp)
    .sign(issuer.privateKey);
  return { jwt, jti, nbf, exp };
}

// ---------------------------------------------------------------------------------------------
// Verification core. A compact-JWS check with node:crypto (EdDSA only, no `crit`, no unencoded
// payloads): the hot path of egress, so it avoids jose's generic machinery and key imports; the
// interop tests show an independent library (did-jwt-vc) agrees with it.

type Json = Record<string, unknown>;

export { parseJws, type Jws } from '../lib/jws.js';

/** Whether `jws` is signed by `key` (EdDSA only; the verification itself is `verifyEd25519`'s, off the event loop while the request thread is saturated). */
function signatureOk(jws: Jws, key: KeyObject): Promise<boolean> {
  const alg = jws.header.alg;
  if (alg !== 'EdDSA' && alg !== 'Ed25519') return FALSE;
  if ('crit' in jws.header || jws.header.b64 === false) return FALSE;
  if (jws.signature.length !== 64) return FALSE;
  return verifyEd25519(jws.signingInput, key, jws.signature);
}
const FALSE = Promise.resolve(false);

// did:key -> KeyObject import is the one costly step besides the signatures; DIDs are few.
const keyCache = new Map<string, KeyObject>();
const KEY_CACHE_MAX = 10_000;

function holderKey(did: string): KeyObject | undefined {
  let k = keyCache.get(did);
  if (k) return k;
  try {
    k = publicKeyObject(publicKeyFromDidKey(did));
  } catch {
    return undefined;
  }
  if (keyCache.size >= KEY_CACHE_MAX) keyCache.clear();
  keyCache.set(did, k);
  return k;
}

export interface VerifyOptions {
  issuerDid: string;
  issuerKey: KeyObject;
  /** Required `aud` of the VP. */
  audience: string;
  /** When set, the VP's nonce must equal it; a nonce must be present in any case. */
  nonce?: string;
  nowSec: number;
  /** Allowed clock skew on nbf/exp, seconds. */
  skewSec?: number;
}

export type PresentationCheck =
  | { ok: true; holderDid: string; membershipJti: string; membershipExp: number; vpExp: number; vpJti?: string }
  | { ok: false; reason: string; holderDid?: string };

/** The longest a VP may still be valid for when presented (twice the sidecar's 12 h, SPEC 8). */
export const MAX_VP_LIFETIME_S = 24 * 3600;

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const audOf = (aud: unknown): string[] => (typeof aud === 'string' ? [aud] : Array.isArray(aud) ? aud.filter((a): a is string => typeof a === 'string') : []);

function typesOf(vc: unknown): string[] {
  const t = (vc as Json | undefined)?.type;
  return typeof t === 'string' ? [t] : Array.isArray(t) ? t.filter((x): x is string => typeof x === 'string') : [];
}

/** What step 2 reads of an issuer-verified Membership VC. */
interface Membership {
  iss: string;
  sub: unknown;
  subjectId: unknown;
  exp?: number;
  nbf?: number;
  jti?: string;
}

/**
 * Issuer-verified Membership VCs by their exact compact form, per issuer key: each is verified
 * once and its claims reused (bounded LRU). The claims, expiry included, are still checked on
 * every use, and an expired entry is dropped when met, so a cached VC never outlives its exp.
 */
const membershipCache = new WeakMap<KeyObject, Map<string, Membership>>();
export const MEMBERSHIP_CACHE_MAX = 10_000;

function cacheFor(issuerKey: KeyObject): Map<string, Membership> {
  let c = membershipCache.get(issuerKey);
  if (!c) membershipCache.set(issuerKey, (c = new Map()));
  return c;
}

/** The first Membership VC of `creds`, issuer-checked (cached), or the reason it fails. */
async function membershipOf(creds: unknown[], o: VerifyOptions): Promise<Membership | string> {
  const cache = cacheFor(o.issuerKey);
  for (const c of creds) {
    if (typeof c !== 'string') continue;
    const hit = cache.get(c);
    if (hit && hit.iss === o.issuerDid) {
      cache.delete(c);
      // Past its expiry (beyond any skew a caller may allow) it is dropped and checked afresh.
      if (hit.exp === undefined || hit.exp + (o.skewSec ?? 30) > o.nowSec) cache.set(c, hit);
      return hit;
    }
    const j = parseJws(c);
    if (!j || !typesOf(j.payload.vc).includes(MEMBERSHIP_TYPE)) continue;
    const p = j.payload;
    if (p.iss !== o.issuerDid) return 'membership credential not issued by this issuer';
    if (!(await signatureOk(j, o.issuerKey))) return 'membership credential signature invalid';
    const m: Membership = {
      iss: o.issuerDid,
      sub: p.sub,
      subjectId: ((p.vc as Json).credentialSubject as Json | undefined)?.id,
      exp: num(p.exp),
      nbf: num(p.nbf),
      jti: typeof p.jti === 'string' && p.jti !== '' ? p.jti : undefined,
    };
    if (m.exp !== undefined && m.exp + (o.skewSec ?? 30) > o.nowSec) {
      if (cache.size >= MEMBERSHIP_CACHE_MAX) cache.delete(cache.keys().next().value!);
      cache.set(c, m);
    }
    return m;
  }
  return 'no membership credential in presentation';
}

/** SPEC 4.4 steps 1-2 without the store: every failure is ok=false with a specific reason. */
export async function checkPresentation(vpJwt: unknown, o: VerifyOptions): Promise<PresentationCheck> {
  const skew = o.skewSec ?? 30;
  const vp = parseJws(vpJwt);
  if (!vp) return { ok: false, reason: 'presentation is not a compact JWT' };
  const p = vp.payload;
  const holder = p.iss;
  if (typeof holder !== 'string' || !holder.startsWith('did:key:')) return { ok: false, reason: 'presentation issuer is not a did:key' };
  // Bounded before anything else looks at it (a 45,000-character did:key used to cost seconds).
  const key = holder.length === DID_KEY_CHARS ? holderKey(holder) : undefined;
  if (!key) return { ok: false, reason: 'presentation issuer is not a valid Ed25519 did:key' };
  const kid = vp.header.kid;
  if (kid !== undefined && kid !== didKeyVerificationMethod(holder) && kid !== holder) {
    return { ok: false, reason: 'presentation kid does not belong to the holder did', holderDid: holder };
  }
  if (!(await signatureOk(vp, key))) return { ok: false, reason: 'presentation signature invalid', holderDid: holder };
  if (p.sub !== undefined && p.sub !== holder) return { ok: false, reason: 'presentation sub differs from holder', holderDid: holder };
  if (!audOf(p.aud).includes(o.audience)) return { ok: false, reason: 'presentation audience mismatch', holderDid: holder };
  if (typeof p.nonce !== 'string' || p.nonce === '') return { ok: false, reason: 'presentation nonce missing', holderDid: holder };
  if (o.nonce !== undefined && p.nonce !== o.nonce) return { ok: false, reason: 'presentation nonce mismatch', holderDid: holder };
  const exp = num(p.exp);
  if (exp === undefined) return { ok: false, reason: 'presentation has no expiry', holderDid: holder };
  if (exp + skew <= o.nowSec) return { ok: false, reason: 'presentation expired', holderDid: holder };
  // A presentation is short-lived (the sidecar mints 12 h ones): a leaked one must not live on.
  if (exp - o.nowSec > MAX_VP_LIFETIME_S + skew) return { ok: false, reason: `presentation lifetime exceeds ${MAX_VP_LIFETIME_S / 3600} h`, holderDid: holder };
  // A time claim that is there but not a number is not a time: refused, never skipped (RFC 7519 NumericDate).
  for (const k of ['nbf', 'iat'] as const) {
    if (p[k] !== undefined && num(p[k]) === undefined) return { ok: false, reason: `presentation ${k} is not a NumericDate`, holderDid: holder };
  }
  const nbf = num(p.nbf) ?? num(p.iat);
  if (nbf !== undefined && nbf - skew > o.nowSec) return { ok: false, reason: 'presentation not yet valid', holderDid: holder };
  const body = p.vp as Json | undefined;
  if (!body || typeof body !== 'object' || !typesOf(body).includes('VerifiablePresentation')) {
    return { ok: false, reason: 'presentation has no vp claim', holderDid: holder };
  }
  if (body.holder !== undefined && body.holder !== holder) return { ok: false, reason: 'presentation holder differs from issuer', holderDid: holder };
  const creds = Array.isArray(body.verifiableCredential) ? body.verifiableCredential : [];

  // Step 2: the Membership VC. Non-membership entries are ignored; the first membership decides.
  const m = await membershipOf(creds, o);
  if (typeof m === 'string') return { ok: false, reason: m, holderDid: holder };
  if (m.sub !== holder || (m.subjectId !== undefined && m.subjectId !== holder)) {
    return { ok: false, reason: 'membership credential not issued to the presentation holder', holderDid: holder };
  }
  if (m.exp === undefined) return { ok: false, reason: 'membership credential has no expiry', holderDid: holder };
  if (m.exp + skew <= o.nowSec) return { ok: false, reason: 'membership credential expired', holderDid: holder };
  if (m.nbf !== undefined && m.nbf - skew > o.nowSec) return { ok: false, reason: 'membership credential not yet valid', holderDid: holder };
  if (m.jti === undefined) return { ok: false, reason: 'membership credential has no jti', holderDid: holder };
  const mExp = m.exp;
  return { ok: true, holderDid: holder, membershipJti: m.jti, membershipExp: mExp, vpExp: exp, vpJti: typeof p.jti === 'string' ? p.jti : undefined };
}
