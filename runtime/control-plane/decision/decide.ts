/**
 * Gather, then evaluate: runs the pure `evaluate` and answers each Question it names through
 * the enforcement point's Gatherer (its own caches, timeouts and queues), until it finishes.
 * Answers that are at hand (a cached VP, the in-memory budget meter) come back as values and the
 * decision finishes in the same tick; the first real wait makes the result a promise. Nothing
 * here throws for a decision reason: a failed answer is a `{failed}` the evaluation denies on.
 */
import { errMsg, logger } from '../../lib/log.js';
import type { BudgetUsage } from '../budget/policy.js';
import type { DelegationAnswer, PresentationAnswer } from '../identity-port.js';
import { evaluate } from './evaluate.js';
import { deny } from './outcome.js';
import {
  isQuestion,
  type Answers,
  type Evaluation,
  type Facts,
  type Failure,
  type HoldAnswer,
  type OidcAnswer,
  type PolicySnapshot,
  type Question,
  type TokenAnswer,
} from './types.js';

const log = logger('decision');

export type AnswerOf<Q extends Question> = Q extends { kind: 'oidc' }
  ? OidcAnswer | Failure
  : Q extends { kind: 'vp' }
    ? PresentationAnswer | Failure
    : Q extends { kind: 'token' }
      ? TokenAnswer | Failure
      : Q extends { kind: 'usage' }
        ? BudgetUsage
        : Q extends { kind: 'ticket' }
          ? boolean
          : Q extends { kind: 'delegation' }
            ? DelegationAnswer | Failure
            : Q extends { kind: 'hold' }
              ? HoldAnswer
              : { allow: boolean; reason: string } | Failure;

/** Answers questions; must never reject (a failure is a `{failed}` answer). */
export interface Gatherer {
  ask<Q extends Question>(q: Q): AnswerOf<Q> | Promise<AnswerOf<Q>>;
}

/**
 * More questions than any evaluation asks: two VPs, usage, ticket, delegation, hold, OPA, and
 * after a hold the VPs, usage, delegation and OPA again.
 */
const MAX_STEPS = 20;

/** Mutable answers of one decision. */
interface Gathered extends Answers {
  vps?: [string, PresentationAnswer | Failure][];
}

function record(a: Gathered, q: Question, v: unknown): void {
  switch (q.kind) {
    case 'oidc':
      a.oidc = v as Gathered['oidc'];
      break;
    case 'vp':
      (a.vps ??= []).push([q.vp, v as PresentationAnswer | Failure]);
      break;
    case 'token':
      a.token = v as Gathered['token'];
      break;
    case 'usage':
      a.usage = v as BudgetUsage;
      break;
    case 'ticket':
      a.ticket = v as boolean;
      break;
    case 'delegation':
      a.delegation = v as Gathered['delegation'];
      break;
    case 'hold':
      // A human may take minutes. What was asked before the hold is asked again after it (the
      // VP against the revocation list, the usage, the delegation, OPA), so a credential revoked
      // or a budget spent while the request waited still denies it when it is approved.
      delete a.oidc;
      delete a.vps;
      delete a.token;
      delete a.usage;
      delete a.delegation;
      delete a.opa;
      a.hold = v as HoldAnswer;
      break;
    case 'opa':
      a.opa = v as Gathered['opa'];
      break;
  }
}

/** What a question's answer is when asking it failed (a deny, whatever the question). */
function failureFor(q: Question, why: string): unknown {
  if (q.kind === 'hold') return { result: 'unavailable', detail: why } satisfies HoldAnswer;
  if (q.kind === 'ticket') return false;
  if (q.kind === 'usage') {
    // The store's own words (a database name, a host) are for the log, not for the caller.
    log.warn('budget usage unavailable; denying', { err: why });
    throw new Error('budget usage unavailable (budget store unreachable)');
  }
  return { failed: why } satisfies Failure;
}

/** The last line of defence: a decision that cannot finish is a deny. */
function stuck(snap: PolicySnapshot, facts: Facts, why: string): Evaluation {
  const d = deny(403, 'inline', `decision error: ${why}`);
  return {
    decision: d,
    layers: [{ layer: 'inline', verdict: 'deny', reason: d.reason }],
    effects: { audit: { action: facts.kind === 'egress' ? 'egress' : 'authz', allow: false, reason: d.reason, rule: 'inline' }, serviceLabel: 'unknown' },
    version: snap.version,
  };
}

function run(
  facts: Facts,
  policy: () => PolicySnapshot,
  gather: Gatherer,
  now: () => number,
  answers: Gathered,
  steps: number,
  explain: boolean,
): Evaluation | Promise<Evaluation> {
  for (let i = steps; i < MAX_STEPS; i++) {
    const snap = policy();
    let step;
    try {
      step = evaluate(facts, snap, answers, now(), explain);
    } catch (e) {
      return stuck(snap, facts, errMsg(e));
    }
    if (!isQuestion(step)) return step;
    const q = step.question;
    let v: unknown;
    try {
      v = gather.ask(q);
      if (v instanceof Promise) {
        const next = i + 1;
        return v.then(
          (x: unknown) => (record(answers, q, x), run(facts, policy, gather, now, answers, next, explain)),
          (e: unknown) => {
            try {
              record(answers, q, failureFor(q, errMsg(e)));
            } catch (f) {
              return stuck(policy(), facts, errMsg(f));
            }
            return run(facts, policy, gather, now, answers, next, explain);
          },
        );
      }
    } catch (e) {
      try {
        v = failureFor(q, errMsg(e));
      } catch (f) {
        return stuck(snap, facts, errMsg(f));
      }
    }
    record(answers, q, v);
  }
  return stuck(policy(), facts, 'too many questions');
}

/** Gathers and evaluates one decision (no effects committed: see commit.ts); `explain` records the layers. */
export function decide(facts: Facts, policy: () => PolicySnapshot, gather: Gatherer, now: () => number, explain = false): Evaluation | Promise<Evaluation> {
  return run(facts, policy, gather, now, {}, 0, explain);
}
