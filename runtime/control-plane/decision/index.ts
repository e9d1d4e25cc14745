/** The decision: pure `evaluate` over a policy snapshot, `decide` to gather its answers, `commit` for its effects. */
export * from './types.js';
export { decide, type Gatherer, type AnswerOf } from './decide.js';
export { commit, type Committed, type Sinks, type TicketMinter } from './commit.js';
export { askingWithin, createGatherer, within, type Ports, type TicketVerifier } from './gather.js';
export { createPolicySource, makePolicySnapshot, type PolicySource } from './policy.js';
export { authorize, createDecisionEngine, dryRun, withHold, type DecisionEngine } from './engine.js';
export { egressAction, EXTERNAL } from './egress.js';
export { allowListFor, resolveUpstream, externalAllowEntry } from './egress-target.js';
export { drive, pass, skip, ask, refuse, type PolicyLayer, type Path, type Verdict } from './driver.js';
export { evaluate, EGRESS, INGRESS } from './evaluate.js';
export { factsFromHeaders, proxyFacts, first, type HeaderBag, type RequestMeta } from './facts.js';
export { bearerToken, isVpJwt, grantedScopes, hasScopes } from './credentials.js';
export { resolveHost, UNKNOWN_LABEL, ANONYMOUS } from './outcome.js';
