/**
 * The issuer's Ed25519 key pair, persisted in the store so restarts keep the same did:web and old
 * credentials still verify. The private key is sealed (lib/seal.ts: AES-256-GCM under a key derived
 * with scrypt, per-row salt) under IDP_KEY_ENCRYPTION_KEY when that is set; without it the key is
 * stored as is and a warning is logged on every start. A plaintext key found while the secret is
 * set is sealed in place; a sealed key with no secret refuses to load (readyz stays 503).
 */
import { createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { and, eq } from 'drizzle-orm';
import type { Store } from '../store/factory.js';
import { issuerKeys } from '../store/schema/identity.js';
import { logger } from '../lib/log.js';
import { KeySealError, seal, unseal } from '../lib/seal.js';
import { ed25519Multibase, ISSUER_KEY_FRAGMENT, privateKeyFromBytes, rawPrivateSeed, rawPublicKey } from './did.js';
import type { IssuerKey } from './vc.js';

const log = logger('identity.issuer-key');
const ROW_ID = 'issuer';

export interface IssuerKeyOptions {
  did: string;
  /** IDP_KEY_ENCRYPTION_KEY; undefined stores the key unencrypted (with a warning). */
  secret?: string;
}

/** Loads the issuer key, creating it once (two replicas racing: the first insert wins). */
export async function loadIssuerKey(store: Store, o: IssuerKeyOptions): Promise<IssuerKey> {
  let row = (await store.db.select().from(issuerKeys).where(eq(issuerKeys.id, ROW_ID)))[0];
  if (!row) {
    const { privateKey } = generateKeyPairSync('ed25519');
    const seed = rawPrivateSeed(privateKey);
    const pub = Buffer.from(rawPublicKey(createPublicKey(privateKey))).toString('base64');
    const stored = o.secret
      ? { ...seal(seed, o.secret), enc: 'aes-256-gcm' as const }
      : { privateKey: Buffer.from(seed).toString('base64'), salt: null, enc: 'none' as const };
    await store.db
      .insert(issuerKeys)
      .values({ id: ROW_ID, publicKey: pub, ...stored })
      .onConflictDoNothing();
    row = (await store.db.select().from(issuerKeys).where(eq(issuerKeys.id, ROW_ID)))[0];
    if (!row) throw new Error('issuer key row missing after insert');
    log.info('issuer key created', { did: o.did, encrypted: row.enc !== 'none' });
  }
  let seed: Uint8Array;
  if (row.enc === 'aes-256-gcm') {
    if (!o.secret) throw new Error('issuer key is encrypted in the store; set IDP_KEY_ENCRYPTION_KEY');
    try {
      seed = unseal(row.privateKey, row.salt ?? '', o.secret);
    } catch (e) {
      throw e instanceof KeySealError ? new Error('issuer key cannot be decrypted: wrong IDP_KEY_ENCRYPTION_KEY') : e;
    }
  } else {
    seed = new Uint8Array(Buffer.from(row.privateKey, 'base64'));
    if (o.secret) {
      const sealed = seal(seed, o.secret);
      await store.db
        .update(issuerKeys)
        .set({ ...sealed, enc: 'aes-256-gcm' })
        .where(and(eq(issuerKeys.id, ROW_ID), eq(issuerKeys.enc, 'none')));
      log.info('issuer key sealed in place with IDP_KEY_ENCRYPTION_KEY');
    } else {
      log.warn('issuer private key is stored UNENCRYPTED; set IDP_KEY_ENCRYPTION_KEY to seal it at rest');
    }
  }
  const privateKey: KeyObject = privateKeyFromBytes(seed);
  const publicKey = createPublicKey(privateKey);
  const pubRaw = rawPublicKey(publicKey);
  if (Buffer.from(pubRaw).toString('base64') !== row.publicKey) throw new Error('stored issuer public key does not match its private key');
  return { did: o.did, kid: `${o.did}#${ISSUER_KEY_FRAGMENT}`, privateKey, publicKey, publicMultibase: ed25519Multibase(pubRaw) };
}
