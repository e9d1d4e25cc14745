/**
 * Tokens exchanged for an upstream (issue 43 item 7, a registry entry's `upstreamAuth: {exchange:
 * true}`): the enforcement point exchanges the agent's Writ access token at the identity
 * authority (identity/oauth/onward.ts, RFC 8693 with the enforcement point as the client) for a
 * token of the same human and agent for that entry, and sends it upstream as
 * `Authorization: Bearer`. One exchange serves many calls: the answer is kept per (agent token
 * `jti`, entry) until EXPIRY_MARGIN_S before its `exp`; concurrent calls share one exchange; a
 * refusal is not kept (the next call asks again) and refuses the call (fail closed). Token values
 * are never logged. The MCP gateway and the forward proxy (plain HTTP) send them, through
 * `upstreamAuthOf`, the one choice of what goes upstream.
 */

import type { IdentityPort } from '../control-plane/identity-port.js';
import type { Service } from '../control-plane/types.js';
import { upstreamCredential, type UpstreamSecrets } from './upstream-secrets.js';

export type ExchangeAnswer = { ok: true; token: string; exp: number } | { ok: false; reason: string };
/** RFC 8693 exchange of `subjectToken` (an agent's Writ access token) for registry entry `audience`. */
export type ExchangeToken = (subjectToken: string, audience: string) => Promise<ExchangeAnswer>;

/** The agent's verified token as the decision read it. */
export interface AgentToken {
  raw: string;
  jti: string;
  exp: number;
}

export interface UpstreamTokens {
  /** The header to send upstream, or why the call is refused. */
  credential(agent: AgentToken, audience: string): Promise<{ header: string; value: string } | { failed: string }>;
  /** Tokens kept now. */
  size(): number;
}

/** An exchanged token is exchanged again this long before its `exp` (s): it never reaches an upstream about to expire. */
export const EXPIRY_MARGIN_S = 10;

export function createUpstreamTokens(exchange: ExchangeToken, o: { now?: () => number; maxEntries?: number } = {}): UpstreamTokens {
  const now = o.now ?? Date.now;
  const max = o.maxEntries ?? 10_000;
  const kept = new Map<string, { token: string; exp: number }>();
  const inflight = new Map<string, Promise<ExchangeAnswer>>();

  const fresh = (exp: number) => exp - EXPIRY_MARGIN_S > now() / 1000;

  function keep(key: string, token: string, exp: number): void {
    if (kept.size >= max) {
      for (const [k, v] of kept) if (!fresh(v.exp)) kept.delete(k);
      // Still full: the oldest goes first.
      if (kept.size >= max) kept.delete(kept.keys().next().value!);
    }
    kept.set(key, { token, exp });
  }

  async function ask(agent: AgentToken, audience: string, key: string): Promise<ExchangeAnswer> {
    const a = await exchange(agent.raw, audience);
    if (a.ok) keep(key, a.token, a.exp);
    return a;
  }

  return {
    async credential(agent, audience) {
      const key = `${agent.jti}\n${audience}`;
      const hit = kept.get(key);
      if (hit && fresh(hit.exp)) return { header: 'authorization', value: `Bearer ${hit.token}` };
      if (hit) kept.delete(key);
      let p = inflight.get(key);
      if (!p) {
        p = ask(agent, audience, key).finally(() => inflight.delete(key));
        inflight.set(key, p);
      }
      const a = await p;
      return a.ok ? { header: 'authorization', value: `Bearer ${a.token}` } : { failed: `token exchange for ${audience} refused: ${a.reason}` };
    },
    size: () => kept.size,
  };
}

/** The exchanges of `identity` (the port the decisions use); without one every exchange is refused. */
export function upstreamTokensVia(identity: () => IdentityPort | undefined): UpstreamTokens {
  return createUpstreamTokens((token, audience) => {
    const id = identity();
    return id?.exchangeToken
      ? id.exchangeToken(token, audience)
      : Promise.resolve({ ok: false, reason: 'no identity authority to exchange tokens at (AGENT_IDP_URL)' });
  });
}

/**
 * What goes upstream for an allowed call to `entry` (issue 43 item 7): its Secret
 * (`upstreamAuth.secretRef`), a token exchanged for it from the agent's Writ access token
 * (`upstreamAuth.exchange`), nothing, or why nothing can be sent (the call is then refused before
 * the upstream): `secret` (unreadable), `no-agent-token` (the agent proved itself with a VP or a
 * declared name: the authorization server vouches only for an agent it has seen a token of),
 * `exchange` (the authority refused). `agent`: the verified Writ token the decision took and its
 * value as sent.
 */
export async function upstreamAuthOf(
  entry: Service | undefined,
  o: { secrets: UpstreamSecrets | undefined; tokens: UpstreamTokens },
  agent: AgentToken | undefined,
): Promise<{ header: string; value: string } | { failed: string; why: 'secret' | 'no-agent-token' | 'exchange' } | undefined> {
  if (!entry?.upstreamAuth?.exchange) {
    const c = upstreamCredential(entry, o.secrets);
    return c && 'failed' in c ? { failed: c.failed, why: 'secret' } : c;
  }
  if (!agent) return { failed: `${entry.name} takes a token exchanged from the agent's Writ access token: call with one`, why: 'no-agent-token' };
  const c = await o.tokens.credential(agent, entry.name);
  return 'failed' in c ? { failed: c.failed, why: 'exchange' } : c;
}
