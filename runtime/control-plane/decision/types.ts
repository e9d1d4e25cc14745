/**
 * Facts in, outcome out. The decision core sees only these records and the ports below; HTTP,
 * storage, clocks and remote calls are adapters passed in by the caller (/authz, the forward
 * proxy, a dry run).
 */
import type { AuditEntry, Decision, Rule, Service } from '../types.js';
import type { IdentityPort } from '../identity-port.js';

/** Read-only registry snapshot (A2's in-memory registry implements it; tests use a Map). */
export interface RegistryView {
  get(name: string): Service | undefined;
  list(): readonly Service[];
  /** Service whose `upstream` is exactly this `host:port`; optional, falls back to a scan of list(). */
  findByUpstream?(hostPort: string): Service | undefined;
}

/** The audit chain: hashes synchronously and returns the chained record. */
export interface AuditSink {
  append(entry: AuditEntry): unknown;
}

/** Egress rate ceilings. `reserveCall` counts one call now; `release` undoes it if a later layer denies. */
export interface BudgetPort {
  /** Returns undefined when within budget, else a reason naming the exceeded dimension. */
  check(agent: string, budget: Service['budget'], now: number): string | undefined;
  reserveCall(agent: string, now: number): () => void;
}

/** Workforce OIDC verifier (oidc.ts). Must resolve, never reject. */
export interface OidcPort {
  verify(token: string): Promise<{ ok: true; subject: string; claims: Record<string, unknown> } | { ok: false; reason: string }>;
}

/** Org-wide policy-engine veto (opa.ts). Must resolve, never reject. */
export interface OpaPort {
  evaluate(input: Record<string, unknown>): Promise<{ allow: boolean; reason: string }>;
}

export type IdentityMode = 'header' | 'vc';

export interface DecisionDeps {
  registry: RegistryView;
  budget: BudgetPort;
  /** Present when AGENT_IDP_URL is set: verifies VPs and checks delegations. */
  identity?: IdentityPort;
  /** Present when workforce OIDC is configured. */
  oidc?: OidcPort;
  /** Present when OPA_URL is set. */
  opa?: OpaPort;
  identityMode: IdentityMode;
  /** Audience the agent's VP must carry (default `writ-egress`). */
  vpAudience?: string;
  /** Upper bound on one identity-authority call in the decision (default 2000 ms). */
  identityTimeoutMs?: number;
  /** Epoch milliseconds. */
  now: () => number;
}

/** Request facts of the ingress path (no `X-Writ-Actor`). */
export interface IngressFacts {
  /** `X-Writ-Service`, when the gateway names the target. */
  service?: string;
  /** x-forwarded-host, else host: used when `service` is absent. */
  host?: string;
  /** Raw Authorization header value. */
  authorization?: string;
  method?: string;
  path?: string;
}

/** Request facts of the egress path. Shared with the forward proxy (`via: 'proxy'`). */
export interface EgressFacts {
  actor: string;
  onBehalfOf?: string;
  task?: string;
  /** Registry name of the target (`X-Writ-Service`); ignored when `resolvedTarget` is given. */
  target?: string;
  /** The proxy resolves the target from host:port itself and passes the registry entry here. */
  resolvedTarget?: Service;
  /** `X-Writ-Target-Kind`; else the registry entry's kind. */
  targetKind?: string;
  action?: string;
  resource?: string;
  /** `X-Writ-Agent-VP`. */
  vp?: string;
  /** Raw Authorization header value (the agent token; see README for its format). */
  authorization?: string;
  /** Who asks: the /authz endpoint or the forward proxy (audited as `egress.proxy`). */
  via?: 'authz' | 'proxy';
}

/** A decision plus what the audit row and the metrics need. */
export interface Outcome {
  decision: Decision;
  audit: AuditEntry;
  /** Bounded metric label: a registry name, or `unknown`. */
  serviceLabel: string;
  /** Set on allowed regulated egress. */
  delegation?: { id: string; exp?: number };
  /** Verified agent DID, when a VP was verified. */
  agentDid?: string;
}

export type { Rule };
