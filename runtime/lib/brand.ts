/**
 * The ONE place the product name is spelled. Every header, metric, env var, label,
 * key prefix and audience is derived from BRAND so a rename is a one-line change.
 */
export const BRAND = 'writ';
export const BRAND_TITLE = BRAND.charAt(0).toUpperCase() + BRAND.slice(1);
export const BRAND_UPPER = BRAND.toUpperCase();

/** `X-Writ-<Name>` as sent on the wire (canonical case). */
export const header = (name: string): string => `X-${BRAND_TITLE}-${name}`;

/** Lower-case header names, as node:http exposes them in `req.headers`. */
export const H = {
  actor: header('Actor').toLowerCase(),
  onBehalfOf: header('On-Behalf-Of').toLowerCase(),
  task: header('Task').toLowerCase(),
  service: header('Service').toLowerCase(),
  targetKind: header('Target-Kind').toLowerCase(),
  action: header('Action').toLowerCase(),
  resource: header('Resource').toLowerCase(),
  agentVp: header('Agent-VP').toLowerCase(),
  subject: header('Subject').toLowerCase(),
  upstream: header('Upstream').toLowerCase(),
  agentDid: header('Agent-DID').toLowerCase(),
  needsApproval: header('Needs-Approval').toLowerCase(),
  denyReason: header('Deny-Reason').toLowerCase(),
  requestId: header('Request-Id').toLowerCase(),
  policyVersion: header('Policy-Version').toLowerCase(),
  callTicket: header('Call-Ticket').toLowerCase(),
  /** The broker's budget reservation on its /authz call, and the plane's answer (lib/reservation-header.ts). */
  reserve: header('Reserve').toLowerCase(),
  reservation: header('Reservation').toLowerCase(),
} as const;

/** `writ_<name>` Prometheus metric names. */
export const metric = (name: string): string => `${BRAND}_${name}`;
/** `WRIT_<NAME>` environment variable names. */
export const envName = (name: string): string => `${BRAND_UPPER}_${name}`;
/** `writ.io/<name>` Kubernetes labels and annotations. */
export const label = (name: string): string => `${BRAND}.io/${name}`;
/** API group of the CRDs. */
export const API_GROUP = `${BRAND}.io`;
/** `writ_live_` / `writ_test_` API-key prefixes. */
export const keyPrefix = (env: 'live' | 'test'): string => `${BRAND}_${env}_`;
/** Default audience of an agent's verifiable presentation. */
export const VP_AUDIENCE = `${BRAND}-egress`;
