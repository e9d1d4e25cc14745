/**
 * The one pure decision: `evaluate(facts, snapshot, answers, now)` -> a finished Evaluation, or
 * the Question it needs answered first. No I/O, no clock, no state: /authz (HTTP and gRPC), the
 * forward proxy, the broker's hop, the dry-run and the tests all run it (see decide.ts).
 */
import { evaluateEgress } from './egress.js';
import { evaluateIngress } from './ingress.js';
import type { Answers, Facts, PolicySnapshot, Step } from './types.js';

/** `explain` records every layer's verdict (the dry-run); the decision is the same either way. */
export function evaluate(facts: Facts, snap: PolicySnapshot, answers: Answers, now: number, explain = false): Step {
  return facts.kind === 'egress' ? evaluateEgress(facts, snap, answers, now, explain) : evaluateIngress(facts, snap, answers, explain);
}
