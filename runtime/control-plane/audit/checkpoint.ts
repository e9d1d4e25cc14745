/**
 * Signed checkpoints (issue 16): the control plane signs `{chainId, seq, hash, time}` of a stored
 * record with an Ed25519 key of its own, as a compact JWS (alg EdDSA, typ
 * `writ-audit-checkpoint+jws`, kid = the key's RFC 7638 thumbprint). Whoever keeps a checkpoint
 * can later prove the log still extends it: the records from genesis (or a signed prune
 * checkpoint) must recompute, link by link, to the kept hash at the kept seq. A truncated,
 * deleted or rewritten-and-rehashed history cannot, and a new key cannot sign the old kid.
 *
 * The key lives in the store (`audit_keys`, one row shared by every replica); its private part
 * is sealed (lib/seal.ts) under AUDIT_KEY_ENCRYPTION_KEY when set.
 * The public key is served as a JWKS at AUDIT_KEY_PATH on the management listener.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { CompactSign, calculateJwkThumbprint, compactVerify, importJWK, type JWK } from 'jose';
import { and, asc, desc, eq, gte, lte } from 'drizzle-orm';
import { BRAND } from '../../lib/brand.js';
import { logger } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import { auditCheckpoints, auditKeys } from '../../store/schema/audit.js';
import { seal, unseal } from '../../lib/seal.js';

const log = logger('audit.checkpoint');
const KEY_ROW = 'audit';

export const CHECKPOINT_TYP = `${BRAND}-audit-checkpoint+jws`;
/** Where the management listener serves the checkpoint key (a JWKS). */
export const AUDIT_KEY_PATH = `/.well-known/${BRAND}-audit-key`;

/** What a checkpoint states (the JWS payload). */
export interface Checkpoint {
  chainId: string;
  seq: number;
  hash: string;
  time: string;
  /** Present on a retention-boundary checkpoint: records up to seq were pruned on purpose. */
  prune?: true;
}

/** A checkpoint as stored and served: the statement and its signature. */
export interface SignedCheckpoint extends Checkpoint {
  jws: string;
  kid: string;
}

export interface Jwks {
  keys: JWK[];
}

