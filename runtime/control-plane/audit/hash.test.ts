import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { AuditEntry, AuditRecord } from '../types.js';
import { canonical, GENESIS, GENESIS_HASH, hashRecord, link, MAX_FIELD_CHARS, normalizeEntry, verifyChain, type ChainAnchor } from './hash.js';

const entries: AuditEntry[] = [
  { action: 'authz', subject: 'alice', service: 'orders', allow: true, reason: 'ok', rule: 'registry' },
  { action: 'egress', subject: 'bob', actor: 'agent-1', task: 't-9', service: 'crm', allow: false, reason: 'not allowed', rule: 'inline' },
  {
    action: 'model.invoke',
    subject: 'carol',
    actor: 'agent-2',
    service: 'gpt',
    allow: true,
    reason: 'delegated',
    rule: 'delegation',
    delegationId: 'd-1',
    delegationExp: 1_900_000_000,
  },
  { action: 'registry.upsert', subject: 'mgmt-api', service: 'orders', allow: true, reason: 'registered' },
  { action: 'egress.proxy', actor: 'agent-3', service: 'example.com:443', allow: false, reason: 'not in egress allow list', rule: 'registry' },
  { action: 'egress.approval', subject: 'approver', service: 'crm', allow: true, reason: 'approved' },
];

function build(list: AuditEntry[], from: ChainAnchor = GENESIS): AuditRecord[] {
  const out: AuditRecord[] = [];
  let prev = from;
  list.forEach((e, i) => {
    const r = link(normalizeEntry(e), prev, new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString());
    out.push(r);
    prev = { seq: r.seq, hash: r.hash };
  });
  return out;
}

/** A different value of the same type (or a value for an absent field). */
function mutate(v: unknown, key: string): unknown {
  if (typeof v === 'string') return key === 'hash' || key === 'prevHash' ? (v[0] === 'a' ? 'b' : 'a') + v.slice(1) : v + 'x';
  if (typeof v === 'number') return v + 1;
  if (typeof v === 'boolean') return !v;
  return key === 'delegationExp' || key === 'seq' ? 1 : 'added';
}

const ALL_FIELDS = [
  'seq',
  'time',
  'action',
  'subject',
  'actor',
  'task',
  'service',
  'allow',
  'reason',
  'rule',
  'delegationId',
  'delegationExp',
  'prevHash',
  'hash',
];

describe('audit hash chain (pure)', () => {
  it('genesis is 64 zeros and seq starts at 1', () => {
    const [first] = build(entries);
    expect(GENESIS_HASH).toBe('0'.repeat(64));
    expect(first!.prevHash).toBe(GENESIS_HASH);
    expect(first!.seq).toBe(1);
  });

  it('hashes the RFC 8785 canonical form: sorted keys, absent fields omitted, no hash', () => {
    const r = build([{ action: 'authz', allow: true, reason: 'ok', subject: 'a"b' }])[0]!;
    const expected = `{"action":"authz","allow":true,"prevHash":"${GENESIS_HASH}","reason":"ok","seq":1,"subject":"a\\"b","time":"2026-01-01T00:00:00.000Z"}`;
    expect(canonical(r)).toBe(expected);
    expect(r.hash).toBe(createHash('sha256').update(expected).digest('hex'));
    // Key order of the input object does not matter.
    const shuffled = Object.fromEntries(Object.entries(r).reverse()) as unknown as AuditRecord;
    expect(hashRecord(shuffled)).toBe(r.hash);
  });

  it('an intact chain verifies; so does an empty one', () => {
    expect(verifyChain(build(entries))).toEqual({ ok: true, brokenAtSeq: -1 });
    expect(verifyChain([])).toEqual({ ok: true, brokenAtSeq: -1 });
  });

  it('tampering with any field of any record reports exactly that seq', () => {
    const chain = build(entries);
    let cases = 0;
    chain.forEach((rec, i) => {
      for (const key of ALL_FIELDS) {
        const copy = chain.map((r) => ({ ...r }));
        (copy[i] as unknown as Record<string, unknown>)[key] = mutate((rec as unknown as Record<string, unknown>)[key], key);
        expect(verifyChain(copy), `record ${rec.seq} field ${key}`).toEqual({ ok: false, brokenAtSeq: rec.seq });
        cases++;
      }
      // Removing a present optional field is tampering too.
      for (const key of ['subject', 'actor', 'task', 'service', 'rule', 'delegationId', 'delegationExp'] as const) {
        if (rec[key] === undefined) continue;
        const copy = chain.map((r) => ({ ...r }));
        delete copy[i]![key];
        expect(verifyChain(copy), `record ${rec.seq} without ${key}`).toEqual({ ok: false, brokenAtSeq: rec.seq });
        cases++;
      }
    });
    expect(cases).toBeGreaterThan(chain.length * ALL_FIELDS.length);
  });

  it('a dropped, duplicated or reordered record breaks the chain where it happens', () => {
    const chain = build(entries);
    expect(verifyChain([...chain.slice(0, 2), ...chain.slice(3)])).toEqual({ ok: false, brokenAtSeq: 3 });
    expect(verifyChain([...chain.slice(0, 3), chain[2]!, ...chain.slice(3)])).toEqual({ ok: false, brokenAtSeq: 4 });
    const swapped = [...chain];
    [swapped[3], swapped[4]] = [swapped[4]!, swapped[3]!];
    expect(verifyChain(swapped)).toEqual({ ok: false, brokenAtSeq: 4 });
  });

  it('a window verifies against its anchor (the link before it) and not against another', () => {
    const chain = build(entries);
    const anchor = { seq: chain[1]!.seq, hash: chain[1]!.hash };
    expect(verifyChain(chain.slice(2), anchor)).toEqual({ ok: true, brokenAtSeq: -1 });
    expect(verifyChain(chain.slice(2), { seq: 2, hash: GENESIS_HASH })).toEqual({ ok: false, brokenAtSeq: 3 });
    expect(verifyChain(chain.slice(2))).toEqual({ ok: false, brokenAtSeq: 1 });
  });

  it('rejects entries that would poison the log, cleans strings Postgres cannot store', () => {
    expect(() => normalizeEntry({ action: 'nope', allow: true, reason: '' } as unknown as AuditEntry)).toThrow(/unknown action/);
    expect(() => normalizeEntry({ action: 'authz', allow: 'yes', reason: '' } as unknown as AuditEntry)).toThrow(/allow/);
    expect(() => normalizeEntry({ action: 'authz', allow: true, reason: '', rule: 'x' } as unknown as AuditEntry)).toThrow(/rule/);
    expect(() => normalizeEntry({ action: 'authz', allow: true, reason: '', subject: 5 } as unknown as AuditEntry)).toThrow(/subject/);
    expect(() => normalizeEntry({ action: 'egress', allow: true, reason: '', delegationExp: NaN })).toThrow(/delegationExp/);
    const n = normalizeEntry({ action: 'authz', allow: true, reason: 'a\u0000b\uD800c', subject: 'x'.repeat(MAX_FIELD_CHARS + 10) });
    expect(n.reason).toBe('a\uFFFDb\uFFFDc');
    expect(n.subject!.length).toBe(MAX_FIELD_CHARS - 1);
    expect(n.subject!.endsWith('[truncated]')).toBe(true);
    // Unknown extra fields are not carried into the record.
    expect('extra' in normalizeEntry({ action: 'authz', allow: true, reason: '', extra: 1 } as unknown as AuditEntry)).toBe(false);
  });
});
