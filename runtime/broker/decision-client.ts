/**
 * Asks the control plane's `/authz` (SPEC 4.1, egress path) whether an agent may invoke a model,
 * and in the same call reserves the completion's worst case against its budget
 * (lib/reservation-header.ts). Resolves, never rejects: 200 is the only allow, and an allow
 * without the reservation asked for is `unavailable`; 401 stays 401 (needs-approval header kept);
 * a deny whose reservation was refused is `refused`; any other 4xx is a 403 deny carrying the
 * engine's reason; a 5xx, a timeout or an unreachable engine is `unavailable`, which the broker
 * also refuses (fail closed). The request (`decisionHeaders`) and the reading of the answer
 * (`interpretAnswer`) are shared with the all-in-one's in-process client (decision-local.ts).
 */
import { request, type Dispatcher } from 'undici';
import { H } from '../lib/brand.js';
import { errMsg } from '../lib/log.js';
import { formatReserve, parseReservation, type ReserveAsk } from '../lib/reservation-header.js';
import { injectTrace } from '../lib/tracing.js';
import { within } from '../control-plane/decision/gather.js';
import { isFailure } from '../control-plane/decision/types.js';

export type DecisionResult =
  /** `reservation`: what the plane reserved (always there when the query asked for one). */
  | { kind: 'allow'; reservation?: { id: string | null; outputTokens: number } }
  | { kind: 'deny'; status: 401 | 403; reason: string; needsApproval: boolean }
  /** The call's worst case does not fit the agent's budget: nothing reserved (no `retryAfterSeconds`: it never will). */
  | { kind: 'refused'; reason: string; retryAfterSeconds?: number }
  /** `budget`: the decision engine answered, the budget ledger did not. */
  | { kind: 'unavailable'; why: string; budget?: boolean };

export interface DecisionQuery {
  actor: string;
  model: string;
  /** Client headers forwarded as-is when present (lower-case names); a header the client repeated, as its lines. */
  passthrough: Record<string, string | string[]>;
  /** Reserve the call's worst case with the decision (X-Writ-Reserve). */
  reserve?: ReserveAsk;
}

/** Client headers that carry identity or task context for the decision. */
/** Request headers the broker hands to /authz as they came; the call ticket is the proxy hop's "already counted". */
export const PASSTHROUGH_HEADERS = [H.agentVp, H.task, H.onBehalfOf, H.action, H.resource, H.callTicket, 'authorization'] as const;

const MAX_DECISION_BODY = 64 * 1024;
/** The first value of a response header undici may hand over as a list. */
export const firstHeader = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);
const SAFE_REASON = /[^\x20-\x7e]/g;

function reasonOf(status: number, body: string, headers: AnswerHeaders): string {
  try {
    const j = JSON.parse(body) as { reason?: unknown };
    if (typeof j.reason === 'string' && j.reason) return j.reason.slice(0, 500);
  } catch {}
  const hv = firstHeader(headers[H.denyReason]);
  if (hv) return hv.replace(SAFE_REASON, '?').slice(0, 500);
  return `decision engine answered ${status}`;
}

/** Response headers as the decision engine answered them (lower-case names). */
export type AnswerHeaders = Record<string, string | string[] | undefined>;

/**
 * The `/authz` request for a query: the client's passthrough headers, the broker's target, the
 * reservation ask, the trace. Names are lower-case; a header the client repeated is its list of
 * lines (undici sends one line each; in process `asReceived` joins them as node would).
 */
export function decisionHeaders(q: DecisionQuery): Record<string, string | string[]> {
  const headers = injectTrace({ ...q.passthrough, [H.actor]: q.actor, [H.service]: q.model, [H.targetKind]: 'model' });
  if (q.reserve) headers[H.reserve] = formatReserve(q.reserve);
  return headers;
}

/**
 * What an answer of the decision engine means to the broker, however it arrived (over HTTP, or
 * in process in the all-in-one): `reason()` is read only for a non-200 answer.
 */
