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
import { startDecisionSpan } from '../../lib/tracing.js';
import { commit, type Committed } from '../decision/commit.js';
import { decide } from '../decision/decide.js';
import { withHold, type DecisionEngine } from '../decision/engine.js';
import { askingWithin } from '../decision/gather.js';
import { proxyFacts, type HeaderBag } from '../decision/facts.js';
import type { HoldAnswer, HoldRequest } from '../decision/types.js';
import type { ProxyTarget } from './target.js';

export interface ProxyRequest {
  via: 'http' | 'connect';
  method: string;
  target: ProxyTarget;
  /** Request headers (lower-cased): Proxy-Authorization and X-Writ-On-Behalf-Of, -Task, -Action, -Resource. */
  headers: HeaderBag;
  /** node's raw header lines (a repeated scoping header is denied). */
  rawHeaders?: readonly string[];
}

export interface ProxyVerdict {
  kind: 'challenge' | 'deny' | 'allow';
  outcome: Committed;
  /** The egress request id when the request was held. */
  requestId?: string;
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
  const outcome = await commit(ev, engine.sinks, startedAt);
  const d = outcome.decision;
  span.end({ rule: d.rule, allow: d.allow, status: d.status, service: t.hostPort });
  return { kind: d.allow ? 'allow' : d.challenge ? 'challenge' : 'deny', outcome, requestId };
}
