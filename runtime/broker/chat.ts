/**
 * One chat completion through the broker, from the agent's request to the usage report: the
 * request checked (completion-request.ts), the decision asked (allowlist, budget, reservation
 * of the worst case), the provider called with the broker's key, its answer passed back (whole,
 * or relayed event by event and cut at the output reserved), and the usage settled after the
 * reply (settlement.ts). server.ts routes here.
 */
import http from 'node:http';
import type { Dispatcher } from 'undici';
import { H } from '../lib/brand.js';
import { BodyTooLarge, readBody } from '../lib/http.js';
import { errMsg, logger } from '../lib/log.js';
import type { ReserveAsk } from '../lib/reservation-header.js';
import { startDecisionSpan } from '../lib/tracing.js';
import { REGISTRY_NAME_MAX, REGISTRY_NAME_RE } from '../control-plane/types.js';
import { parseCompletion, type Completion, type Route } from './completion-request.js';
import { firstHeader, PASSTHROUGH_HEADERS, type DecisionClient } from './decision-client.js';
import {
  bodyTooLarge,
  budgetExceeded,
  budgetUnavailable,
  decisionUnavailable,
  denied,
  errorBody,
  invalidRequest,
  missingActor,
  shuttingDown,
  streamDeadline,
  upstreamFailed,
  type OpenAIError,
} from './openai-error.js';
import type { Settlement, Settlements } from './settlement.js';
import { outputTokensOf, relay, sseTransform } from './sse.js';
import { ANSWER_DEADLINE, mapUpstreamStatus, readUpstream, streamFailure, upstreamCallError } from './upstream.js';
import { completionTextChars, estimateUsage, usageOf, type TokenUsage } from './usage.js';

export type { Route } from './completion-request.js';

const log = logger('broker');

const MAX_UPSTREAM_ERROR_BYTES = 64 * 1024;
/** setTimeout's longest delay: a longer one fires at once, so a stream deadline past it is this. */
const MAX_TIMER_MS = 2 ** 31 - 1;
export const JSON_TYPE = 'application/json';
/** Upstream response headers worth handing to the agent (never the provider's rate-limit state of our key). */
const PASS_RESPONSE_HEADERS = ['x-request-id', 'openai-processing-ms'];

export interface Deps {
  routes: ReadonlyMap<string, Route>;
  modelList: string;
  decision: DecisionClient;
  settlements: Settlements;
  upstream: Dispatcher;
  key: string;
  keyVar: string;
  placeholder: boolean;
  upstreamTimeoutMs: number;
  /** Longest a relayed stream may run, from the provider's response headers. */
  streamMaxMs: number;
  maxBodyBytes: number;
  maxResponseBytes: number;
  ready: () => boolean;
}

export function sendError(res: http.ServerResponse, e: OpenAIError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const data = JSON.stringify(errorBody(e));
  res.writeHead(e.status, { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(data), ...e.headers });
  res.end(data);
}

