/**
 * The forward proxy's decision (SPEC 4.2): the control plane's one decision engine on proxy
 * facts (the agent's VP from `Proxy-Authorization: Bearer`, the target from host:port, the
 * task/action/resource from `X-Writ-*` headers), audited as `egress.proxy`. What the proxy adds
 * is only its way of answering a question the evaluation asks: a request that needs a human is
 * held in the approval queue (`hold`) and the evaluation resumes with the human's answer. Every
 * proxied request gets exactly one audit row, written when its decision (or its hold) ends.
 *
 *   no usable Proxy-Authorization -> challenge (407); deny -> 403; allow -> forward (with the
 *   call ticket for the upstream hop, when the upstream serves a registry model: a broker).
 */
import type { AccessTokenClaims } from '../../lib/access-token.js';
import { errMsg } from '../../lib/log.js';
import { startDecisionSpan } from '../../lib/tracing.js';
import { NO_USAGE } from '../budget/policy.js';
import { commit, denied, type Committed } from '../decision/commit.js';
import { decide, type AnswerOf, type Gatherer } from '../decision/decide.js';
import { withHold, type DecisionEngine } from '../decision/engine.js';
import { askingWithin } from '../decision/gather.js';
import { proxyFacts, type HeaderBag } from '../decision/facts.js';
import type { EgressFacts, Evaluation, HoldAnswer, HoldRequest, Question } from '../decision/types.js';
import type { Rule } from '../types.js';
import type { ProxyTarget } from './target.js';

export interface ProxyRequest {
  via: 'http' | 'connect';
  method: string;
  target: ProxyTarget;
  /** Request headers (lower-cased): Proxy-Authorization and X-Writ-On-Behalf-Of, -Task, -Action, -Resource. */
  headers: HeaderBag;
  /** node's raw header lines (a repeated scoping header is denied). */
  rawHeaders?: readonly string[];
  /**
   * What goes upstream for an allowed request (the entry's Secret, a token exchanged for it),
   * settled before the decision is committed: a request nothing can be sent for is recorded as
   * the deny it is, never as an allow. Absent: the caller settles it after the decision.
   */
  upstreamFor?: (ev: Evaluation) => Promise<UpstreamChoice>;
}

/** What goes upstream (`credential`, none when undefined), or why nothing can: the deny's reason, rule and HTTP status. */
export type UpstreamChoice = { credential?: { header: string; value: string } } | { refused: string; rule: Rule; status: 403 | 502 };

/** What answering a verdict needs of its decision: a committed one, or an /authz answer (the egress gateway). */
export interface VerdictOutcome {
  decision: { reason: string; rule: string; headers?: Record<string, string> };
  /** The call ticket to stamp on the upstream request. */
  ticket?: string;
  /** The verified Writ access token the allow rests on (the in-plane decision): an exchange for the upstream starts from it. */
  token?: AccessTokenClaims;
  /** Settled in the decision (`ProxyRequest.upstreamFor`): what goes upstream, or the status of the deny it became. */
  upstream?: UpstreamChoice;
}

export interface ProxyVerdict {
  kind: 'challenge' | 'deny' | 'allow';
  outcome: VerdictOutcome;
  /** The egress request id when the request was held. */
  requestId?: string;
  /**
   * Allow only: asks the same question again for a connection that stays open (a CONNECT
   * tunnel). Resolves with the committed deny (audited) when the answer is now no, else undefined.
   */
  recheck?: () => Promise<VerdictOutcome | undefined>;
}

/**
 * How a forward proxy decides a request: `decideProxy` on the control plane's engine (the
 * in-plane proxy), or an /authz call (the egress gateway, runtime/egress-gateway/).
 */
export type ProxyDecider = (req: ProxyRequest, hold: Hold) => Promise<ProxyVerdict>;

/**
 * The decision again for an open tunnel, on the same facts and the current policy: the agent's
 * VP against the revocation list, its governance standing, its registry entry and allow list,
 * the delegation and OPA. A tunnel is one call, counted (and approved by a human, if it was
 * held) when it opened: its budget is not asked again, and a human's approval still stands.
 */
async function recheckOf(facts: EgressFacts, engine: DecisionEngine): Promise<Committed | undefined> {
  const inner = engine.gather;
  const gather: Gatherer = {
    ask<Q extends Question>(q: Q): AnswerOf<Q> | Promise<AnswerOf<Q>> {
      if (q.kind === 'usage') return NO_USAGE as AnswerOf<Q>;
      if (q.kind === 'hold') return { result: 'approved', detail: 'approved when the tunnel opened' } as AnswerOf<Q>;
      return inner.ask(q);
    },
  };
  const startedAt = performance.now();
  const ev = await decide(facts, engine.policy.current, gather, engine.now);
  if (ev.decision.allow) return undefined;
  const reason = `open tunnel closed: ${ev.decision.reason}`;
  return commit({ ...ev, decision: { ...ev.decision, reason }, effects: { ...ev.effects, audit: { ...ev.effects.audit, reason } } }, engine.sinks, startedAt);
}

/** Waits for a human's decision on a held request (the server's queue and client-gone handling). */
export type Hold = (req: HoldRequest) => Promise<HoldAnswer>;

/** Decides one proxied request; resolves (never rejects) with the committed verdict. */
export async function decideProxy(req: ProxyRequest, engine: DecisionEngine, hold: Hold): Promise<ProxyVerdict> {
  const t = req.target;
  const facts = proxyFacts(
    req.headers,
    { host: t.host, port: t.port, hostPort: t.hostPort, connect: req.via === 'connect' },
    req.method,
    t.resource,
    req.rawHeaders,
  );
  // Metered from the decision's last answer: a hold is a human's time, not the decision's.
  let startedAt = performance.now();
  let requestId: string | undefined;
  const gather = withHold(engine, async (r) => {
    const a = await hold(r);
    requestId = a.id;
    startedAt = performance.now();
    return a;
  });
  const span = startDecisionSpan('proxy', req.headers.traceparent, req.headers.tracestate);
  const ev = await decide(facts, engine.policy.current, askingWithin(gather, span), engine.now);
  // Settling it may not throw past the commit: every request keeps its one audit row.
  const upstream =
    ev.decision.allow && req.upstreamFor
      ? await req.upstreamFor(ev).catch((e: unknown): UpstreamChoice => ({ refused: `upstream credential: ${errMsg(e)}`, rule: 'registry', status: 502 }))
      : undefined;
  const final = upstream && 'refused' in upstream ? denied(ev, upstream.refused, { rule: upstream.rule }) : ev;
  const outcome: VerdictOutcome & Committed = { ...(await commit(final, engine.sinks, startedAt)), ...(upstream ? { upstream } : {}) };
  const d = outcome.decision;
  span.end({ rule: d.rule, allow: d.allow, status: d.status, service: t.hostPort });
  if (!d.allow) return { kind: d.challenge ? 'challenge' : 'deny', outcome, requestId };
  return { kind: 'allow', outcome, requestId, ...(req.via === 'connect' ? { recheck: () => recheckOf(facts, engine) } : {}) };
}
