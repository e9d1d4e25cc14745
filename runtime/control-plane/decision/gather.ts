/**
 * The control plane's Gatherer: answers an evaluation's questions through its ports, each with
 * the port's own cache and a timeout. A cached VP verification and the in-memory budget meter
 * answer at once (the decision finishes in the request tick); the identity authority, OIDC and
 * OPA are awaited. Every failure, including a timeout, is a `{failed}` answer: fail closed.
 */
import { errMsg, logger } from '../../lib/log.js';
import type { DecisionSpan } from '../../lib/tracing.js';
import type { BudgetUsage } from '../budget/policy.js';
import type { IdentityPort } from '../identity-port.js';
import type { AnswerOf, Gatherer } from './decide.js';
import type { Failure, HoldAnswer, HoldRequest, OidcAnswer, Question } from './types.js';

const log = logger('decision');

/** Workforce OIDC verifier (lib/oidc.ts). Must resolve, never reject. */
export interface OidcPort {
  verify(token: string): Promise<OidcAnswer>;
}

/** Org-wide policy-engine veto (opa.ts). Must resolve, never reject. */
export interface OpaPort {
  evaluate(input: Record<string, unknown>): Promise<{ allow: boolean; reason: string }>;
}

/** Verifies the proxy's call tickets (tickets.ts). */
export interface TicketVerifier {
  verify(ticket: string, actor: string, upstream: string): boolean;
}

export interface Ports {
  identity?: IdentityPort;
  oidc?: OidcPort;
  opa?: OpaPort;
  budget: { usage(agent: string, now: number): BudgetUsage | Promise<BudgetUsage> };
  tickets?: TicketVerifier;
  /** Upper bound on one identity-authority call (ms). */
  identityTimeoutMs: number;
  now: () => number;
  /** The forward proxy's hold: waits for a human's decision on a held request. */
  hold?: (req: HoldRequest) => Promise<HoldAnswer>;
}

/**
 * Resolves with `{failed}` when `p` does not settle within `ms` (or rejects). `late` gets the
 * value `p` resolves with after that: an answer nobody waits for any more, whose effects (a
 * reservation made, a call counted) the caller may have to undo.
 */
export function within<T>(p: Promise<T>, ms: number, what: string, late?: (v: T) => void): Promise<T | Failure> {
  return new Promise((resolve) => {
    let gaveUp = false;
    const timer = setTimeout(() => {
      gaveUp = true;
      resolve({ failed: `${what} timed out after ${ms} ms` });
    }, ms);
    p.then(
      (v) => {
        clearTimeout(timer);
        if (!gaveUp) return resolve(v);
        try {
          late?.(v);
        } catch (e) {
          log.error(`undoing a late ${what} failed`, { err: errMsg(e) });
        }
      },
      (e: unknown) => {
        clearTimeout(timer);
        resolve({ failed: `${what} failed: ${errMsg(e)}` });
      },
    );
  });
}

/**
 * `g` asking every question inside `span`: the identity-authority request a question makes
 * carries the decision's trace context, also when the decision asks it after an await (the
 * trace context is synchronous, lib/sync-context.ts). `g` itself when tracing is off.
 */
export function askingWithin(g: Gatherer, span: DecisionSpan): Gatherer {
  return span.traced ? { ask: (q) => span.run(() => g.ask(q)) } : g;
}

const missing = (what: string): Failure => ({ failed: `${what} is not configured (fail closed)` });

export function createGatherer(p: Ports): Gatherer {
  return {
    ask<Q extends Question>(q: Q): AnswerOf<Q> | Promise<AnswerOf<Q>> {
      type A = AnswerOf<Q>;
      switch (q.kind) {
        case 'vp': {
          if (!p.identity) return missing('identity authority') as A;
          const hit = p.identity.cachedPresentation?.(q.vp, q.audience);
          if (hit) return hit as A;
          return within(p.identity.verifyPresentation(q.vp, q.audience), p.identityTimeoutMs, 'VP verification') as Promise<A>;
        }
        case 'token': {
          // Offline, from the feeds the identity client follows: no call per request.
          const tokens = p.identity?.tokens?.();
          if (!tokens?.claimed(q.token)) return { claimed: false } as A;
          return { claimed: true, ...tokens.check(q.token) } as A;
        }
        case 'usage':
          return p.budget.usage(q.agent, p.now()) as A;
        case 'ticket':
          return (p.tickets?.verify(q.ticket, q.actor, q.upstream) ?? false) as A;
        case 'delegation':
          if (!p.identity) return missing('identity authority') as A;
          return within(p.identity.checkDelegation(q.query), p.identityTimeoutMs, 'delegation check') as Promise<A>;
        case 'oidc':
          if (!p.oidc) return missing('workforce OIDC') as A;
          return within(p.oidc.verify(q.token), p.identityTimeoutMs, 'credential verification') as Promise<A>;
        case 'opa':
          if (!p.opa) return missing('OPA') as A;
          return within(p.opa.evaluate(q.input), p.identityTimeoutMs, 'OPA') as Promise<A>;
        case 'hold':
          if (!p.hold) return { result: 'pending', detail: 'no approval queue on this path' } as A;
          return p.hold(q.request) as Promise<A>;
      }
      return missing('answer') as A;
    },
  };
}
