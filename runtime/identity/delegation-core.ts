/**
 * Task-scoped delegation rules (SPEC 3.3), pure: the check verdict (resource globs: lib/resource-glob.ts).
 */
import { resourceMatches } from '../lib/resource-glob.js';

export { resourceMatches };

export interface DelegationFacts {
  id: string;
  status: string;
  actorName: string;
  actorDid: string | null;
  task: string;
  action: string;
  resource: string;
  vcJti: string | null;
  notAfter: number | null;
  /** Insertion order; higher is newer. */
  seq: number;
}

export interface CheckQuery {
  actor: string;
  task: string;
  action: string;
  resource: string;
}

export interface CheckVerdict {
  ok: boolean;
  reason: string;
  delegationId: string | null;
  vcJti: string | null;
  notAfter: number | null;
}

/**
 * ok only for an approved delegation for this actor (name or DID), task, action and resource
 * whose notAfter is later than now and whose VC is not revoked. Otherwise the reason of the
 * newest matching approved delegation (`delegation revoked` / `delegation expired`), or
 * `no approved delegation` when none matches.
 */
export function checkDelegation(rows: DelegationFacts[], q: CheckQuery, nowSec: number, isRevoked: (jti: string) => boolean): CheckVerdict {
  const matching = rows
    .filter(
      (d) =>
        d.status === 'approved' &&
        (d.actorName === q.actor || d.actorDid === q.actor) &&
        d.task === q.task &&
        d.action === q.action &&
        resourceMatches(d.resource, q.resource),
    )
    .sort((a, b) => b.seq - a.seq);
  let first: CheckVerdict | undefined;
  for (const d of matching) {
    const base = { delegationId: d.id, vcJti: d.vcJti, notAfter: d.notAfter };
    let v: CheckVerdict;
    if (!d.vcJti || d.notAfter === null) v = { ok: false, reason: 'no approved delegation', ...base };
    else if (isRevoked(d.vcJti)) v = { ok: false, reason: 'delegation revoked', ...base };
    else if (!(d.notAfter > nowSec)) v = { ok: false, reason: 'delegation expired', ...base };
    else return { ok: true, reason: 'delegation approved', ...base };
    first ??= v;
  }
  return first ?? { ok: false, reason: 'no approved delegation', delegationId: null, vcJti: null, notAfter: null };
}
