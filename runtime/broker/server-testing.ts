/**
 * Test helper for the broker over real sockets (server-*.test.ts): a local OpenAI-compatible
 * upstream (node:http, both modes, one provider model per behaviour), the real control plane
 * (registry, /authz, budgets, /v1/usage) on in-memory PGlite, and a broker between them, its
 * stderr captured.
 */
import http from 'node:http';
import OpenAI from 'openai';
import { H } from '../lib/brand.js';
import { close, listen } from '../lib/http.js';
import { startControlPlane, type RunningControlPlane } from '../control-plane/server.js';
import type { IdentityPort } from '../control-plane/identity-port.js';
import type { BudgetUsage } from '../control-plane/budget/policy.js';
import type { Budget } from '../control-plane/types.js';
import { openStore, type Store } from '../store/factory.js';
import { parseConfig, type BrokerConfig } from './config.js';
import { startBroker, type BrokerOptions, type RunningBroker } from './server.js';

export const BROKER_KEY = 'sk-broker-secret-0123456789';
export const CALLER_KEY = 'sk-caller-own-key';
const USAGE = { prompt_tokens: 12, completion_tokens: 8, total_tokens: 20 };
/** thrifty's budget: one call's worst case (its request bytes + max_tokens 8), so the first fits and settles at 20. */
export const THRIFTY = Buffer.byteLength(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 })) + 8;

export interface Seen {
  auth?: string;
  body: {
    model: string;
    stream?: boolean;
    stream_options?: { include_usage?: boolean };
    messages: { content?: unknown }[];
    n?: number;
    max_tokens?: number;
    max_completion_tokens?: number;
  };
}

/** What the scripted provider (`gpt-script`, output cap SCRIPT_CAP) does, written as the last message's content by `script`. */
export interface Script {
  /** Pieces of output it generates per choice, 4 characters (one token) each; no more than max_tokens asks, unless `ignoreMax`. */
  tokens: number;
  /** Where the output goes (default `content`); `function_call` puts it in the call's arguments. */
  field?: 'content' | 'function_call' | 'refusal' | 'reasoning';
  ignoreMax?: boolean;
  /** Answers a streamed request with a whole JSON completion. */
  json?: boolean;
  /** Leaves `usage` out of a whole answer. */
  noUsage?: boolean;
  /** After its output, a stream breaks: the socket closes mid-body, it ends without [DONE], sends a malformed event, or stalls. */
  breaks?: 'reset' | 'close' | 'malformed' | 'stall';
  /** The stream sends a piece every `trickleMs` until the broker lets go. */
  trickleMs?: number;
}
export const script = (s: Script): string => JSON.stringify(s);
export const SCRIPT_CAP = 20;
/** The prompt tokens the scripted provider reports. */
export const SCRIPT_PROMPT = 10;
const PIECE = 'tok ';

/** The scripted provider's answer (see Script). */
function scripted(body: Seen['body'], res: http.ServerResponse): void {
  const sc = JSON.parse(String(body.messages.at(-1)?.content)) as Script;
  const max = body.max_completion_tokens ?? body.max_tokens;
  const k = sc.ignoreMax || max === undefined ? sc.tokens : Math.min(sc.tokens, max);
  const n = body.n ?? 1;
  const field = sc.field ?? 'content';
  const out = (text: string) => (field === 'function_call' ? { function_call: { arguments: text } } : { [field]: text });
  const usage = { prompt_tokens: SCRIPT_PROMPT, completion_tokens: k * n, total_tokens: SCRIPT_PROMPT + k * n };
  if (!body.stream || sc.json) {
    const choices = Array.from({ length: n }, (_, index) => ({ index, message: { role: 'assistant', ...out(PIECE.repeat(k)) }, finish_reason: 'stop' }));
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: body.model, choices, ...(sc.noUsage ? {} : { usage }) }));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  if (sc.trickleMs) {
    const timer = setInterval(() => res.write(chunk(out(PIECE))), sc.trickleMs);
    res.on('close', () => clearInterval(timer));
    return;
  }
  for (let i = 0; i < k && !res.destroyed; i++) for (let c = 0; c < n; c++) res.write(chunk(out(PIECE), null, c));
  if (sc.breaks === 'reset') return void res.write(': gone\n\n', () => res.socket?.destroy());
  if (sc.breaks === 'close') return void res.end();
  if (sc.breaks === 'malformed') res.write(`data: {"choices": [\n\n${chunk(out(PIECE))}`);
  if (sc.breaks === 'stall') return;
  if (body.stream_options?.include_usage) res.write(usageChunk(usage));
  res.end('data: [DONE]\n\n');
}

