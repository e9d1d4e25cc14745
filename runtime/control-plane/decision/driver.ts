/**
 * The layer driver: an evaluation is a list of named layers run in order over one context.
 * Each layer is a pure function of `(context, answers)` with one of four verdicts: pass (with what
 * it adds to the context), skip (the layer does not apply to this request; not shown), deny (the
 * decision, with its status, rule, reason and headers), or the question it needs answered first.
 * The driver applies what a layer adds, records each layer's verdict when explaining (the
 * dry-run), and stops at the first deny or question. A path (ingress, egress) is its context,
 * its layer list and its two ends (evaluate.ts); a new layer is one entry in a list and one function.
 */
import type { Decision, Rule } from '../types.js';
import { deny } from './outcome.js';
import type { Answers, Evaluation, Layer, LayerName, PolicySnapshot, Question, Step } from './types.js';

export type Verdict<C> =
  | { readonly kind: 'pass' | 'skip'; readonly adds?: Partial<C> }
  /** `adds`: what the layer established before it denied (the audit row names it); `at`: the layer shown, when not this one. */
  | { readonly kind: 'deny'; readonly decision: Decision; readonly adds?: Partial<C>; readonly at?: LayerName }
  | { readonly kind: 'ask'; readonly question: Question };

export interface PolicyLayer<C> {
  /** The name the dry-run shows for this layer's verdict. */
  readonly name: LayerName;
  readonly decide: (c: Readonly<C>, a: Answers) => Verdict<C>;
  /** Why it passed, in words, from the context with its additions; called only when explaining. */
  readonly why: (c: Readonly<C>, a: Answers) => string;
}

/** One evaluation path: its context, its layers in order, and how a deny or an allow ends it. */
export interface Path<F, C> {
  /** The context before the first layer: the facts, the snapshot, the clock and what later layers fill in. */
  readonly context: (facts: F, snap: PolicySnapshot, now: number) => C;
  readonly layers: readonly PolicyLayer<C>[];
  /** The Evaluation of a deny (the audit row, the effects of a deny). */
  readonly denied: (c: Readonly<C>, d: Decision, layers: Layer[]) => Evaluation;
  /** The Evaluation once every layer passed or skipped. */
  readonly allowed: (c: Readonly<C>, layers: Layer[]) => Evaluation;
}

const PASS = { kind: 'pass' } as const;
const SKIP = { kind: 'skip' } as const;

export const pass = <C>(adds?: Partial<C>): Verdict<C> => (adds ? { kind: 'pass', adds } : PASS);
export const skip = <C>(adds?: Partial<C>): Verdict<C> => (adds ? { kind: 'skip', adds } : SKIP);
export const ask = <C>(question: Question): Verdict<C> => ({ kind: 'ask', question });
export function refuse<C>(status: 401 | 403, rule: Rule, reason: string, o: { extra?: Partial<Decision>; adds?: Partial<C>; at?: LayerName } = {}): Verdict<C> {
  return { kind: 'deny', decision: deny(status, rule, reason, o.extra), adds: o.adds, at: o.at };
}

/** Runs `path` over `facts`: the first deny or question ends it; `explain` records every layer's verdict. */
export function drive<F, C extends object>(path: Path<F, C>, facts: F, snap: PolicySnapshot, a: Answers, now: number, explain: boolean): Step {
  const c = path.context(facts, snap, now);
  const layers: Layer[] = [];
  for (const layer of path.layers) {
    const v = layer.decide(c, a);
    if (v.kind === 'ask') return { question: v.question };
    if (v.adds) Object.assign(c, v.adds);
    if (v.kind === 'deny') {
      const d = v.decision;
      if (explain) layers.push({ layer: v.at ?? layer.name, verdict: d.needsApproval ? 'needs-approval' : 'deny', reason: d.reason });
      return path.denied(c, d, layers);
    }
    if (v.kind === 'pass' && explain) layers.push({ layer: layer.name, verdict: 'pass', reason: layer.why(c, a) });
  }
  return path.allowed(c, layers);
}
