/**
 * The broker's decisions in process, for the all-in-one, where the broker and the decision
 * engine share a process: the same `/authz` request (decision-client.ts `decisionHeaders`) is
 * decided by the same `authorize` the `/authz` listener runs (facts from the same headers, the
 * same audit record, reservation and metrics), and its answer is read by the same
 * `interpretAnswer`. What it skips is the loopback hop: an HTTP request and response each way,
 * about a third of the broker's own time per completion (bench/broker.bench.ts).
 *
 * Like the HTTP client it never rejects: a decision that throws, or is not answered within
 * `timeoutMs`, is `unavailable`, which the broker refuses (fail closed). A decision that finishes
 * after that has its effects undone: the call it counted and the reservation it made; and an allow
 * it recorded in the audit chain is followed by a record saying the call was not made.
 */
import { errMsg, logger } from '../lib/log.js';
import { startDecisionSpan } from '../lib/tracing.js';
import { answerHeaders, type Committed, type Sinks } from '../control-plane/decision/commit.js';
import { authorize, type DecisionEngine } from '../control-plane/decision/engine.js';
import { asReceived, factsFromHeaders } from '../control-plane/decision/facts.js';
import { askingWithin, within } from '../control-plane/decision/gather.js';
import { isFailure, type Failure } from '../control-plane/decision/types.js';
import type { AuditEntry } from '../control-plane/types.js';
import { decisionHeaders, interpretAnswer, type DecisionClient } from './decision-client.js';

const log = logger('broker');

/**
 * The audit record that follows the allow a decision recorded (`allowed`, at `seq` in the chain)
 * when the broker had stopped waiting for it: the call was refused and the provider never called.
 * A deny of the same action by the same caller; no rule (no layer decided it: the clock did).
 */
export function abandonedRecord(allowed: AuditEntry, seq: number | undefined): AuditEntry {
  const { action, subject, actor, task, service } = allowed;
  const at = seq === undefined ? '' : ` (the allow of audit record ${seq})`;
  return { action, subject, actor, task, service, allow: false, reason: `decision answered after the broker's deadline; call not made${at}` };
}

/** The chain's seq of what an audit sink's `append` returned (the chain returns the record). */
const seqOf = (rec: unknown): number | undefined => {
  const seq = (rec as { seq?: unknown } | undefined)?.seq;
  return typeof seq === 'number' ? seq : undefined;
};

/**
 * `e` with sinks that remember how to undo what one decision commits (the call counted, the
 * tokens reserved, an allow recorded): `undo` gives the first two back and follows the allow's
 * audit record with an `abandonedRecord`, for a decision the broker stopped waiting for. Each
 * undo is idempotent, so one the commit already ran (a later deny) is harmless.
 */
function undoable(e: DecisionEngine): { engine: DecisionEngine; undo: () => void } {
  const undos: (() => void)[] = [];
  const s = e.sinks;
  const rs = s.reservations;
  const audit = s.audit;
  const durable = audit.durable;
  /** Appended last by `undo`: after the budget is given back, whatever the chain does. */
  let recorded: { entry: AuditEntry; rec: unknown } | undefined;
  const sinks: Sinks = {
    ...s,
    audit: {
      append: (entry) => {
        const rec = audit.append(entry);
        recorded = { entry, rec };
        return rec;
      },
      ...(durable ? { durable: (rec: unknown) => durable.call(audit, rec) } : {}),
    },
    budget: {
      check: (agent, budget, now) => s.budget.check(agent, budget, now),
      reserveCall: (agent, now) => {
        const release = s.budget.reserveCall(agent, now);
        undos.push(release);
        return release;
      },
    },
    reservations: rs && {
      settle: (id, agent, tokens, cost) => rs.settle(id, agent, tokens, cost),
      reserve: async (r) => {
        const a = await rs.reserve(r);
        const id = a.ok ? a.id : null;
        if (id)
          undos.push(() => void rs.settle(id, r.agent, 0, 0).catch((err: unknown) => log.error('late reservation not released', { id, err: errMsg(err) })));
        return a;
      },
    },
  };
  const undo = () => {
    undos.splice(0).forEach((u) => u());
    const r = recorded;
    recorded = undefined;
    if (r?.entry.allow) audit.append(abandonedRecord(r.entry, seqOf(r.rec)));
  };
  return { engine: { ...e, sinks }, undo };
}

export function createLocalDecisionClient(engine: DecisionEngine, o: { timeoutMs: number }): DecisionClient {
  return {
    async decide(q) {
      const { headers, rawHeaders } = asReceived(decisionHeaders(q));
      // The span the /authz listener would start, child of the broker's (decisionHeaders carries it).
      const span = startDecisionSpan('authz', headers.traceparent, headers.tracestate);
      let answer: Committed | Failure;
      try {
        const u = undoable(engine);
        // No peer address: forwarded headers are never trusted here (egress facts read none anyway).
        const decided = authorize(u.engine, factsFromHeaders(headers, { method: 'GET', path: '/', rawHeaders }), askingWithin(engine.gather, span));
        // Finished after the broker gave up (and refused the call): neither counted nor reserved.
        answer = decided instanceof Promise ? await within(decided, o.timeoutMs, 'decision', u.undo) : decided;
      } catch (e) {
        answer = { failed: `decision failed: ${errMsg(e)}` };
      }
      if (isFailure(answer)) {
        span.end({ allow: false, status: 403 });
        return { kind: 'unavailable', why: answer.failed };
      }
      const d = answer.decision;
      span.end({ rule: d.rule, allow: d.allow, status: d.status });
      return interpretAnswer(q, d.status, answerHeaders(answer), () => d.reason.slice(0, 500) || `decision engine answered ${d.status}`);
    },
  };
}