export interface AuditSigner {
  readonly kid: string;
  readonly jwks: Jwks;
  sign(cp: Checkpoint): Promise<SignedCheckpoint>;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/** The payload in a fixed field order (what is signed). */
function payloadOf(cp: Checkpoint): Checkpoint {
  const p: Checkpoint = { chainId: cp.chainId, seq: cp.seq, hash: cp.hash, time: cp.time };
  if (cp.prune) p.prune = true;
  return p;
}

export function signerFromKey(privateKey: KeyObject, kid: string, publicJwk: JWK): AuditSigner {
  const jwk: JWK = { ...publicJwk, kid, alg: 'EdDSA', use: 'sig' };
  return {
    kid,
    jwks: { keys: [jwk] },
    async sign(cp) {
      const p = payloadOf(cp);
      const jws = await new CompactSign(enc.encode(JSON.stringify(p))).setProtectedHeader({ alg: 'EdDSA', kid, typ: CHECKPOINT_TYP }).sign(privateKey);
      return { ...p, jws, kid };
    },
  };
}

/** Loads the audit signing key, creating it once (replicas racing: the first insert wins). */
export async function loadAuditSigner(store: Store, o: { secret?: string } = {}): Promise<AuditSigner> {
  let row = (await store.db.select().from(auditKeys).where(eq(auditKeys.id, KEY_ROW)))[0];
  if (!row) {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const pub = publicKey.export({ format: 'jwk' }) as JWK;
    const kid = await calculateJwkThumbprint(pub);
    const seed = Buffer.from(String((privateKey.export({ format: 'jwk' }) as JWK).d), 'base64url');
    const stored = o.secret
      ? { ...seal(seed, o.secret), enc: 'aes-256-gcm' as const }
      : { privateKey: seed.toString('base64'), salt: null, enc: 'none' as const };
    await store.db
      .insert(auditKeys)
      .values({ id: KEY_ROW, kid, publicJwk: { kty: 'OKP', crv: 'Ed25519', x: String(pub.x) }, ...stored })
      .onConflictDoNothing();
    row = (await store.db.select().from(auditKeys).where(eq(auditKeys.id, KEY_ROW)))[0];
    if (!row) throw new Error('audit key row missing after insert');
    log.info('audit signing key created', { kid: row.kid, encrypted: row.enc !== 'none' });
  }
  let seed: Uint8Array;
  if (row.enc === 'aes-256-gcm') {
    if (!o.secret) throw new Error('the audit signing key is encrypted in the store; set AUDIT_KEY_ENCRYPTION_KEY');
    try {
      seed = unseal(row.privateKey, row.salt ?? '', o.secret);
    } catch {
      throw new Error('audit signing key cannot be decrypted: wrong AUDIT_KEY_ENCRYPTION_KEY');
    }
  } else {
    seed = new Uint8Array(Buffer.from(row.privateKey, 'base64'));
    if (o.secret) {
      await store.db
        .update(auditKeys)
        .set({ ...seal(seed, o.secret), enc: 'aes-256-gcm' })
        .where(and(eq(auditKeys.id, KEY_ROW), eq(auditKeys.enc, 'none')));
      log.info('audit signing key sealed in place with AUDIT_KEY_ENCRYPTION_KEY');
    } else {
      log.warn('audit signing key is stored UNENCRYPTED; set AUDIT_KEY_ENCRYPTION_KEY to seal it at rest');
    }
  }
  const x = row.publicJwk.x ?? '';
  const privateKey = createPrivateKey({ format: 'jwk', key: { kty: 'OKP', crv: 'Ed25519', x, d: Buffer.from(seed).toString('base64url') } });
  const derived = createPublicKey(privateKey).export({ format: 'jwk' }) as JWK;
  if (derived.x !== x) throw new Error('stored audit public key does not match its private key');
  return signerFromKey(privateKey, row.kid, { kty: 'OKP', crv: 'Ed25519', x });
}

/**
 * Verifies a checkpoint JWS against a JWKS (the key is chosen by kid) and returns its statement.
 * Throws on a bad signature, an unknown kid, a wrong typ or a malformed payload.
 */
export async function verifyCheckpoint(jws: string, jwks: Jwks): Promise<SignedCheckpoint> {
  if (typeof jws !== 'string' || jws.split('.').length !== 3) throw new Error('checkpoint must be a compact JWS');
  const { payload, protectedHeader } = await compactVerify(jws, async (h) => {
    const k = jwks.keys.find((j) => j.kid === h.kid);
    if (!k) throw new Error(`checkpoint signed by unknown key ${JSON.stringify(h.kid)}`);
    // The kid is the key's RFC 7638 thumbprint: a kept kid pins the key itself.
    if ((await calculateJwkThumbprint({ kty: k.kty, crv: k.crv, x: k.x })) !== h.kid) throw new Error('checkpoint key does not match its kid (thumbprint)');
    return importJWK({ ...k, alg: 'EdDSA' }, 'EdDSA');
  });
  if (protectedHeader.alg !== 'EdDSA' || protectedHeader.typ !== CHECKPOINT_TYP) throw new Error('not an audit checkpoint (alg/typ)');
  const p = JSON.parse(dec.decode(payload)) as Partial<Checkpoint>;
  if (
    typeof p.chainId !== 'string' ||
    !Number.isSafeInteger(p.seq) ||
    (p.seq ?? 0) < 1 ||
    typeof p.hash !== 'string' ||
    !/^[0-9a-f]{64}$/.test(p.hash) ||
    typeof p.time !== 'string'
  ) {
    throw new Error('malformed checkpoint payload');
  }
  return { ...payloadOf(p as Checkpoint), jws, kid: String(protectedHeader.kid) };
}

// ---- storage ---------------------------------------------------------------------------------

type Row = typeof auditCheckpoints.$inferSelect;
const toSigned = (r: Row): SignedCheckpoint => ({
  chainId: r.chain,
  seq: Number(r.seq),
  hash: r.hash,
  time: r.time,
  ...(r.prune ? { prune: true as const } : {}),
  jws: r.jws,
  kid: r.kid,
});

export async function storeCheckpoint(store: Store, cp: SignedCheckpoint): Promise<void> {
  await store.db
    .insert(auditCheckpoints)
    .values({ chain: cp.chainId, seq: cp.seq, hash: cp.hash, time: cp.time, jws: cp.jws, kid: cp.kid, prune: !!cp.prune })
    .onConflictDoUpdate({ target: [auditCheckpoints.chain, auditCheckpoints.seq], set: { jws: cp.jws, kid: cp.kid, time: cp.time, prune: !!cp.prune } });
}

/** Stored checkpoints of a chain with seq in [from, to], oldest first (at most `limit`). */
export async function listCheckpoints(store: Store, chain: string, o: { from?: number; to?: number; limit?: number } = {}): Promise<SignedCheckpoint[]> {
  const rows = await store.db
    .select()
    .from(auditCheckpoints)
    .where(and(eq(auditCheckpoints.chain, chain), gte(auditCheckpoints.seq, o.from ?? 0), lte(auditCheckpoints.seq, o.to ?? Number.MAX_SAFE_INTEGER)))
    .orderBy(asc(auditCheckpoints.seq))
    .limit(o.limit ?? 100_000);
  return rows.map(toSigned);
}

/** The newest checkpoint of a chain (the newest prune checkpoint with `prune`). */
export async function latestCheckpoint(store: Store, chain: string, prune = false): Promise<SignedCheckpoint | undefined> {
  const where = prune ? and(eq(auditCheckpoints.chain, chain), eq(auditCheckpoints.prune, true)) : eq(auditCheckpoints.chain, chain);
  const rows = await store.db.select().from(auditCheckpoints).where(where).orderBy(desc(auditCheckpoints.seq)).limit(1);
  return rows[0] ? toSigned(rows[0]) : undefined;
}

/**
 * Stored checkpoints whose signature verifies, as seq -> signed hash. A row whose JWS does not
 * verify, or whose columns disagree with what was signed, is returned in `forged` (a tamper).
 */
export async function trustedCheckpoints(
  store: Store,
  chain: string,
  jwks: Jwks,
  o: { from?: number; to?: number } = {},
): Promise<{ hashes: Map<number, string>; forged: number[]; pruned?: SignedCheckpoint }> {
  const hashes = new Map<number, string>();
  const forged: number[] = [];
  let pruned: SignedCheckpoint | undefined;
  for (const row of await listCheckpoints(store, chain, o)) {
    try {
      const v = await verifyCheckpoint(row.jws, jwks);
      if (v.chainId !== chain || v.seq !== row.seq || v.hash !== row.hash || !!v.prune !== !!row.prune)
        throw new Error('columns differ from the signed statement');
      hashes.set(v.seq, v.hash);
      if (v.prune) pruned = v;
    } catch {
      forged.push(row.seq);
    }
  }
  return { hashes, forged, ...(pruned ? { pruned } : {}) };
}
