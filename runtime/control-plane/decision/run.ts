/**
 * One evaluation's bookkeeping: the layers passed so far and the constructors of its end
 * (a finished Evaluation or the next Question). Pure; shared by the ingress and egress paths.
 */
import type { AuditAction, AuditEntry, Decision, Rule } from '../types.js';
import { allow, auditOf, deny, UNKNOWN_LABEL } from './outcome.js';
import type { Effects, Evaluation, Layer, PolicySnapshot, Question } from './types.js';

/** Header values a listener can send: no control characters (a client-sent value never reaches an upstream unvetted). */
export const HEADER_SAFE = /^[\t\x20-\x7e\x80-\xff]*$/;

export class Run {
  readonly layers: Layer[] = [];
  /** The layer being evaluated: a deny is that layer's verdict. */
  stage: Layer['layer'] = 'identity';
  /** `explain`: record every layer's verdict (the dry-run); live decisions record none. */
  constructor(
    readonly snap: PolicySnapshot,
    readonly explain = false,
  ) {}

  /** Records the current layer as passed (when explaining) and moves on to `next`. */
  pass(reason: string, next?: Layer['layer']): void {
    if (this.explain) this.layers.push({ layer: this.stage, verdict: 'pass', reason });
    if (next) this.stage = next;
  }

  ask(question: Question): { question: Question } {
    return { question };
  }

  /** Ends the evaluation with `d`; `who` names the audit row's parties, `extra` the other effects. */
  end(
    d: Decision,
    action: AuditAction,
    who: Pick<AuditEntry, 'subject' | 'actor' | 'task' | 'service'>,
    label: string | undefined,
    extra: Partial<Omit<Effects, 'audit' | 'serviceLabel'>> = {},
    out: Partial<Evaluation> = {},
  ): Evaluation {
    if (!d.allow && this.explain) this.layers.push({ layer: this.stage, verdict: d.needsApproval ? 'needs-approval' : 'deny', reason: d.reason });
    const effects: Effects = { audit: auditOf(action, d, who), serviceLabel: label ?? UNKNOWN_LABEL };
    if (d.allow) Object.assign(effects, extra);
    return { decision: d, layers: this.layers, effects, version: this.snap.version, ...out };
  }

  deny(status: 401 | 403, rule: Rule, reason: string, extra: Partial<Decision> = {}): Decision {
    return deny(status, rule, reason, extra);
  }

  allow(rule: Rule, reason: string, headers: Record<string, string>): Decision {
    return allow(rule, reason, headers);
  }
}
