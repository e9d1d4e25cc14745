/**
 * The model broker (SPEC 4.7, BROKER_ADDR, default `:8080`): an OpenAI-compatible front for the
 * model providers. Agents call it with a logical model name and their name in `x-<brand>-actor`;
 * the broker asks the control plane's `/authz` (allowlist + budget, fail closed), calls the
 * provider with its own key (the only holder of that key), passes the answer back (SSE chunk by
 * chunk for `stream: true`), and posts the usage to the control plane's `/v1/usage` without
 * making the agent wait for it. Bare node:http: this sits on every model call.
 *
 * Env: BROKER_ADDR, BROKER_CONFIG, BROKER_PROVIDER_KEY (fallback OPENAI_API_KEY), BROKER_AUTHZ_URL,
 * BROKER_USAGE_URL, BROKER_UPSTREAM_TIMEOUT_MS, BROKER_DECISION_TIMEOUT_MS,
 * BROKER_MAX_BODY_BYTES.
 *
 * Budgets (issue 14): the broker's `/authz` call also reserves the call's worst case (the
 * request body's size in bytes bounds its prompt tokens; plus max_tokens, or the model's output
 * cap, priced from the model table; `X-Writ-Reserve`); a reservation that does not fit is
 * refused before the provider sees anything, and the usage report settles it. A stream reserves
 * what the budget still holds (at least one output token) and is cut there with a final SSE error.
 */
import http from 'node:http';
import { Agent, type Dispatcher } from 'undici';
import { envName, H } from '../lib/brand.js';
import { int, optional, str, type Env } from '../lib/config.js';
import { BodyTooLarge, listen, readBody } from '../lib/http.js';
import { errMsg, logger } from '../lib/log.js';
import { startDecisionSpan } from '../lib/tracing.js';
import { DEFAULT_CONFIG_PATH, loadConfigFile, modelTable, type BrokerConfig, type ModelEntry } from './config.js';
import { createDecisionClient, firstHeader, PASSTHROUGH_HEADERS, type DecisionClient } from './decision-client.js';
import type { ReserveAsk } from '../lib/reservation-header.js';
import {
  bodyTooLarge,
  budgetExceeded,
  budgetUnavailable,
  decisionUnavailable,
  denied,
  errorBody,
  invalidRequest,
  methodNotAllowed,
  missingActor,
  modelNotFound,
  notFound,
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
import { createUsageReporter, type UsageDelivery, type UsageReporter } from './usage-reporter.js';

const log = logger('broker');

/** Provider key variables, first set wins. */
export const PROVIDER_KEY_VARS = ['BROKER_PROVIDER_KEY', 'OPENAI_API_KEY'] as const;
/** Lets the stack start without a key; a live completion then fails with `upstream_auth_failed`. */
export const PLACEHOLDER_KEY = 'sk-placeholder-no-provider-key';

const ACTOR_RE = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}$/;
const MAX_UPSTREAM_ERROR_BYTES = 64 * 1024;
const JSON_TYPE = 'application/json';
/** Upstream response headers worth handing to the agent (never the provider's rate-limit state of our key). */
const PASS_RESPONSE_HEADERS = ['x-request-id', 'openai-processing-ms'];

