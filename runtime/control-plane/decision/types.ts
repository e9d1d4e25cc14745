/**
 * The decision's records. A decision is gather, then evaluate (DESIGN principle 1):
 * `evaluate(facts, snapshot, answers, now)` is pure and either finishes with an Evaluation
 * (the decision, every layer's verdict, the effects the caller commits) or names the one
 * Question it needs answered first; `decide` (decide.ts) answers questions through the
 * enforcement point's ports and evaluates again. HTTP, storage, clocks and remote calls are the
 * callers': /authz (HTTP and gRPC), the forward proxy, the broker's hop and the dry-run.
 */
import type { AccessTokenClaims, TokenCheck } from '../../lib/access-token.js';
import type { BudgetUsage } from '../budget/policy.js';
import type { DelegationAnswer, DelegationQuery, GovernanceStanding, PresentationAnswer } from '../identity-port.js';
import type { OidcAnswer } from '../../lib/oidc.js';
import type { ReserveAsk } from '../../lib/reservation-header.js';
import type { AuditEntry, Budget, Decision, Rule, Service } from '../types.js';

export type IdentityMode = 'header' | 'vc';

/** The settings that shape decisions (part of the snapshot). */
export interface DecisionSettings {
  identityMode: IdentityMode;
  /** An identity authority is configured (AGENT_IDP_URL): VPs can be verified, delegations checked. */
  identityAuthority: boolean;
  /** Workforce OIDC verifies ingress credentials. */
  oidc: boolean;
  /** An OPA veto is configured. */
  opa: boolean;
  /** Audience an agent's VP must carry. */
  vpAudience: string;
  /** WRIT_REQUIRE_GOVERNED: egress needs a governed record. */
  requireGoverned: boolean;
  /** A governance standing older than this is unknown (ms). */
  governanceMaxAgeMs: number;
  /** Ports CONNECT may reach on hosts outside the registry. */
  connectPorts: ReadonlySet<number>;
  /** MGMT_PUBLIC_URL (no trailing `/`): where `/authz` challenges send clients for a service's RFC 9728 metadata (`oauthResource`). */
  metadataBase?: string;
}

/** Read-only registry view (registry/snapshot.ts implements it). */
export interface RegistryView {
  get(name: string): Service | undefined;
  list(): readonly Service[];
  findByUpstream(hostPort: string): Service | undefined;
  byUpstream(hostPort: string): readonly Service[];
}

/** Everything a decision reads: immutable, versioned. */
export interface PolicySnapshot {
  /** The registry version (what producers apply and observe). */
  readonly version: number;
  /** Content hash over registry, governance standing and settings. */
  readonly hash: string;
  readonly registry: RegistryView;
  /** Governance standing from the identity authority (undefined before the first fetch). */
  readonly governance?: GovernanceStanding;
  readonly settings: DecisionSettings;
}

/** Request facts of the ingress path (no `X-Writ-Actor`). */
export interface IngressFacts {
  kind: 'ingress';
  /** `X-Writ-Service`, when the gateway names the target. */
  service?: string;
  /** Host (x-forwarded-host only from a trusted proxy): used when `service` is absent. */
  host?: string;
  /** Raw Authorization header value. */
  authorization?: string;
  method?: string;
  requestPath?: string;
}

/** Where a proxied request goes. */
export interface ProxyHop {
  host: string;
  port: number;
  hostPort: string;
  /** CONNECT (a tunnel) rather than a plain absolute-URI request. */
  connect: boolean;
}

/**
 * One MCP message at a tool gateway (runtime/mcp, or /authz carrying the body or the routable
 * headers): what the tool layer decides (tool.ts).
 */
export interface McpCall {
  /** The JSON-RPC method; `response` for the client's answer to a server request; `stream` (GET), `end` (DELETE). */
  method: string;
  /** `params.name` (tools/call, prompts/get) or `params.uri` (resources/*). */
  name?: string;
  /** `params.arguments` of tools/call and prompts/get (an object; anything else is refused before). */
  args?: Record<string, unknown>;
  /** SHA-256 (hex) of the RFC 8785 form of `args` ({} when absent). */
  digest?: string;
  /** `Mcp-Session-Id`. */
  session?: string;
}

/** Request facts of the egress path: /authz (`via: 'authz'`) or the forward proxy (`via: 'proxy'`). */
export interface EgressFacts {
  kind: 'egress';
  via: 'authz' | 'proxy';
  /** `X-Writ-Actor`; through the proxy the actor is the agent the VP proves. */
  actor?: string;
  onBehalfOf?: string;
  task?: string;
  /** Registry name of the target (`X-Writ-Service`); the proxy resolves `hop` instead. */
  target?: string;
  /** `X-Writ-Target-Kind`; else the registry entry's kind. */
  targetKind?: string;
  action?: string;
  resource?: string;
  /** `X-Writ-Agent-VP`, or the proxy's `Proxy-Authorization: Bearer` VP. */
  vp?: string;
  /** Raw Authorization header value (the agent token). */
  authorization?: string;
  /** `X-Writ-Call-Ticket`: a proxy hop already counted this call (proxy -> broker -> /authz). */
  ticket?: string;
  /** `X-Writ-Reserve` (the broker): once allowed, reserve the model call's worst case; `error` when malformed. */
  reserve?: ReserveAsk | { error: string };
  /** The proxy's request target, or the `X-Writ-Upstream` host:port an /authz caller named (the egress gateway). */
  hop?: ProxyHop;
  /**
   * Proxy only, where `action` and `resource` are the request itself: what the agent declared in
   * `X-Writ-Action` / `X-Writ-Resource` when it differs. Never decided on; shown to the human
   * beside the request when it is held.
   */
  declared?: { action: string; resource: string };
  /** Proxy only: why the credential is unusable (missing or not a Bearer token). */
  credentialIssue?: string;
  /** A scoping header (task, action, resource, target) sent more than once: its name. */
  repeated?: string;
  /** `/authz`: a credential header (`Authorization`, `X-Writ-Agent-VP`) sent more than once: its name. */
  repeatedCredential?: string;
  /** An MCP message to a `protocol: mcp` tool service (`target`): decided by the tool layer too. */
  mcp?: McpCall;
  /** The check carried an MCP message that cannot be decided (malformed, headers disagreeing with the body): why. */
  mcpError?: string;
}

