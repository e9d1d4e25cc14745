/**
 * Commits a decision's effects, in order: the budget call reservation (re-checked now: a
 * concurrent decision may have taken the last call since the usage was read), the audit record
 * (hashed synchronously; an append that fails turns the decision into a deny: no unrecorded
 * allow), its durability when the chain asks callers to wait for it, the proxy's call ticket,
 * and the metrics. The dry-run commits nothing.
 */
import { H } from '../../lib/brand.js';
import { errMsg, logger } from '../../lib/log.js';
import type { BudgetMeter } from '../budget.js';
import type { AuditEntry } from '../types.js';
import { deny } from './outcome.js';
import type { Evaluation } from './types.js';

const log = logger('decision');

/** The audit chain: hashes synchronously and returns the chained record. */
export interface AuditSink {
  append(entry: AuditEntry): unknown;
  /** When the chain promises durability per record (AUDIT_DURABILITY=sync): resolves once stored. */
  durable?(record: unknown): undefined | Promise<void>;
}

/** What the metrics need from a decision (metrics.ts implements it over prom-client). */
export interface DecisionMeter {
  observeDecision(service: string, allow: boolean, rule: string, seconds: number): void;
}

/** Mints the proxy's call ticket for the upstream leg (tickets.ts). */
export interface TicketMinter {
  mint(actor: string, upstream: string): string;
}

export interface Sinks {
  budget: Pick<BudgetMeter, 'check' | 'reserveCall'>;
  audit: AuditSink;
  meter?: DecisionMeter;
  tickets?: TicketMinter;
  now: () => number;
}

export interface Committed extends Evaluation {
  /** Proxy: the call ticket to stamp on the upstream request. */
  ticket?: string;
}

/** The same decision turned into a deny (its audit row says so). */
function denied(ev: Evaluation, reason: string): Evaluation {
  const d = deny(403, ev.decision.rule, reason);
  return {
    ...ev,
    decision: d,
    layers: [...ev.layers, { layer: ev.decision.rule, verdict: 'deny', reason }],
    effects: { audit: { ...ev.effects.audit, allow: false, reason }, serviceLabel: ev.effects.serviceLabel },
    delegation: undefined,
  };
}

function observe(ev: Evaluation, sinks: Sinks, startedAt: number): void {
  try {
    sinks.meter?.observeDecision(ev.effects.serviceLabel, ev.decision.allow, ev.decision.rule, (performance.now() - startedAt) / 1000);
  } catch (e) {
    log.warn('metrics failed', { err: errMsg(e) });
  }
}

/** Commits `ev`'s effects; synchronous unless the audit chain asks to wait for durability. */
export function commit(ev: Evaluation, sinks: Sinks, startedAt: number): Committed | Promise<Committed> {
  let out: Committed = ev;
  let release: (() => void) | undefined;
  const r = ev.effects.reserveCall;
  if (r && ev.decision.allow) {
    const now = sinks.now();
    const over = sinks.budget.check(r.agent, r.budget, now);
    if (over) out = denied(ev, over);
    else release = sinks.budget.reserveCall(r.agent, now);
  }
  let record: unknown;
  try {
    record = sinks.audit.append(out.effects.audit);
  } catch (e) {
    log.error('audit append failed; denying', { err: errMsg(e) });
    release?.();
    out = denied(out, `audit unavailable: ${errMsg(e)}`);
    observe(out, sinks, startedAt);
    return out;
  }
  const t = out.effects.ticket;
  if (t && out.decision.allow && sinks.tickets) out = { ...out, ticket: sinks.tickets.mint(t.actor, t.upstream) };
  const wait = sinks.audit.durable?.(record);
  if (!wait) {
    observe(out, sinks, startedAt);
    return out;
  }
  const done = out;
  return wait.then(
    () => (observe(done, sinks, startedAt), done),
    (e: unknown) => {
      // Recorded in memory but not stored: the answer is a deny (the chain keeps the record).
      release?.();
      const d = denied(done, `audit record not stored: ${errMsg(e)}`);
      observe(d, sinks, startedAt);
      return d as Committed;
    },
  );
}

/** The headers every answer of a decision carries (HTTP /authz and gRPC Check alike). */
export function answerHeaders(c: Committed): Record<string, string> {
  const d = c.decision;
  const headers: Record<string, string> = { ...d.headers, [H.policyVersion]: String(c.version) };
  if (d.needsApproval) headers[H.needsApproval] = 'true';
  return headers;
}