export interface BrokerOptions {
  env?: Env;
  /** Listen address; default BROKER_ADDR or `:8080`. */
  addr?: string;
  /** Model table; default loaded from BROKER_CONFIG or the bundled models.yaml. */
  config?: BrokerConfig;
  /** The control plane's decision endpoint; default BROKER_AUTHZ_URL or http://127.0.0.1:9191/authz. */
  authzUrl?: string;
  /** The control plane's usage endpoint; default BROKER_USAGE_URL or http://127.0.0.1:8181/v1/usage. */
  usageUrl?: string;
  /** Provider key; default from BROKER_PROVIDER_KEY / OPENAI_API_KEY, else a placeholder. */
  providerKey?: string;
  /** Time to the provider's first byte, and the longest gap between chunks (default 600 000 ms). */
  upstreamTimeoutMs?: number;
  /** Time the decision engine gets (default 2000 ms). */
  decisionTimeoutMs?: number;
  /**
   * Decisions in process instead of over `authzUrl` (the all-in-one, decision-local.ts), made
   * with the decision timeout.
   */
  localDecisions?: (timeoutMs: number) => DecisionClient;
  /** Largest request body (default 4 MiB). */
  maxBodyBytes?: number;
  /** Largest non-streamed provider answer (default 32 MiB). */
  maxResponseBytes?: number;
  /**
   * Usage recorded in process instead of posted to `usageUrl` (the all-in-one, usage-local.ts),
   * through the same reporter (linger, queue, retry).
   */
  localUsage?: UsageDelivery;
  /** Usage reporter override (tests); default posts to usageUrl. */
  usage?: UsageReporter;
}

export interface RunningBroker {
  port: number;
  server: http.Server;
  usage: UsageReporter;
  /** Stops accepting, lets in-flight completions finish (up to `graceMs`), flushes usage. */
  close(graceMs?: number): Promise<void>;
}

interface Route {
  entry: ModelEntry;
  origin: string;
  path: string;
}

