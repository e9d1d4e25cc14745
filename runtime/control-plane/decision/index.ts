/** The pure decision core: facts + ports -> Outcome. See ../README.md. */
export * from './types.js';
export { decideIngress } from './ingress.js';
export { decideEgress, egressAction, allowListFor } from './egress.js';
export { authorizeIngress, authorizeEgress, settle, type DecisionMeter, type PipelineDeps } from './pipeline.js';
export { factsFromHeaders, type Facts, type HeaderBag } from './facts.js';
export { bearerToken, isVpJwt, grantedScopes, hasScopes } from './credentials.js';
export { resolveHost, UNKNOWN_LABEL, ANONYMOUS } from './outcome.js';
