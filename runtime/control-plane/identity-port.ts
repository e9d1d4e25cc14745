/**
 * What the control plane needs from the identity authority. The decision core depends only on
 * this interface; `identity-client.ts` implements it over HTTP (with a VP cache), tests may pass
 * an in-process implementation. Every method must resolve (never reject) with a fail-closed
 * answer on timeout or error: `{ok:false, reason}`.
 */
export interface DelegationQuery {
  actor: string;
  task: string;
  action: string;
  resource: string;
}

export interface DelegationAnswer {
  ok: boolean;
  reason: string;
  delegationId?: string;
  vcJti?: string;
  /** Epoch seconds. */
  notAfter?: number;
  /** True when no answer could be had (authority unreachable, timeout, error): an outage, not a "no". */
  unavailable?: boolean;
}

/** Every governed agent's lifecycle status, as last fetched from the identity authority. */
export interface GovernanceStanding {
  /** agent name -> status (`active`, `suspended`, ...). */
  readonly agents: ReadonlyMap<string, string>;
  /** Directory humans (subject or email) who are or were deactivated; absent from an older authority. */
  readonly humans?: ReadonlyMap<string, HumanStanding>;
  /** Epoch ms of the last successful fetch (or 304). */
  readonly fetchedAt: number;
}

export interface PresentationAnswer {
  ok: boolean;
  agentName?: string;
  agentDid?: string;
  reason: string;
}

import type { TokenVerifier } from '../identity/oauth/verifier.js';
import type { HumanStanding } from '../lib/access-token.js';
import type { ExchangeAnswer } from '../lib/upstream-tokens.js';

export interface IdentityPort {
  /** GET /v1/delegations/check on the identity authority. */
  checkDelegation(q: DelegationQuery): Promise<DelegationAnswer>;
  /** POST /v1/agents/verify-presentation (cached by token hash). */
  verifyPresentation(vp: string, audience?: string): Promise<PresentationAnswer>;
  /**
   * The answer verifyPresentation would give from its cache, without I/O, or undefined. Lets a
   * decision whose VP is cached finish in the request tick (optional).
   */
  cachedPresentation?(vp: string, audience?: string): PresentationAnswer | undefined;
  /** The governance standing feed, when this port keeps one (undefined before the first fetch). */
  standing?(): GovernanceStanding | undefined;
  /** Writ access tokens checked offline (identity-tokens.ts), when this port follows them. */
  tokens?(): TokenVerifier;
  /**
   * RFC 8693 exchange of the agent's Writ access token for one sent to registry entry `audience`'s
   * upstream (identity/oauth/onward.ts; `upstreamAuth: {exchange: true}`), as an enforcement point.
   */
  exchangeToken?(subjectToken: string, audience: string): Promise<ExchangeAnswer>;
  /** Called when the standing's content changes. */
  onStanding?(listener: () => void): () => void;
  close?(): Promise<void>;
}
