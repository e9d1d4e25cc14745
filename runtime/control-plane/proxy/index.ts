/** The egress forward proxy (SPEC 4.2): `createForwardProxy({deps, queue})`. See README.md. */
export { createForwardProxy, DEFAULT_LIMITS, DEFAULT_CONNECT_PORTS } from './server.js';
export type { ForwardProxy, ForwardProxyOptions, ProxyLimits, ProxyStats } from './server.js';
export { decideProxy, connectPortAllowed, externalAllowEntry, resolveTarget, EXTERNAL } from './decide.js';
export type { ProxyPolicy, ProxyRequest, ProxyVerdict, HoldTicket } from './decide.js';
export { parseAbsoluteTarget, parseConnectTarget, normaliseHost, type ProxyTarget } from './target.js';
export { rewriteHeaders, VIA } from './headers.js';