export function interpretAnswer(q: DecisionQuery, status: number, headers: AnswerHeaders, reason: () => string): DecisionResult {
  const reservation = parseReservation(firstHeader(headers[H.reservation]), firstHeader(headers['retry-after']));
  if (status === 200) {
    if (!q.reserve) return { kind: 'allow' };
    if (reservation?.kind !== 'reserved') return { kind: 'unavailable', why: 'the decision engine allowed without the reservation asked for', budget: true };
    return { kind: 'allow', reservation: { id: reservation.id, outputTokens: reservation.outputTokens } };
  }
  const why = reason();
  if (status >= 500) return { kind: 'unavailable', why: `decision engine answered ${status}: ${why}` };
  if (q.reserve && reservation?.kind === 'refused') return { kind: 'refused', reason: why, retryAfterSeconds: reservation.retryAfterSeconds };
  if (q.reserve && reservation?.kind === 'unavailable') return { kind: 'unavailable', why, budget: true };
  if (status === 401) return { kind: 'deny', status: 401, reason: why, needsApproval: firstHeader(headers[H.needsApproval]) === 'true' };
  return { kind: 'deny', status: 403, reason: why, needsApproval: false };
}

export interface DecisionClient {
  decide(q: DecisionQuery): Promise<DecisionResult>;
}

/** How long an answer is still awaited once the broker gave up on it, to give back what it reserved. */
export const LATE_ANSWER_MS = 60_000;
/** Most answers awaited that way at once (each holds a connection): past it a request given up on is aborted. */
export const MAX_LATE_ANSWERS = 1000;

/** A late allow's reservation, for `releaseLate`. */
const lateReservation = (r: DecisionResult): string | undefined => (r.kind === 'allow' ? (r.reservation?.id ?? undefined) : undefined);

export function createDecisionClient(o: {
  url: string;
  timeoutMs: number;
  dispatcher: Dispatcher;
  /**
   * Gives back the reservation of an allow that came after the broker gave up (refused the call
   * as unavailable): the decision point reserved it all the same. An answer later than
   * LATE_ANSWER_MS is not awaited, nor one past MAX_LATE_ANSWERS already awaited: its reservation
   * expires (BUDGET_RESERVATION_TTL_MS) with its worst case charged.
   */
  releaseLate?: (q: DecisionQuery, reservation: string) => void;
}): DecisionClient {
  const u = new URL(o.url);
  const url = u.origin + u.pathname + u.search;
  const limit = o.timeoutMs + LATE_ANSWER_MS;
  let awaitingLate = 0;
  const ask = async (q: DecisionQuery, signal: AbortSignal): Promise<DecisionResult> => {
    try {
      const res = await request(url, {
        method: 'GET',
        headers: decisionHeaders(q),
        dispatcher: o.dispatcher,
        signal,
        headersTimeout: limit,
        bodyTimeout: limit,
      });
      if (res.statusCode === 200) {
        res.body.resume();
        return interpretAnswer(q, 200, res.headers, () => '');
      }
      let text = '';
      for await (const c of res.body) {
        text += (c as Buffer).toString('utf8');
        if (text.length > MAX_DECISION_BODY) break;
      }
      return interpretAnswer(q, res.statusCode, res.headers, () => reasonOf(res.statusCode, text, res.headers));
    } catch (e) {
      const code = (e as { code?: string }).code;
      const why = code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' ? `timed out after ${limit} ms` : errMsg(e) || code || 'unreachable';
      return { kind: 'unavailable', why };
    }
  };
  return {
    async decide(q) {
      // The broker waits `timeoutMs` for the answer (then refuses the call); the request goes on
      // so that a late allow's reservation is given back.
      const ac = new AbortController();
      const answer = ask(q, ac.signal);
      const r = await within(answer, o.timeoutMs, 'decision', (late) => {
        const id = lateReservation(late);
        if (id) o.releaseLate?.(q, id);
      });
      if (!isFailure(r)) return r;
      if (awaitingLate >= MAX_LATE_ANSWERS) ac.abort();
      else {
        awaitingLate++;
        void answer.finally(() => awaitingLate--);
      }
      return { kind: 'unavailable', why: r.failed };
    },
  };
}
