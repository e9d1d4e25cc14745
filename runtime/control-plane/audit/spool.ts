/**
 * The audit spool: records the store could not take yet, kept durably on local disk (JSON lines,
 * fsynced) so an exit, forced or not, during a database outage does not lose them. Written after
 * each failed batch (what is pending and not yet spooled) and at close; read on the next start,
 * where the records that continue the stored chain are shipped before anything new.
 */
import { appendFileSync, closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { logger } from '../../lib/log.js';
import type { AuditRecord } from '../types.js';
import { verifyChain, type ChainAnchor } from './hash.js';

const log = logger('audit.spool');

export interface Spool {
  readonly file: string;
  /** Appends the records above what is already spooled, then fsyncs. */
  write(records: readonly AuditRecord[]): void;
  /** Spooled records that continue `after` (verified links), oldest first; a spool that does not continue it is set aside. */
  pending(after: ChainAnchor): AuditRecord[];
  /** Removes the spool file (its records are stored). */
  clear(): void;
  count(): number;
}

export function spoolFile(dir: string, chain: string): string {
  return join(dir, `audit-${chain.replace(/[^A-Za-z0-9._-]/g, '_')}.jsonl`);
}

export function openSpool(dir: string, chain: string): Spool {
  const file = spoolFile(dir, chain);
  let spooledSeq = 0;
  let count = 0;

  const read = (): AuditRecord[] => {
    if (!existsSync(file)) return [];
    const out: AuditRecord[] = [];
    for (const line of readFileSync(file, 'utf8').split('\n')) {
      if (!line.trim()) continue;
      try {
        out.push(JSON.parse(line) as AuditRecord);
      } catch {
        // A torn last line (killed mid-write): the records before it stand.
      }
    }
    return out;
  };

  return {
    file,
    write(records) {
      const fresh = records.filter((r) => r.seq > spooledSeq);
      if (fresh.length === 0) return;
      mkdirSync(dir, { recursive: true });
      const fd = openSync(file, 'a');
      try {
        appendFileSync(fd, fresh.map((r) => JSON.stringify(r)).join('\n') + '\n');
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      spooledSeq = fresh[fresh.length - 1]!.seq;
      count += fresh.length;
    },
    pending(after) {
      const all = read();
      if (all.length === 0) return [];
      const setAside = (why: string, fields: Record<string, unknown>) => {
        const aside = `${file}.rejected-${Date.now()}`;
        renameSync(file, aside);
        log.error(`audit spool ${why}; set aside`, { file: aside, storedSeq: after.seq, ...fields });
        return [];
      };
      const next = all.filter((r) => r.seq > after.seq);
      if (next.length === 0) {
        // Nothing above the store: the spool may be cleared only if it is this chain's, stored
        // (its record at the stored seq is the stored one). Anything else is not ours to delete.
        const at = all.find((r) => r.seq === after.seq);
        if (at?.hash !== after.hash) return setAside('holds no record of the stored chain at its newest seq', { spooledSeq: all[all.length - 1]?.seq });
        log.info('audit spool already stored', { file, records: all.length, storedSeq: after.seq });
        return [];
      }
      const v = verifyChain(next, after);
      if (!v.ok) return setAside('does not continue the stored chain', { brokenAtSeq: v.brokenAtSeq });
      return next;
    },
    clear() {
      rmSync(file, { force: true });
      spooledSeq = 0;
      count = 0;
    },
    count: () => count,
  };
}
