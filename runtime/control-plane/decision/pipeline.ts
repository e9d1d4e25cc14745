/**
 * Decide, then audit, then metrics (SPEC 4.1 order). The audit append is synchronous (hashing
 * in memory); if it throws, the decision turns into a deny: an unrecorded allow is not allowed.
 */
import { errMsg, logger } from '../../lib/log.js';
import { decideEgress } from './egress.js';
import { decideIngress } from './ingress.js';
import { deny } from './outcome.js';
import type { AuditSink, DecisionDeps, EgressFacts, IngressFacts, Outcome } from './types.js';

const log = logger('decision');

/** What the metrics need from a decision (metrics.ts implements it over prom-client). */
export interface DecisionMeter {
  observeDecision(service: string, allow: boolean, rule: string, seconds: number): void;
}

export interface PipelineDeps extends DecisionDeps {
  audit: AuditSink;
  meter?: DecisionMeter;
}

export function settle(outcome: Outcome, deps: { audit: AuditSink; meter?: DecisionMeter }, startedAt: number): Outcome {
  let out = outcome;
  try {
    deps.audit.append(out.audit);
  } catch (e) {
    log.error('audit append failed; denying', { err: errMsg(e) });
    const d = deny(403, out.decision.rule, `audit unavailable: ${errMsg(e)}`);
    out = { ...out, decision: d, audit: { ...out.audit, allow: false, reason: d.reason } };
  }
  try {
    deps.meter?.observeDecision(out.serviceLabel, out.decision.allow, out.decision.rule, (performance.now() - startedAt) / 1000);
  } catch (e) {
    log.warn('metrics failed', { err: errMsg(e) });
  }
  return out;
}

export async function authorizeIngress(facts: IngressFacts, deps: PipelineDeps): Promise<Outcome> {
  const t0 = performance.now();
  return settle(await decideIngress(facts, deps), deps, t0);
}

export async function authorizeEgress(facts: EgressFacts, deps: PipelineDeps): Promise<Outcome> {
  const t0 = performance.now();
  return settle(await decideEgress(facts, deps), deps, t0);
}
