/** Audit chain: `openAuditChain(store, opts)` -> AuditChain (append/durable/recent/served/verify/flush/close, proof). */
export { openAuditChain, RING_SIZE, DEFAULT_RECENT } from './chain.js';
export type { AuditChain, AuditChainOptions, AuditSink, AuditReader, Durability } from './chain.js';
export { AuditBackpressureError, AuditNotCommittedError } from './shipper.js';
export { canonical, hashRecord, verifyChain, GENESIS, GENESIS_HASH, MAX_FIELD_CHARS } from './hash.js';
export type { ChainAnchor, VerifyResult } from './hash.js';
export { verifyRange, type RangeResult } from './verify.js';
export { AUDIT_KEY_PATH, CHECKPOINT_TYP, verifyCheckpoint, type Checkpoint, type SignedCheckpoint, type Jwks } from './checkpoint.js';
export { verifyExport, exportLines, type OfflineResult } from './export.js';
export { auditOptions } from './config.js';
export { auditRoutes } from './routes.js';
export { auditHealth, auditUnable, registerAuditMetrics, type AuditHealth } from './metrics.js';
export { ChainLeasedError } from './lease.js';
