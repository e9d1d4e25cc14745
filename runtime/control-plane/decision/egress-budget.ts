/**
 * The egress path's budget layer: the actor's usage against its ceilings (a valid call ticket
 * from a proxy hop means that hop counted this call already), and the broker's `X-Writ-Reserve`
 * (model targets only, well formed). The call itself is counted at commit, re-checked there. Pure.
 */
import { H } from '../../lib/brand.js';
import { formatReservation, UNKNOWN_RETRY_SECONDS } from '../../lib/reservation-header.js';
import { overBudget } from '../budget/policy.js';
import { ask, pass, refuse, type PolicyLayer, type Verdict } from './driver.js';
import type { EgressContext } from './egress.js';
import type { Answers } from './types.js';

/** To the broker (it asked to reserve) an over-budget deny is a budget refusal, as a reservation that does not fit is: 429 insufficient_quota with a retry-after. */
const REFUSED = {
  [H.reservation]: formatReservation({ kind: 'refused', retryAfterSeconds: UNKNOWN_RETRY_SECONDS }),
  'retry-after': String(UNKNOWN_RETRY_SECONDS),
};

function budget(c: Readonly<EgressContext>, a: Answers): Verdict<EgressContext> {
  const f = c.facts;
  const actor = c.actor!;
  let ticketed = false;
  if (f.ticket && c.target) {
    if (a.ticket === undefined) return ask({ kind: 'ticket', ticket: f.ticket, actor: c.actorName, upstream: c.target.upstream });
    ticketed = a.ticket;
  }
  const reserve = f.reserve;
  if (reserve && 'error' in reserve) return refuse(403, 'inline', `malformed ${H.reserve}: ${reserve.error}`);
  if (reserve && c.kind !== 'model') return refuse(403, 'inline', `${H.reserve} applies to model calls only`);
  // Not counted (an MCP message other than tools/call): not metered either.
  if (!actor.budget || !c.counted) return ticketed ? pass({ ticketed }) : pass();
  if (!a.usage) return ask({ kind: 'usage', agent: c.actorName });
  const over = overBudget(a.usage, actor.budget, { calls: !ticketed });
  if (!over) return ticketed ? pass({ ticketed }) : pass();
  // Audit mode: allowed, and the allow's audit record says what enforce would have denied.
  if (actor.budget.mode === 'audit') return pass({ ticketed, overAudit: `over budget (audit mode): ${over}` });
  return refuse(403, 'inline', over, { extra: reserve ? { headers: { ...REFUSED } } : undefined });
}

export const budgetLayer: PolicyLayer<EgressContext> = {
  name: 'budget',
  decide: budget,
  why: (c) => c.overAudit || (c.ticketed ? 'within budget (call counted by the proxy hop)' : 'within budget'),
};