/** The prompt tokens the broker estimates for a request without the provider's figures: its body's bytes, one token per 4. */
export const promptEstimate = (body: object): number => Math.ceil(Buffer.byteLength(JSON.stringify(body)) / 4);

type ApiErr = InstanceType<typeof OpenAI.APIError>;
export const unexpected = (): never => {
  throw new Error('expected the call to fail');
};
export const asApiError = (x: unknown): ApiErr => x as ApiErr;

export function deferred<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
type Deferred = ReturnType<typeof deferred<void>>;

const chunk = (delta: object, finish: string | null = null, index = 0) =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'p', choices: [{ index, delta, finish_reason: finish }] })}\n\n`;
const usageChunk = (usage: object = USAGE) =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'p', choices: [], usage })}\n\n`;

/** The logical models, all on the upstream at `apiBase`; `provider-*` names choose the upstream's behaviour. */
export const brokerConfig = (apiBase: string): BrokerConfig =>
  parseConfig({
    models: [
      { name: 'gpt-mini', model: 'provider-ok', apiBase, priceInputPer1k: 1, priceOutputPer1k: 2 },
      { name: 'gpt-500', model: 'provider-500', apiBase },
      { name: 'gpt-429', model: 'provider-429', apiBase },
      { name: 'gpt-hang', model: 'provider-hang', apiBase },
      { name: 'gpt-drip', model: 'provider-drip', apiBase },
      { name: 'gpt-reset', model: 'provider-reset', apiBase },
      { name: 'gpt-badjson', model: 'provider-badjson', apiBase },
      { name: 'gpt-401', model: 'provider-401', apiBase },
      { name: 'gpt-gated', model: 'provider-gated', apiBase },
      { name: 'gpt-cut', model: 'provider-cut', apiBase },
      { name: 'forbidden', model: 'provider-ok', apiBase },
      { name: 'gpt-regulated', model: 'provider-ok', apiBase },
      { name: 'gpt-script', model: 'provider-script', apiBase, maxOutputTokens: SCRIPT_CAP },
    ],
  });

/** A running upstream, control plane and broker; the deferreds are read by the upstream per request, so a test may replace them. */
export interface BrokerHarness {
  cp: RunningControlPlane;
  broker: RunningBroker;
  /** The broker's and the upstream's base URLs. */
  base: string;
  upBase: string;
  /** An OpenAI client acting as agent bot. */
  client: OpenAI;
  /** Every request the upstream took, in order. */
  seen: Seen[];
  /** What the process wrote to stderr since the start. */
  logged: string[];
  /** The gated provider holds its second chunk until `gate` resolves. */
  gate: Deferred;
  /** The gated provider's response closed (the broker let go of it). */
  gatedClosed: Deferred;
  /** The hanging provider got a request, and its response closed. */
  hangArrived: Deferred;
  hangClosed: Deferred;
  /** An agent's usage now (bot's by default). */
  used(agent?: string): BudgetUsage;
  /** Registers agent `name` with `budget`, allowed the models `allowModels`. */
  agent(name: string, budget: Budget, allowModels: string[]): Promise<unknown>;
  /** bot's usage once every report of earlier calls has landed (they go out after each reply). */
  usedBefore(): Promise<BudgetUsage>;
  agentClient(actor: string | undefined, opts?: { baseURL?: string }): OpenAI;
  post(body: string | Buffer, headers?: Record<string, string>): Promise<Response>;
  /**
   * Another broker on the same upstream models, /authz and usage endpoint, with `over` in place
   * of those (a test's own limits or endpoints); the test closes it.
   */
  anotherBroker(over?: BrokerOptions): Promise<RunningBroker>;
  close(): Promise<void>;
}

