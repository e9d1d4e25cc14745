import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setLogLevel } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import { openTestPglite } from '../../store/testing.js';
import { openAuditChain, type AuditChain } from './chain.js';
import { auditHealth, registerAuditMetrics } from './metrics.js';

setLogLevel('error');

describe('audit metrics and /readyz detail', () => {
  let store: Store;
  let chain: AuditChain;
  beforeAll(async () => {
    store = await openTestPglite();
    chain = await openAuditChain(store, { chain: 'm', proof: { verifyIntervalMs: 0, checkpointEvery: 5 } });
  });
  afterAll(async () => {
    await chain.close();
    await store.close();
  });

  it('expose the shipped and verified seqs, the backlog and a break found by the background verifier', async () => {
    const registry = new Registry();
    registerAuditMetrics(registry, chain);
    for (let i = 0; i < 12; i++) chain.append({ action: 'authz', allow: true, reason: `r${i}` });
    await chain.flush();
    await chain.proof!.checkpoint(); // waits for the one the 12 stored records triggered
    await chain.proof!.verifyTick();
    let text = await registry.metrics();
    expect(text).toContain('writ_audit_last_seq{chain="m"} 12');
    expect(text).toContain('writ_audit_stored_seq{chain="m"} 12');
    expect(text).toContain('writ_audit_backlog_records{chain="m"} 0');
    expect(text).toContain('writ_audit_verified_seq{chain="m"} 12');
    expect(text).toContain('writ_audit_broken_seq{chain="m"} -1');
    expect(text).toContain('writ_audit_checkpoint_seq{chain="m"} 12');
    await store.exec(`update audit_log set reason = 'x' where chain = 'm' and seq = 3`);
    await chain.proof!.verifyTick(true);
    text = await registry.metrics();
    expect(text).toContain('writ_audit_broken_seq{chain="m"} 3');
    expect(auditHealth(chain)).toMatchObject({
      chain: 'm',
      durability: 'async',
      lastSeq: 12,
      storedSeq: 12,
      backlog: 0,
      brokenAtSeq: 3,
      reason: 'hash',
      verifiedSeq: 2,
    });
    // Registering twice (a second plane on the same registry) replaces, never throws.
    expect(() => registerAuditMetrics(registry, chain)).not.toThrow();
  });
});