export type Facts = IngressFacts | EgressFacts;

/** An answer that could not be had (timeout, error, unreachable): decisions deny on it. */
export interface Failure {
  failed: string;
}
export const isFailure = (v: unknown): v is Failure => typeof v === 'object' && v !== null && 'failed' in v;

/** What the workforce OIDC verifier says of a token (lib/oidc.ts). */
export type { OidcAnswer } from '../../lib/oidc.js';

/** What a human (or the hold timeout) said of a held proxy request. `pending`: not asked (dry-run). */
export interface HoldAnswer {
  result: 'approved' | 'denied' | 'expired' | 'unavailable' | 'pending';
  id?: string;
  detail: string;
}

/** What goes into the approval queue. */
export interface HoldRequest {
  actor: string;
  actorDid?: string;
  /** `host:port`. */
  target: string;
  /** `external` or a registry name. */
  service: string;
  action: string;
  resource: string;
  reason: string;
}

export type Question =
  | { kind: 'oidc'; token: string }
  | { kind: 'vp'; vp: string; audience: string }
  | { kind: 'token'; token: string }
  | { kind: 'usage'; agent: string }
  | { kind: 'ticket'; ticket: string; actor: string; upstream: string }
  | { kind: 'delegation'; query: DelegationQuery }
  | { kind: 'hold'; request: HoldRequest }
  | { kind: 'opa'; input: Record<string, unknown> };

/** The answers gathered so far (tests hand them in directly). */
export interface Answers {
  oidc?: OidcAnswer | Failure;
  /**
   * [VP token, verification] pairs (at most two VPs per request). A list, not a Map: a Map hashes
   * the whole ~1 KB token on every request (~1.5 us, bench/proxy.bench.ts).
   */
  vps?: readonly (readonly [string, PresentationAnswer | Failure])[];
  /** The bearer token's check: not Writ's (`claimed: false`), or Writ's and whether it holds. */
  token?: TokenAnswer | Failure;
  /** The actor's current budget usage. */
  usage?: BudgetUsage;
  /** The call ticket is valid for this actor and target. */
  ticket?: boolean;
  delegation?: DelegationAnswer | Failure;
  hold?: HoldAnswer;
  opa?: { allow: boolean; reason: string } | Failure;
}

/** The names the dry-run shows for the layers (driver.ts; the lists are in evaluate.ts). */
export type LayerName = Rule | 'governance' | 'token' | 'tool' | 'budget' | 'approval';

/** A bearer token at an enforcement point (issue 43): not issued by Writ, or Writ's with its check. */
export type TokenAnswer = { claimed: false } | ({ claimed: true } & TokenCheck);

/** One layer's verdict, in evaluation order (the dry-run shows them). */
export interface Layer {
  layer: LayerName;
  verdict: 'pass' | 'deny' | 'needs-approval';
  reason: string;
}

/** What the caller commits after a decision: audit record, budget, metrics, proxy ticket. */
export interface Effects {
  audit: AuditEntry;
  /** Bounded metric label: a registry name, or `unknown`. */
  serviceLabel: string;
  /** Count one call against the agent (an allowed egress no earlier hop counted). */
  reserveCall?: { agent: string; budget?: Budget };
  /**
   * Reserve a model call's worst case against the agent's token and cost ceilings (the broker
   * asked), or a tool call's fixed price (`costUsd`, its registry entry's `tools`; no tokens).
   */
  reserveTokens?: ReserveAsk & { agent: string; costUsd?: number };
  /** Proxy: mint a call ticket for the upstream leg (a registry target). */
  ticket?: { actor: string; upstream: string };
}

export interface Evaluation {
  decision: Decision;
  layers: Layer[];
  effects: Effects;
  /** The snapshot version the decision was made at. */
  version: number;
  /** Verified agent DID, when a VP was verified. */
  agentDid?: string;
  /** Set on delegation-allowed egress. */
  delegation?: { id: string; exp?: number };
  /** Allowed egress: the verified Writ access token that proved the agent (an exchange for the upstream starts from it). */
  token?: AccessTokenClaims;
}

export type Step = Evaluation | { question: Question };
export const isQuestion = (s: Step): s is { question: Question } => 'question' in s;

export type { Rule };

export type { AuditSink, DecisionMeter } from './commit.js';
export type { OidcPort, OpaPort } from './gather.js';
