/**
 * One chat completion through the broker, from the agent's request to the usage report: the
 * request checked, the decision asked (allowlist, budget, reservation of the worst case), the
 * provider called with the broker's key, its answer passed back (whole, or relayed event by
 * event and cut at the budget), and the usage reported after the reply. server.ts routes here.
 */
import http from 'node:http';
import type { Dispatcher } from 'undici';
import { H } from '../lib/brand.js';
import { BodyTooLarge, readBody } from '../lib/http.js';
import { errMsg, logger } from '../lib/log.js';
import type { ReserveAsk } from '../lib/reservation-header.js';
import { startDecisionSpan } from '../lib/tracing.js';
import { REGISTRY_NAME_MAX, REGISTRY_NAME_RE } from '../control-plane/types.js';
import type { ModelEntry } from './config.js';
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
  modelNotFound,
  shuttingDown,
  streamBudgetCut,
  upstreamAuth,
  upstreamFailed,
  upstreamRejected,
  upstreamTimeout,
  upstreamUnreachable,
  type OpenAIError,
} from './openai-error.js';
import { outputTokensOf, relay, sseTransform } from './sse.js';
import { costUsd, estimateUsage, promptChars, usageOf, type TokenUsage } from './usage.js';
import type { UsageReporter } from './usage-reporter.js';

const log = logger('broker');

const MAX_UPSTREAM_ERROR_BYTES = 64 * 1024;
export const JSON_TYPE = 'application/json';
/** Upstream response headers worth handing to the agent (never the provider's rate-limit state of our key). */
const PASS_RESPONSE_HEADERS = ['x-request-id', 'openai-processing-ms'];

export interface Route {
  entry: ModelEntry;
  origin: string;
  path: string;
}

export interface Deps {
  routes: ReadonlyMap<string, Route>;
  modelList: string;
  decision: DecisionClient;
  usage: UsageReporter;
  upstream: Dispatcher;
  key: string;
  keyVar: string;
  placeholder: boolean;
  upstreamTimeoutMs: number;
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

/** Reads at most `limit` bytes of an upstream body; undefined when it was longer. */
async function readUpstream(body: Dispatcher.ResponseData['body'], limit: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of body) {
    size += (c as Buffer).length;
    if (size > limit) {
      body.destroy();
      return undefined;
    }
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}

function upstreamCallError(e: unknown, timeoutMs: number): OpenAIError {
  const code = (e as { code?: string }).code ?? '';
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT') return upstreamTimeout(timeoutMs);
  return upstreamUnreachable(code || errMsg(e));
}

/** Maps a non-2xx provider answer to the broker's OpenAI-style error. */
function mapUpstreamStatus(status: number, text: string, headers: Dispatcher.ResponseData['headers'], d: Deps): OpenAIError {
  if (status === 401 || status === 403) return upstreamAuth(status, d.keyVar, d.placeholder);
  let msg = '';
  let type = '';
  let code = '';
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown; type?: unknown; code?: unknown } | string };
    const err = j.error;
    if (typeof err === 'string') msg = err;
    else if (err && typeof err === 'object') {
      if (typeof err.message === 'string') msg = err.message;
      if (typeof err.type === 'string') type = err.type;
      if (typeof err.code === 'string') code = err.code;
    }
  } catch {}
  // Never echo the provider key, even if a provider quotes it back.
  msg = (msg || text.slice(0, 300)).split(d.key).join('[redacted]').slice(0, 1000);
  if (status === 408 || status === 504) return upstreamTimeout(d.upstreamTimeoutMs);
  if (status >= 500) return upstreamFailed(`the model provider failed (${status})${msg ? `: ${msg}` : ''}`);
  const extra: Record<string, string> = {};
  const retryAfter = firstHeader(headers['retry-after']);
  if (retryAfter && /^[\w ,:.-]{1,64}$/.test(retryAfter)) extra['retry-after'] = retryAfter;
  if (status === 429)
    return upstreamRejected(
      429,
      type || 'rate_limit_error',
      code || 'rate_limit_exceeded',
      `the model provider is rate limiting: ${msg || 'too many requests'}`,
      extra,
    );
  if (status >= 400 && status < 500)
    return upstreamRejected(status, type || 'invalid_request_error', code || 'upstream_rejected', msg || `the model provider answered ${status}`, {
      'x-should-retry': 'false',
    });
  return upstreamFailed(`unexpected answer from the model provider (${status})`);
}

