/**
 * The one pure decision: `evaluate(facts, snapshot, answers, now)` -> a finished Evaluation, or
 * the Question it needs answered first. No I/O, no clock, no state: /authz (HTTP and gRPC), the
 * forward proxy, the broker's hop, the dry-run and the tests all run it (see decide.ts).
 *
 * Each path is a list of layers run in order by the driver (driver.ts). A new layer is one
 * function of `(context, answers)` (with what it adds to the context declared on the context
 * type) and one entry in a list below, where its place in the order is decided.
 */
import { withChallenge } from './egress-challenge.js';
import { drive, type Path } from './driver.js';
import { egressAllowed, egressContext, egressEnd, egressVeto, type EgressContext } from './egress.js';
import { budgetLayer } from './egress-budget.js';
import { approvalLayer, delegationLayer } from './egress-delegation.js';
import { egressIdentity, governance } from './egress-identity.js';
import { tokenLayer } from './egress-token.js';
import { allowlistLayer, egressRegistry } from './egress-target.js';
import { toolApprovalLayer, toolLayer } from './tool.js';
import { ingressAllowed, ingressContext, ingressEnd, ingressIdentity, ingressInline, ingressRegistry, ingressVeto, type IngressContext } from './ingress.js';
import type { Answers, EgressFacts, Facts, IngressFacts, PolicySnapshot, Step } from './types.js';

/** Ingress (north-south): the caller's credential, the target service, its inline rules, the OPA veto. */
export const INGRESS: Path<IngressFacts, IngressContext> = {
  context: ingressContext,
  layers: [ingressIdentity, ingressRegistry, ingressInline, ingressVeto],
  denied: ingressEnd,
  allowed: ingressAllowed,
};

/**
 * Egress (agent calls): identity, governance standing, registry, the access token's audience,
 * allowlist, the tool layer (an MCP message, tool.ts), budget, delegation, a human's approval (a
 * held proxy request, a held tool call), the OPA veto.
 */
export const EGRESS: Path<EgressFacts, EgressContext> = {
  context: egressContext,
  layers: [
    egressIdentity,
    governance,
    egressRegistry,
    tokenLayer,
    allowlistLayer,
    toolLayer,
    budgetLayer,
    delegationLayer,
    approvalLayer,
    toolApprovalLayer,
    egressVeto,
  ],
  denied: (c, d, layers) => egressEnd(c, withChallenge(c, d), layers),
  allowed: egressAllowed,
};

/** `explain` records every layer's verdict (the dry-run); the decision is the same either way. */
export function evaluate(facts: Facts, snap: PolicySnapshot, answers: Answers, now: number, explain = false): Step {
  return facts.kind === 'egress' ? drive(EGRESS, facts, snap, answers, now, explain) : drive(INGRESS, facts, snap, answers, now, explain);
}
