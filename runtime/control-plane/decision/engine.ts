/**
 * The decision engine an enforcement point holds: the policy source, the gatherer over the
 * control plane's ports, and the sinks that commit effects. `authorize` is gather -> evaluate ->
 * commit for /authz (HTTP and gRPC) and the proxy; `dryRun` is gather -> evaluate with nothing
 * committed and no human asked.
 */
import { commit, type Committed, type Sinks } from './commit.js';
import { decide, type AnswerOf, type Gatherer } from './decide.js';
import { createGatherer, type Ports } from './gather.js';
import type { PolicySource } from './policy.js';
import type { Evaluation, Facts, HoldAnswer, HoldRequest, Question } from './types.js';

export interface DecisionEngine {
  readonly policy: PolicySource;
  readonly ports: Ports;
  readonly gather: Gatherer;
  readonly sinks: Sinks;
  readonly now: () => number;
  /** True for a peer address whose x-forwarded-* headers are trusted (TRUSTED_PROXIES). */
  readonly trustedPeer: (addr: string | undefined) => boolean;
}

export function createDecisionEngine(o: {
  policy: PolicySource;
  ports: Ports;
  sinks: Sinks;
  trustedPeer?: (addr: string | undefined) => boolean;
}): DecisionEngine {
  return { policy: o.policy, ports: o.ports, gather: createGatherer(o.ports), sinks: o.sinks, now: o.ports.now, trustedPeer: o.trustedPeer ?? (() => false) };
}

/** Gathers, evaluates and commits one decision; synchronous when nothing had to be awaited. */
export function authorize(engine: DecisionEngine, facts: Facts, gather: Gatherer = engine.gather): Committed | Promise<Committed> {
  const t0 = performance.now();
  const ev = decide(facts, engine.policy.current, gather, engine.now);
  return ev instanceof Promise ? ev.then((e) => commit(e, engine.sinks, t0)) : commit(ev, engine.sinks, t0);
}

/** The proxy's gatherer: the engine's, plus a hold that waits for a human (one small object per request). */
export function withHold(engine: DecisionEngine, hold: (req: HoldRequest) => Promise<HoldAnswer>): Gatherer {
  const inner = engine.gather;
  return {
    ask<Q extends Question>(q: Q): AnswerOf<Q> | Promise<AnswerOf<Q>> {
      return q.kind === 'hold' ? (hold(q.request) as Promise<AnswerOf<Q>>) : inner.ask(q);
    },
  };
}

/** The same decision as live, with no audit record, no budget consumed and no human asked. */
export async function dryRun(engine: DecisionEngine, facts: Facts): Promise<Evaluation> {
  return decide(facts, engine.policy.current, engine.gather, engine.now, true);
}
