/**
 * The control plane's view of Writ access tokens (issue 43 item 5): the authorization server's
 * issuer and key, read from the identity authority (`/.well-known/oauth-authorization-server`,
 * `/.well-known/jwks.json`) at start and again when a token names an unknown `kid` (at most every
 * 30 s), and an offline verifier (identity/oauth/verifier.ts) whose revocation and standing come
 * from what the identity client already follows: the revocation list it polls (every list, the
 * tokens' `oauth` list included; every `AGENT_IDP_REVOCATION_POLL_MS`) and the governance standing
 * (every half period), whose `humans` carry the directory's deactivations. No call per request: a
 * revoked token or delegation, a suspended agent, or a deactivated human is refused once the next
 * poll has seen it (within 1 s by default). While either feed is stale,
 * or the key is not loaded yet, every token is refused (fail closed).
 */
import type { KeyObject } from 'node:crypto';
import { mayAct } from '../lib/governance-standing.js';
import { errMsg, logger } from '../lib/log.js';
import { keyFromJwk } from '../identity/oauth/token.js';
import { accessTokenShaped, humanDenial, humanRef, type TokenCheck } from '../lib/access-token.js';
import { createTokenVerifier, type TokenVerifier } from '../identity/oauth/verifier.js';
import type { GovernanceStanding } from './identity-port.js';

const log = logger('identity-tokens');

export interface TokenFeeds {
  /** GET a JSON document from the identity authority (its path); undefined when it did not answer 200. */
  get(path: string): Promise<unknown>;
  isRevoked(jti: string): boolean;
  /** Whether the revocation list is current (the last poll is recent enough). */
  revocationsCurrent(): boolean;
  standing(): GovernanceStanding | undefined;
  /** Oldest standing still trusted (ms). */
  standingMaxAgeMs: number;
  now(): number;
}

/** Least time between two key fetches on an unknown kid (ms). */
const REFETCH_MS = 30_000;

export interface TokenFollower extends TokenVerifier {
  /** Loads (or reloads) issuer and key; true when both were read. */
  load(): Promise<boolean>;
}

export function followTokens(f: TokenFeeds): TokenFollower {
  let issuer: string | undefined;
  let keys = new Map<string, KeyObject>();
  let verifier: TokenVerifier | undefined;
  let lastFetch = Number.NEGATIVE_INFINITY;

  const state = {
    isRevoked: f.isRevoked,
    agentDenial(name: string): string | undefined {
      const s = f.standing();
      if (!s || f.now() - s.fetchedAt > f.standingMaxAgeMs) return 'governance standing unknown: identity authority unreachable (fail closed)';
      const status = s.agents.get(name);
      return status === undefined || mayAct(status) ? undefined : `agent ${JSON.stringify(name)} is ${status} (governance)`;
    },
    // Asked after agentDenial, which already refused a stale or missing standing.
    humanDenial: (sub: string, iat: number) => humanDenial(f.standing()?.humans?.get(humanRef(sub)), sub, iat),
  };

  async function load(): Promise<boolean> {
    lastFetch = f.now();
    try {
      const meta = (await f.get('/.well-known/oauth-authorization-server')) as { issuer?: unknown } | undefined;
      const set = (await f.get('/.well-known/jwks.json')) as { keys?: unknown } | undefined;
      if (typeof meta?.issuer !== 'string' || !Array.isArray(set?.keys)) return false;
      const next = new Map<string, KeyObject>();
      for (const jwk of set.keys) {
        const k = keyFromJwk(jwk);
        const kid = (jwk as { kid?: unknown }).kid;
        if (k && typeof kid === 'string') next.set(kid, k);
      }
      if (meta.issuer !== issuer) verifier = undefined;
      issuer = meta.issuer;
      keys = next;
      verifier ??= createTokenVerifier({ issuer, keyFor: keyFor, state, now: f.now });
      return true;
    } catch (e) {
      log.warn('authorization server keys not loaded', { err: errMsg(e) });
      return false;
    }
  }

  function keyFor(kid: unknown): KeyObject | undefined {
    const k = typeof kid === 'string' ? keys.get(kid) : undefined;
    if (!k && f.now() - lastFetch >= REFETCH_MS) void load();
    return k;
  }

  const notLoaded: TokenCheck = { ok: false, reason: 'authorization server key not loaded yet (fail closed)' };
  const stale: TokenCheck = { ok: false, reason: 'revocation list not current: identity authority unreachable (fail closed)' };
  return {
    load,
    // Before the issuer is known, any access-token-shaped bearer token may be Writ's: refused, not ignored.
    claimed: (token) => (verifier ? verifier.claimed(token) : accessTokenShaped(token)),
    check: (token) => (!verifier ? notLoaded : !f.revocationsCurrent() ? stale : verifier.check(token)),
    signatureChecks: () => verifier?.signatureChecks() ?? 0,
    issuer: () => (verifier ? issuer : undefined),
  };
}