interface Completion {
  actor: string;
  route: Route;
  body: Record<string, unknown>;
  stream: boolean;
  clientWantsUsage: boolean;
}

/** Checks the request shape; returns the completion or the error to answer. */
function parseCompletion(raw: Buffer, actor: string, d: Deps): Completion | OpenAIError {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    return invalidRequest('request body is not valid JSON', 'invalid_json');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return invalidRequest('request body must be a JSON object');
  const b = body as Record<string, unknown>;
  if (typeof b.model !== 'string' || !b.model) return invalidRequest('`model` is required and must be a string', 'invalid_model');
  if (!Array.isArray(b.messages) || b.messages.length === 0) return invalidRequest('`messages` is required and must be a non-empty array', 'invalid_messages');
  if (b.stream !== undefined && b.stream !== null && typeof b.stream !== 'boolean') return invalidRequest('`stream` must be a boolean', 'invalid_stream');
  const so = b.stream_options;
  if (so !== undefined && so !== null && (typeof so !== 'object' || Array.isArray(so)))
    return invalidRequest('`stream_options` must be an object', 'invalid_stream_options');
  const route = d.routes.get(b.model);
  if (!route) return modelNotFound(b.model);
  const stream = b.stream === true;
  const clientWantsUsage = stream && (so as { include_usage?: unknown } | null | undefined)?.include_usage === true;
  return { actor, route, body: b, stream, clientWantsUsage };
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
  const c = parseCompletion(raw, actor, d);
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
  const wanted = outputWanted(c.body, entry.maxOutputTokens);
  // The worst case is reserved by the decision itself, once it allows: one round trip.
  const reserve: ReserveAsk = {
    promptTokens: raw.length,
    outputTokens: wanted,
    priceInputPer1k: entry.priceInputPer1k,
    priceOutputPer1k: entry.priceOutputPer1k,
    ...(c.stream ? { partial: true } : {}),
  };
  const verdict = await span.run(() => d.decision.decide({ actor, model: c.route.entry.name, passthrough, reserve }));
  span.end({
    allow: verdict.kind === 'allow',
    status: verdict.kind === 'allow' ? 200 : verdict.kind === 'deny' ? verdict.status : verdict.kind === 'refused' ? 429 : 503,
    actor,
    service: c.route.entry.name,
  });
  if (verdict.kind === 'unavailable') {
    log.warn(verdict.budget ? 'budget reservation unavailable; refusing' : 'decision unavailable; refusing', { actor, model: entry.name, why: verdict.why });
    return sendError(res, verdict.budget ? budgetUnavailable(verdict.why) : decisionUnavailable(verdict.why));
  }
  if (verdict.kind === 'deny') {
    return sendError(res, denied(verdict.status, verdict.reason, verdict.needsApproval ? { [H.needsApproval]: 'true' } : {}));
  }
  if (verdict.kind === 'refused') return sendError(res, budgetExceeded(verdict.reason, verdict.retryAfterSeconds));
  // Allowed, and the worst case reserved before the provider sees anything.
  const rsv = verdict.reservation ?? { id: null, outputTokens: wanted };
  const reservation = rsv.id ?? undefined;
  // Gives an unused reservation back (settled to nothing).
  const release = () => {
    if (reservation) d.usage.report({ agent: actor, model: entry.name, tokens: 0, costUsd: 0, reservation });
  };
  if (ac.signal.aborted) return release();

  const upstreamBody: Record<string, unknown> = { ...c.body, model: c.route.entry.model };
  if (c.stream) upstreamBody.stream_options = { ...((c.body.stream_options as object | null | undefined) ?? {}), include_usage: true };
  const payload = JSON.stringify(upstreamBody);
  const prompt = () => promptChars(c.body.messages);
  const report = (u: TokenUsage) => {
    const r = { agent: actor, model: c.route.entry.name, tokens: u.totalTokens, costUsd: costUsd(u, c.route.entry), reservation };
    // After the reply is on its way: the agent never waits for the control plane.
    setImmediate(() => d.usage.report(r));
  };

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
      body: payload,
      signal: ac.signal,
      headersTimeout: d.upstreamTimeoutMs,
      bodyTimeout: d.upstreamTimeoutMs,
    });
  } catch (e) {
    if (ac.signal.aborted) {
      // The provider may already be generating: the prompt is charged as an estimate.
      report(estimateUsage(prompt(), 0));
      return;
    }
    const err = upstreamCallError(e, d.upstreamTimeoutMs);
    log.warn('upstream call failed', { model: c.route.entry.name, code: err.code, err: errMsg(e) });
    release();
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
    log.warn('upstream answered an error', { model: c.route.entry.name, status: up.statusCode, mapped: err.status });
    release();
    return sendError(res, err);
  }

  const outHeaders: Record<string, string> = {};
  for (const h of PASS_RESPONSE_HEADERS) {
    const v = firstHeader(up.headers[h]);
    if (v && /^[\x20-\x7e]{1,256}$/.test(v)) outHeaders[h] = v;
  }

  if (c.stream && ctype.startsWith('text/event-stream')) {
    // Reserved partially (id set, allowance under the request's): the stream is cut at the allowance.
    const allowance = reservation && rsv.outputTokens < wanted ? rsv.outputTokens : undefined;
    const t = sseTransform({
      stripUsageChunk: !c.clientWantsUsage,
      maxCompletionTokens: allowance,
      cutEvent: allowance === undefined ? undefined : `data: ${JSON.stringify(streamBudgetCut(allowance))}`,
    });
    // Once the cut stream's last event is out, the provider is stopped.
    t.once('cut', () => res.once('finish', () => up.body.destroy()));
    res.writeHead(200, { ...outHeaders, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' });
    res.flushHeaders();
    relay(up.body, t, res, (err) => {
      // Cut short (either side, or at the budget): estimate what the provider did not get to report
      // (output counted as the cut counts it: at least one token per text chunk).
      const e = estimateUsage(prompt(), 0);
      const out = outputTokensOf(t.scan);
      report(t.scan.usage ?? { ...e, completionTokens: out, totalTokens: e.promptTokens + out });
      if (err && !ac.signal.aborted && !t.scan.cut) log.warn('stream cut short', { model: c.route.entry.name, err: errMsg(err) });
    });
    return;
  }

  let data: Buffer | undefined;
  try {
    data = await readUpstream(up.body, d.maxResponseBytes);
  } catch (e) {
    if (ac.signal.aborted) {
      report(estimateUsage(prompt(), 0));
      return;
    }
    report(estimateUsage(prompt(), 0));
    return sendError(res, upstreamCallError(e, d.upstreamTimeoutMs));
  }
  if (!data) {
    report(estimateUsage(prompt(), 0));
    return sendError(res, upstreamFailed(`the model provider's answer exceeds ${d.maxResponseBytes} bytes`));
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(data.toString('utf8'));
  } catch {
    report(estimateUsage(prompt(), 0));
    return sendError(res, upstreamFailed('the model provider answered with invalid JSON'));
  }
  res.writeHead(200, { ...outHeaders, 'content-type': JSON_TYPE, 'content-length': data.length });
  res.end(data);
  report(usageOf(parsed) ?? estimateUsage(prompt(), 0));
}

/** Output tokens a completion may generate: max_completion_tokens or max_tokens, at most the model's cap. */
function outputWanted(body: Record<string, unknown>, cap: number): number {
  for (const k of ['max_completion_tokens', 'max_tokens']) {
    const v = body[k];
    if (typeof v === 'number' && Number.isInteger(v) && v > 0) return Math.min(v, cap);
  }
  return cap;
}