export async function chat(req: http.IncomingMessage, res: http.ServerResponse, d: Deps): Promise<void> {
  if (!d.ready()) {
    req.resume();
    return sendError(res, shuttingDown());
  }
  const actorRaw = req.headers[H.actor];
  const actor = typeof actorRaw === 'string' ? actorRaw.trim() : '';
  if (!actor) {
    req.resume();
    return sendError(res, missingActor(H.actor));
  }
  if (actor.length > REGISTRY_NAME_MAX || !REGISTRY_NAME_RE.test(actor)) {
    req.resume();
    return sendError(res, invalidRequest(`${H.actor} must be one agent name (letters, digits and . _ : / -)`, 'invalid_actor'));
  }
  let raw: Buffer;
  try {
    raw = await readBody(req, d.maxBodyBytes);
  } catch (e) {
    if (e instanceof BodyTooLarge) {
      // Answer now and close: the rest of an oversize upload is not read.
      return sendError(res, bodyTooLarge(d.maxBodyBytes));
    }
    return; // the client went away mid-upload
  }
  // Everything about the request, the provider's body included, is settled before the decision:
  // nothing that can fail on it runs once a reservation is held.
  const c = parseCompletion(raw, actor, d.routes);
  if ('status' in c) return sendError(res, c);

  // The client hanging up aborts whatever is in flight for it.
  const ac = new AbortController();
  res.on('close', () => {
    if (!res.writableEnded) ac.abort();
  });

  const passthrough: Record<string, string | string[]> = {};
  for (const h of PASSTHROUGH_HEADERS) {
    const v = req.headers[h];
    if (typeof v !== 'string' || !v) continue;
    // node joined a repeated header with ", ": its lines go on as lines, so the decision can tell
    // a repeated scoping header (denied) from one value with a comma.
    const lines = v.includes(', ') ? req.headersDistinct[h] : undefined;
    passthrough[h] = lines && lines.length > 1 ? lines : v;
  }
  // The broker hop: its /authz call carries this span's context (decision-client injects it).
  const span = startDecisionSpan('broker', req.headers.traceparent, req.headers.tracestate);
  const entry = c.route.entry;
  // The worst case is reserved by the decision itself, once it allows: one round trip.
  const reserve: ReserveAsk = {
    promptTokens: c.requestBytes,
    outputTokens: c.outputTokens,
    priceInputPer1k: entry.priceInputPer1k,
    priceOutputPer1k: entry.priceOutputPer1k,
    ...(c.stream ? { partial: true } : {}),
  };
  const verdict = await span.run(() => d.decision.decide({ actor, model: entry.name, passthrough, reserve }));
  span.end({
    allow: verdict.kind === 'allow',
    status: verdict.kind === 'allow' ? 200 : verdict.kind === 'deny' ? verdict.status : verdict.kind === 'refused' ? 429 : 503,
    actor,
    service: entry.name,
  });
  if (verdict.kind === 'unavailable') {
    log.warn(verdict.budget ? 'budget reservation unavailable; refusing' : 'decision unavailable; refusing', { actor, model: entry.name, why: verdict.why });
    return sendError(res, verdict.budget ? budgetUnavailable(verdict.why) : decisionUnavailable(verdict.why));
  }
  if (verdict.kind === 'deny') {
    return sendError(res, denied(verdict.status, verdict.reason, verdict.needsApproval ? { [H.needsApproval]: 'true' } : {}));
  }
  if (verdict.kind === 'refused') return sendError(res, budgetExceeded(verdict.reason, verdict.retryAfterSeconds));
  // Allowed, and the worst case reserved before the provider sees anything. From here the
  // completion settles exactly once, whatever happens: a throw too gives the reservation back
  // (or charges what the provider may have used; settlement.ts), and server.ts answers it with a 502.
  const rsv = verdict.reservation ?? { id: null, outputTokens: c.outputTokens };
  return d.settlements.run(actor, entry, rsv.id ?? undefined, (s) => forward(c, rsv, s, ac.signal, res, d));
}