export async function startBrokerHarness(): Promise<BrokerHarness> {
  const realWrite = process.stderr.write.bind(process.stderr);
  let store: Store | undefined;
  let cp: RunningControlPlane | undefined;
  let broker: RunningBroker | undefined;
  const t = {
    seen: [] as Seen[],
    logged: [] as string[],
    gate: deferred(),
    gatedClosed: deferred(),
    hangArrived: deferred(),
    hangClosed: deferred(),
  };
  const upstream = http.createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      const body = JSON.parse(text) as Seen['body'];
      t.seen.push({ auth: req.headers.authorization, body });
      const json = (status: number, b: unknown, h: Record<string, string> = {}) => {
        res.writeHead(status, { 'content-type': 'application/json', ...h });
        res.end(JSON.stringify(b));
      };
      const sse = () => res.writeHead(200, { 'content-type': 'text/event-stream' });
      switch (body.model) {
        case 'provider-ok':
          if (!body.stream) {
            return json(
              200,
              {
                id: 'c1',
                object: 'chat.completion',
                created: 1,
                model: body.model,
                choices: [{ index: 0, message: { role: 'assistant', content: 'hello', refusal: null }, finish_reason: 'stop', logprobs: null }],
                usage: USAGE,
              },
              { 'x-request-id': 'req-up-1', 'x-ratelimit-remaining-tokens': '999' },
            );
          }
          sse();
          res.write(chunk({ role: 'assistant', content: '' }));
          res.write(chunk({ content: 'Hel' }));
          res.write(chunk({ content: 'lo' }));
          res.write(chunk({}, 'stop'));
          if (body.stream_options?.include_usage) res.write(usageChunk());
          return res.end('data: [DONE]\n\n');
        case 'provider-gated':
          sse();
          res.on('close', () => t.gatedClosed.resolve());
          res.write(chunk({ role: 'assistant', content: 'first' }));
          void t.gate.promise.then(() => {
            res.write(chunk({ content: ' second' }, 'stop'));
            if (body.stream_options?.include_usage) res.write(usageChunk());
            res.end('data: [DONE]\n\n');
          });
          return;
        case 'provider-cut':
          sse();
          res.write(chunk({ role: 'assistant', content: 'x'.repeat(40) }));
          setImmediate(() => res.socket?.destroy());
          return;
        case 'provider-500':
          return json(500, { error: { message: 'model overloaded', type: 'server_error', code: null } });
        case 'provider-429':
          return json(429, { error: { message: 'slow down', type: 'requests', code: 'rate_limit_exceeded' } }, { 'retry-after': '7' });
        case 'provider-401':
          return json(401, {
            error: { message: `Incorrect API key provided: ${String(req.headers.authorization)}`, type: 'invalid_request_error', code: 'invalid_api_key' },
          });
        case 'provider-badjson':
          res.writeHead(200, { 'content-type': 'application/json' });
          return res.end('{"id": "c1", "choices": [');
        case 'provider-script':
          return scripted(body, res);
        case 'provider-reset':
          return req.socket.destroy();
        case 'provider-drip': {
          // Headers at once, then a byte of a JSON answer every 200 ms: never a gap of the 800 ms timeout, never done.
          res.writeHead(200, { 'content-type': 'application/json' });
          const drip = setInterval(() => res.write(' '), 200);
          res.on('close', () => {
            clearInterval(drip);
            t.hangClosed.resolve();
          });
          return;
        }
        case 'provider-hang':
          t.hangArrived.resolve();
          res.on('close', () => t.hangClosed.resolve());
          return; // never answers
        default:
          return json(404, { error: { message: `unknown model ${body.model}`, type: 'invalid_request_error', code: 'model_not_found' } });
      }
    });
  });
  const stop = async () => {
    process.stderr.write = realWrite;
    t.gate.resolve();
    await broker?.close(500);
    await cp?.close();
    await store?.close();
    if (upstream.listening) await close(upstream);
  };
  /** Stops it all; then, whichever tests ran, neither key may be in what was logged (server-refusals.test.ts asserts this as a test too). */
  const closeAll = async () => {
    await stop();
    const all = t.logged.join('');
    if (all.includes(BROKER_KEY) || all.includes(CALLER_KEY)) throw new Error('the provider key or the caller key was written to the log');
  };
  process.stderr.write = ((s: string | Uint8Array, ...rest: unknown[]) => {
    t.logged.push(String(s));
    return (realWrite as (...a: unknown[]) => boolean)(s, ...rest);
  }) as typeof process.stderr.write;
  try {
    const upPort = await listen(upstream, '127.0.0.1:0');
    const upBase = `http://127.0.0.1:${upPort}/v1`;
    store = await openStore({ backend: 'memory' });
    // An in-process identity authority answering delegation checks: task "t-ok" is approved.
    const identity: IdentityPort = {
      verifyPresentation: async () => ({ ok: false, reason: 'no VPs in this test' }),
      checkDelegation: async (q) =>
        q.task === 't-ok' && q.action === 'model:invoke'
          ? { ok: true, reason: 'ok', vcJti: 'jti-1', notAfter: Math.floor(Date.now() / 1000) + 600 }
          : { ok: false, reason: 'no approved delegation' },
    };
    const plane = await startControlPlane({ store, identity, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    cp = plane;
    const models = brokerConfig('http://x/v1').models.map((m) => m.name);
    for (const name of models)
      await plane.plane.registry.upsert({
        name,
        upstream: 'broker.default.svc:8080',
        kind: 'model',
        ...(name === 'gpt-regulated' ? { dataClass: 'regulated' as const } : {}),
      });
    await plane.plane.registry.upsert({ name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowModels: models.filter((m) => m !== 'forbidden') });
    await plane.plane.registry.upsert({
      name: 'thrifty',
      upstream: 'thrifty.agents.svc:8080',
      kind: 'agent',
      allowModels: ['gpt-mini'],
      budget: { tokensPerHour: THRIFTY },
    });
    const running = await startBroker({
      addr: '127.0.0.1:0',
      config: brokerConfig(upBase),
      authzUrl: `http://127.0.0.1:${plane.decisionPort}/authz`,
      usageUrl: `http://127.0.0.1:${plane.mgmtPort}/v1/usage`,
      providerKey: BROKER_KEY,
      upstreamTimeoutMs: 800,
      maxBodyBytes: 64 * 1024,
    });
    broker = running;
    const base = `http://127.0.0.1:${running.port}`;
    const used = (agent = 'bot') => plane.plane.budget.usage(agent, Date.now());
    const agentClient = (actor: string | undefined, opts: { baseURL?: string } = {}) =>
      new OpenAI({ apiKey: CALLER_KEY, baseURL: opts.baseURL ?? `${base}/v1`, maxRetries: 0, defaultHeaders: actor ? { [H.actor]: actor } : {} });
    return Object.assign(t, {
      cp: plane,
      broker: running,
      base,
      upBase,
      client: agentClient('bot'),
      used,
      agent: (name: string, budget: Budget, allowModels: string[]) =>
        plane.plane.registry.upsert({ name, upstream: `${name}.agents.svc:8080`, kind: 'agent', allowModels, budget }),
      usedBefore: async () => {
        await new Promise((r) => setImmediate(r));
        await running.usage.flush();
        return used();
      },
      agentClient,
      post: (body: string | Buffer, headers: Record<string, string> = { [H.actor]: 'bot' }) =>
        fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body }),
      anotherBroker: (over: BrokerOptions = {}) =>
        startBroker({
          addr: '127.0.0.1:0',
          config: brokerConfig(upBase),
          authzUrl: `http://127.0.0.1:${plane.decisionPort}/authz`,
          usageUrl: `http://127.0.0.1:${plane.mgmtPort}/v1/usage`,
          ...over,
        }),
      close: closeAll,
    });
  } catch (e) {
    await stop();
    throw e;
  }
}
