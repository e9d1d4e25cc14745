/**
 * Decide, then audit, then metrics (SPEC 4.1 order). The audit append is synchronous (hashing
 * in memory); if it throws, the decision turns into a deny: an unrecorded allow is not allowed.
 */
import { errMsg, logger } from '../../lib/log.js';
import { decideEgress } from './egress.js';
import { decideIngress } from './ingress.js';
import { isPending } from './maybe.js';
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

/**
 * Settled synchronously when the decision had nothing to wait for, else a promise (maybe.ts):
 * callers render a plain Outcome at once and `.then` a promise. A throw out of the decision core
 * (a bug; decision errors are denies) surfaces as a throw or a rejection respectively.
 */
export function authorizeIngress(facts: IngressFacts, deps: PipelineDeps): Outcome | Promise<Outcome> {
  const t0 = performance.now();
  const o = decideIngress(facts, deps);
  return isPending(o) ? o.then((out) => settle(out, deps, t0)) : settle(o, deps, t0);
}

export function authorizeEgress(facts: EgressFacts, deps: PipelineDeps): Outcome | Promise<Outcome> {
  const t0 = performance.now();
  const o = decideEgress(facts, deps);
  return isPending(o) ? o.then((out) => settle(out, deps, t0)) : settle(o, deps, t0);
}
