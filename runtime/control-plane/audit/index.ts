/** Audit chain: `openAuditChain(store, {chain})` -> AuditChain (append/recent/verify/flush/close). */
export { openAuditChain, RING_SIZE, DEFAULT_RECENT } from './chain.js';
export type { AuditChain, AuditChainOptions, AuditSink, AuditReader } from './chain.js';
export { AuditBackpressureError } from './shipper.js';
export { canonical, hashRecord, verifyChain, GENESIS, GENESIS_HASH, MAX_FIELD_CHARS } from './hash.js';
export type { ChainAnchor, VerifyResult } from './hash.js';
export { verifyStored } from './store.js';
