/**
 * The model broker (SPEC 4.7, BROKER_ADDR, default `:8080`): an OpenAI-compatible front for the
 * model providers. Agents call it with a logical model name and their name in `x-<brand>-actor`;
 * the broker asks the control plane's `/authz` (allowlist + budget, fail closed), calls the
 * provider with its own key (the only holder of that key), passes the answer back (SSE chunk by
 * chunk for `stream: true`), and posts the usage to the control plane's `/v1/usage` without
 * making the agent wait for it. Bare node:http: this sits on every model call.
 *
 * Settings (its slice): BROKER_ADDR, BROKER_CONFIG, BROKER_PROVIDER_KEY (fallback OPENAI_API_KEY), BROKER_AUTHZ_URL,
 * BROKER_USAGE_URL, BROKER_UPSTREAM_TIMEOUT_MS, BROKER_STREAM_MAX_MS, BROKER_DECISION_TIMEOUT_MS,
 * BROKER_MAX_BODY_BYTES.
 *
 * Budgets (issue 14): the broker's `/authz` call also reserves the call's worst case (the
 * request body's size in bytes bounds its prompt tokens; plus `n` times max_tokens, or the
 * model's output cap, priced from the model table; `X-Writ-Reserve`); a reservation that does
 * not fit is refused before the provider sees anything, and the usage report settles it. A
 * stream reserves what the budget still holds (at least one output token) and is cut at what it
 * reserved with a final SSE error. Every allowed completion settles exactly once, shutdown
 * included (settlement.ts).
 */
import http from 'node:http';
import { Agent } from 'undici';
import type { Config } from '../lib/config.js';
import { DEFAULTS } from '../lib/settings.js';
import { listen, listenerDeadline } from '../lib/http.js';
import { errMsg, logger } from '../lib/log.js';
import { chat, JSON_TYPE, sendError, type Deps, type Route } from './chat.js';
import { DEFAULT_CONFIG_PATH, loadConfigFile, modelTable, type BrokerConfig } from './config.js';
import { createDecisionClient, type DecisionClient } from './decision-client.js';
import { methodNotAllowed, notFound, upstreamFailed } from './openai-error.js';
import { createSettlements } from './settlement.js';
import { createUsageReporter, type UsageDelivery, type UsageReporter } from './usage-reporter.js';
import type { McpGateway } from '../mcp/gateway.js';
import { isGatewayPath } from '../mcp/resource.js';

const log = logger('broker');

/** Lets the stack start without a key; a live completion then fails with `upstream_auth_failed`. */
export const PLACEHOLDER_KEY = 'sk-placeholder-no-provider-key';

/** The slices the broker reads: its own, the credential it presents, the listener's deadline. */
export type BrokerSlices = Pick<Config, 'broker' | 'auth' | 'process'>;

export interface BrokerOptions {
  /** Its configuration (loadConfig's; `config` is the model table); default: every default. */
  settings?: BrokerSlices;
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
  /** Longest a stream may run from the provider's response headers, then it is stopped with an error event (default 600 000 ms). */
  streamMaxMs?: number;
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
  /**
   * The MCP gateway (runtime/mcp) served at `/mcp/{service}` on this listener, so one base URL
   * serves an agent its models and its tools; closed with the broker. Absent: `/mcp/` is 404.
   */
  mcp?: McpGateway;
}

export interface RunningBroker {
  port: number;
  server: http.Server;
  usage: UsageReporter;
  /**
   * Stops accepting, lets in-flight completions finish (up to `graceMs`, then cuts them), settles
   * every completion's usage (the ones cut too), then flushes and closes the usage reporter.
   */
  close(graceMs?: number): Promise<void>;
}

function sendJsonText(res: http.ServerResponse, status: number, data: string, head = false): void {
  res.writeHead(status, { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(data) });
  res.end(head ? undefined : data);
}

