/** The egress forward proxy (SPEC 4.2): `createForwardProxy({engine, queue})`. See README.md. */
export { createForwardProxy, DEFAULT_LIMITS } from './server.js';
export type { ForwardProxy, ForwardProxyOptions, ProxyLimits, ProxyStats } from './server.js';
export { decideProxy, type Hold, type ProxyDecider, type ProxyRequest, type ProxyVerdict, type VerdictOutcome } from './decide.js';
export { parseAbsoluteTarget, parseConnectTarget, type ProxyTarget } from './target.js';
export { normaliseHost } from '../../lib/host-name.js';
export { rewriteHeaders, VIA } from './headers.js';
export { DENY_REASON, REALM } from './responses.js';