/** Calls the provider and hands its answer back; settles `s` on every path. */
async function forward(
  c: Completion,
  rsv: { id: string | null; outputTokens: number },
  s: Settlement,
  signal: AbortSignal,
  res: http.ServerResponse,
  d: Deps,
): Promise<void> {
  if (signal.aborted) return s.settle(undefined);
  const entry = c.route.entry;
  // The provider may be generating once the request is out: at least the prompt is charged.
  const prompt = estimateUsage(c.requestBytes, 0);
  s.fallback = () => prompt;
  const sentAt = performance.now();
  let up: Dispatcher.ResponseData;
  try {
    up = await d.upstream.request({
      origin: c.route.origin,
      path: c.route.path,
      method: 'POST',
      headers: {
        'content-type': JSON_TYPE,
        accept: c.stream ? 'text/event-stream' : JSON_TYPE,
        authorization: `Bearer ${d.key}`,
      },
      body: c.payload,
      signal,
      headersTimeout: d.upstreamTimeoutMs,
      bodyTimeout: d.upstreamTimeoutMs,
    });
  } catch (e) {
    if (signal.aborted) return s.settle(prompt);
    const err = upstreamCallError(e, d.upstreamTimeoutMs);
    log.warn('upstream call failed', { model: entry.name, code: err.code, err: errMsg(e) });
    s.settle(undefined);
    return sendError(res, err);
  }

  const ctype = firstHeader(up.headers['content-type']) ?? '';
  if (up.statusCode < 200 || up.statusCode >= 300) {
    let text = '';
    try {
      const b = await readUpstream(up.body, MAX_UPSTREAM_ERROR_BYTES);
      text = b ? b.toString('utf8') : '';
    } catch {}
    const err = mapUpstreamStatus(up.statusCode, text, up.headers, d);
    log.warn('upstream answered an error', { model: entry.name, status: up.statusCode, mapped: err.status });
    s.settle(undefined);
    return sendError(res, err);
  }

  const outHeaders: Record<string, string> = {};
  for (const h of PASS_RESPONSE_HEADERS) {
    const v = firstHeader(up.headers[h]);
    if (v && /^[\x20-\x7e]{1,256}$/.test(v)) outHeaders[h] = v;
  }

  if (c.stream && ctype.startsWith('text/event-stream')) return relayStream(c, rsv, s, prompt, up, outHeaders, signal, res, d);

  let data: Buffer | undefined;
  // The whole answer within the upstream timeout from the call: the gap timeout alone would let
  // a provider dripping bytes hold the call, and its reservation, open for ever.
  const body = up.body;
  const deadline = setTimeout(
    () => body.destroy(Object.assign(new Error('the answer was not complete within the upstream timeout'), { code: ANSWER_DEADLINE })),
    Math.max(0, d.upstreamTimeoutMs - (performance.now() - sentAt)),
  );
  try {
    data = await readUpstream(body, d.maxResponseBytes);
  } catch (e) {
    s.settle(prompt);
    if (signal.aborted) return;
    return sendError(res, upstreamCallError(e, d.upstreamTimeoutMs));
  } finally {
    clearTimeout(deadline);
  }
  if (!data) {
    s.settle(prompt);
    return sendError(res, upstreamFailed(`the model provider's answer exceeds ${d.maxResponseBytes} bytes`));
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(data.toString('utf8'));
  } catch {}
  // The provider's figures, else an estimate from the request and every choice's generated text.
  const used = parsed === undefined ? prompt : (usageOf(parsed) ?? estimateUsage(c.requestBytes, completionTextChars(parsed)));
  s.settle(used);
  if (c.stream) {
    // Not an event stream: nothing the broker can relay, count as it goes and cut at the allowance.
    log.warn('upstream answered a stream with a whole body', { model: entry.name, contentType: ctype.slice(0, 100) });
    return sendError(res, upstreamFailed(`the model provider answered a streamed request with ${JSON.stringify(ctype.slice(0, 100))}, not an event stream`));
  }
  if (parsed === undefined) return sendError(res, upstreamFailed('the model provider answered with invalid JSON'));
  res.writeHead(200, { ...outHeaders, 'content-type': JSON_TYPE, 'content-length': data.length });
  res.end(data);
}

/**
 * Relays a provider's event stream, counting its output as it flows. With a reservation the
 * stream is cut at the output it holds, whatever the provider does with max_tokens: the chunk
 * that would pass it is replaced by a final `budget_exceeded` error event. A provider stream that
 * breaks off, stalls past the gap timeout, sends a malformed event or ends without `[DONE]` ends
 * the client's the same way, with an `upstream_error` / `upstream_timeout` event, and so does the
 * broker at `streamMaxMs` (`stream_timeout`).
 */
function relayStream(
  c: Completion,
  rsv: { id: string | null; outputTokens: number },
  s: Settlement,
  prompt: TokenUsage,
  up: Dispatcher.ResponseData,
  outHeaders: Record<string, string>,
  signal: AbortSignal,
  res: http.ServerResponse,
  d: Deps,
): void {
  const t = sseTransform({ stripUsageChunk: !c.clientWantsUsage, maxCompletionTokens: rsv.id ? rsv.outputTokens : undefined });
  // Cut short (either side, at the budget, at a failure, at shutdown): the provider's figures when
  // it got to send them, else an estimate (output counted as the cut counts it: at least a token
  // per chunk).
  const used = (): TokenUsage => {
    const out = outputTokensOf(t.scan);
    return t.scan.usage ?? { ...prompt, completionTokens: out, totalTokens: prompt.promptTokens + out };
  };
  s.fallback = used;
  // Once the cut stream's last event is out, the provider is stopped.
  t.once('cut', () => res.once('finish', () => up.body.destroy()));
  const deadline = setTimeout(() => t.fail(streamDeadline(d.streamMaxMs)), Math.min(d.streamMaxMs, MAX_TIMER_MS));
  res.writeHead(200, { ...outHeaders, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' });
  res.flushHeaders();
  relay(
    up.body,
    t,
    res,
    (e) => streamFailure(e, d.upstreamTimeoutMs),
    (err) => {
      clearTimeout(deadline);
      s.settle(used());
      const model = c.route.entry.name;
      if (t.scan.failure) log.warn('stream stopped', { model, why: t.scan.failure });
      else if (err && !signal.aborted && !t.scan.cut) log.warn('stream cut short', { model, err: errMsg(err) });
    },
  );
}