interface Deps {
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

function sendError(res: http.ServerResponse, e: OpenAIError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const data = JSON.stringify(errorBody(e));
  res.writeHead(e.status, { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(data), ...e.headers });
  res.end(data);
}

function sendJsonText(res: http.ServerResponse, status: number, data: string, head = false): void {
  res.writeHead(status, { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(data) });
  res.end(head ? undefined : data);
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

function createHandler(d: Deps): http.RequestListener {
  return (req, res) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const method = req.method ?? 'GET';
    if (path === '/v1/chat/completions' || path === '/chat/completions') {
      if (method !== 'POST') {
        req.resume();
        return sendError(res, methodNotAllowed(method, path, 'POST'));
      }
      void chat(req, res, d).catch((e: unknown) => {
        log.error('completion failed', { err: errMsg(e) });
        sendError(res, upstreamFailed('internal broker error'));
      });
      return;
    }
    req.resume();
    const isGet = method === 'GET' || method === 'HEAD';
    if (path === '/health/liveliness' || path === '/health/liveness') {
      return isGet ? sendJsonText(res, 200, '{"status":"ok"}', method === 'HEAD') : sendError(res, methodNotAllowed(method, path, 'GET, HEAD'));
    }
    if (path === '/health/readiness') {
      if (!isGet) return sendError(res, methodNotAllowed(method, path, 'GET, HEAD'));
      return d.ready()
        ? sendJsonText(res, 200, '{"status":"ready"}', method === 'HEAD')
        : sendJsonText(res, 503, '{"status":"shutting down"}', method === 'HEAD');
    }
    if (path === '/v1/models' || path === '/models') {
      return isGet ? sendJsonText(res, 200, d.modelList, method === 'HEAD') : sendError(res, methodNotAllowed(method, path, 'GET, HEAD'));
    }
    sendError(res, notFound(method, path));
  };
}

async function chat(req: http.IncomingMessage, res: http.ServerResponse, d: Deps): Promise<void> {
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
  if (!ACTOR_RE.test(actor)) {
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

/** Provider key and the variable it came from; the key itself is never logged. */
export function providerKeyFromEnv(env: Env): { key: string; keyVar: string; placeholder: boolean } {
  for (const v of PROVIDER_KEY_VARS) {
    const k = optional(env, v);
    if (k) return { key: k, keyVar: v, placeholder: false };
  }
  return { key: PLACEHOLDER_KEY, keyVar: PROVIDER_KEY_VARS[0], placeholder: true };
}

export async function startBroker(opts: BrokerOptions = {}): Promise<RunningBroker> {
  const env = opts.env ?? process.env;
  // Every setting is read and validated before anything opens.
  const config = opts.config ?? loadConfigFile(str(env, 'BROKER_CONFIG', DEFAULT_CONFIG_PATH));
  const addr = opts.addr ?? str(env, 'BROKER_ADDR', ':8080');
  const authzUrl = opts.authzUrl ?? str(env, 'BROKER_AUTHZ_URL', 'http://127.0.0.1:9191/authz');
  const usageUrl = opts.usageUrl ?? str(env, 'BROKER_USAGE_URL', 'http://127.0.0.1:8181/v1/usage');
  const upstreamTimeoutMs = opts.upstreamTimeoutMs ?? int(env, 'BROKER_UPSTREAM_TIMEOUT_MS', 600_000);
  const decisionTimeoutMs = opts.decisionTimeoutMs ?? int(env, 'BROKER_DECISION_TIMEOUT_MS', 2000);
  const maxBodyBytes = opts.maxBodyBytes ?? int(env, 'BROKER_MAX_BODY_BYTES', 4 * 1024 * 1024);
  const maxResponseBytes = opts.maxResponseBytes ?? 32 * 1024 * 1024;
  for (const [n, v] of Object.entries({ upstreamTimeoutMs, decisionTimeoutMs, maxBodyBytes, maxResponseBytes })) {
    if (!(v > 0)) throw new Error(`broker: ${n} must be positive`);
  }
  for (const u of [authzUrl, usageUrl]) {
    if (!URL.canParse(u) || !/^https?:\/\//.test(u)) throw new Error(`broker: ${JSON.stringify(u)} is not an http(s) URL`);
  }
  const pk = opts.providerKey ? { key: opts.providerKey, keyVar: 'providerKey', placeholder: false } : providerKeyFromEnv(env);

  const routes = new Map<string, Route>();
  for (const entry of modelTable(config).values()) {
    const u = new URL(`${entry.apiBase}/chat/completions`);
    routes.set(entry.name, { entry, origin: u.origin, path: u.pathname + u.search });
  }
  const modelList = JSON.stringify({
    object: 'list',
    data: config.models.map((m) => ({ id: m.name, object: 'model', created: 0, owned_by: m.provider })),
  });

  const upstream = new Agent({ keepAliveTimeout: 30_000, connect: { timeout: Math.min(upstreamTimeoutMs, 10_000) } });
  const control = new Agent({ keepAliveTimeout: 30_000 });
  const apiKey = optional(env, envName('API_KEY'));
  const usage = opts.usage ?? createUsageReporter(opts.localUsage ? { deliver: opts.localUsage } : { url: usageUrl, dispatcher: control, apiKey });
  const decision = opts.localDecisions?.(decisionTimeoutMs) ?? createDecisionClient({ url: authzUrl, timeoutMs: decisionTimeoutMs, dispatcher: control });
  let closing = false;
  const deps: Deps = {
    routes,
    modelList,
    decision,
    usage,
    upstream,
    ...pk,
    upstreamTimeoutMs,
    maxBodyBytes,
    maxResponseBytes,
    ready: () => !closing,
  };
  const server = http.createServer({ keepAliveTimeout: 65_000 }, createHandler(deps));
  let port: number;
  try {
    port = await listen(server, addr);
  } catch (e) {
    await Promise.all([upstream.close(), control.close()]);
    throw e;
  }
  if (pk.placeholder) log.warn(`no provider key: set ${PROVIDER_KEY_VARS.join(' or ')}; live completions will fail with upstream_auth_failed`);
  log.info('broker listening', {
    port,
    models: config.models.length,
    authzUrl: opts.localDecisions ? 'in process' : authzUrl,
    usageUrl: opts.localUsage ? 'in process' : usageUrl,
    providerKeyFrom: pk.placeholder ? 'none (placeholder)' : pk.keyVar,
  });

  return {
    port,
    server,
    usage,
    async close(graceMs = 10_000) {
      if (closing) return;
      closing = true;
      // In-flight completions (streams included) get `graceMs` to finish, then their sockets go.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const force = setTimeout(() => server.closeAllConnections(), graceMs);
      await closed;
      clearTimeout(force);
      await usage.close();
      await Promise.all([upstream.close(), control.close()]);
    },
  };
}