/** The request handler, and the completions it is still working on (a shutdown waits for them). */
function createHandler(d: Deps, active: Set<Promise<void>>, mcp: McpGateway | undefined): http.RequestListener {
  return (req, res) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const method = req.method ?? 'GET';
    if (mcp && isGatewayPath(path)) return mcp.handle(req, res, path);
    if (path === '/v1/chat/completions' || path === '/chat/completions') {
      if (method !== 'POST') {
        req.resume();
        return sendError(res, methodNotAllowed(method, path, 'POST'));
      }
      const p: Promise<void> = chat(req, res, d)
        .catch((e: unknown) => {
          log.error('completion failed', { err: errMsg(e) });
          sendError(res, upstreamFailed('internal broker error'));
        })
        .finally(() => active.delete(p));
      active.add(p);
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

/** Provider key and the variable it came from (BROKER_PROVIDER_KEY, else OPENAI_API_KEY); the key itself is never logged. */
function providerKeyOf(b: BrokerSlices['broker']): { key: string; keyVar: string; placeholder: boolean } {
  return b.providerKey ? { ...b.providerKey, placeholder: false } : { key: PLACEHOLDER_KEY, keyVar: 'BROKER_PROVIDER_KEY', placeholder: true };
}

export async function startBroker(opts: BrokerOptions = {}): Promise<RunningBroker> {
  const settings = opts.settings ?? DEFAULTS;
  const b = settings.broker;
  // Every setting is read and validated before anything opens.
  const config = opts.config ?? loadConfigFile(b.configPath ?? DEFAULT_CONFIG_PATH);
  const addr = opts.addr ?? b.addr;
  const deadline = listenerDeadline(settings.process);
  const authzUrl = opts.authzUrl ?? b.authzUrl;
  const usageUrl = opts.usageUrl ?? b.usageUrl;
  const upstreamTimeoutMs = opts.upstreamTimeoutMs ?? b.upstreamTimeoutMs;
  const streamMaxMs = opts.streamMaxMs ?? b.streamMaxMs;
  const decisionTimeoutMs = opts.decisionTimeoutMs ?? b.decisionTimeoutMs;
  const maxBodyBytes = opts.maxBodyBytes ?? b.maxBodyBytes;
  const maxResponseBytes = opts.maxResponseBytes ?? 32 * 1024 * 1024;
  for (const [n, v] of Object.entries({ upstreamTimeoutMs, streamMaxMs, decisionTimeoutMs, maxBodyBytes, maxResponseBytes })) {
    if (!(v > 0)) throw new Error(`broker: ${n} must be positive`);
  }
  for (const u of [authzUrl, usageUrl]) {
    if (!URL.canParse(u) || !/^https?:\/\//.test(u)) throw new Error(`broker: ${JSON.stringify(u)} is not an http(s) URL`);
  }
  const pk = opts.providerKey ? { key: opts.providerKey, keyVar: 'providerKey', placeholder: false } : providerKeyOf(b);

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
  const apiKey = settings.auth.apiKey;
  const usage = opts.usage ?? createUsageReporter(opts.localUsage ? { deliver: opts.localUsage } : { url: usageUrl, dispatcher: control, apiKey });
  const settlements = createSettlements(usage);
  const decision =
    opts.localDecisions?.(decisionTimeoutMs) ??
    createDecisionClient({
      url: authzUrl,
      timeoutMs: decisionTimeoutMs,
      dispatcher: control,
      // An allow that comes after the broker gave up: its reservation goes back.
      releaseLate: (q, reservation) => settlements.release(q.actor, q.model, reservation),
    });
  let closing = false;
  const deps: Deps = {
    routes,
    modelList,
    decision,
    settlements,
    upstream,
    ...pk,
    upstreamTimeoutMs,
    streamMaxMs,
    maxBodyBytes,
    maxResponseBytes,
    ready: () => !closing,
  };
  const active = new Set<Promise<void>>();
  const server = http.createServer({ keepAliveTimeout: 65_000, ...deadline }, createHandler(deps, active, opts.mcp));
  let port: number;
  try {
    port = await listen(server, addr);
  } catch (e) {
    await Promise.all([upstream.close(), control.close(), opts.mcp?.close()]);
    throw e;
  }
  if (pk.placeholder) log.warn(`no provider key: set BROKER_PROVIDER_KEY or OPENAI_API_KEY; live completions will fail with upstream_auth_failed`);
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
      // MCP exchanges (long GET streams among them) end now; their clients reconnect elsewhere.
      await opts.mcp?.close();
      // In-flight completions (streams included) get `graceMs` to finish, then their sockets go.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const force = setTimeout(() => server.closeAllConnections(), graceMs);
      await closed;
      clearTimeout(force);
      // A completion whose connection went while it waited for its decision still settles (its
      // reservation given back): the decision timeout bounds that wait.
      if (active.size) {
        let wait: NodeJS.Timeout | undefined;
        await Promise.race([Promise.allSettled(active), new Promise((r) => (wait = setTimeout(r, decisionTimeoutMs)))]);
        clearTimeout(wait);
      }
      // Then every completion still open (a stream the shutdown cut, a report not yet out) is
      // settled with what it used, before the reporter takes no more.
      const open = settlements.settleAll();
      if (open) log.info('settled completions still open at shutdown', { completions: open });
      await usage.close();
      await Promise.all([upstream.close(), control.close()]);
    },
  };
}
