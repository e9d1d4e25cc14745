/**
 * The broker over real sockets: the official `openai` client -> broker -> a local
 * OpenAI-compatible upstream (node:http, both modes), with the real control plane (registry,
 * /authz, budgets, /v1/usage) on in-memory PGlite deciding and receiving usage.
 */
import http from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { close, listen } from '../lib/http.js';
import { startControlPlane, type RunningControlPlane } from '../control-plane/server.js';
import type { IdentityPort } from '../control-plane/identity-port.js';
import { openStore, type Store } from '../store/factory.js';
import { parseConfig, type BrokerConfig } from './config.js';
import { startBroker, type RunningBroker } from './server.js';
import { eventually } from '../lib/poll-testing.js';

const BROKER_KEY = 'sk-broker-secret-0123456789';
const CALLER_KEY = 'sk-caller-own-key';
const USAGE = { prompt_tokens: 12, completion_tokens: 8, total_tokens: 20 };
/** thrifty's budget: one call's worst case (its request bytes + max_tokens 8), so the first fits and settles at 20. */
const THRIFTY = Buffer.byteLength(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 })) + 8;

interface Seen {
  auth?: string;
  body: { model: string; stream?: boolean; stream_options?: { include_usage?: boolean }; messages: unknown[] };
}

/** Settles when `f` returns true, polling the (asynchronously fed) control plane. */
type ApiErr = InstanceType<typeof OpenAI.APIError>;
const unexpected = (): never => {
  throw new Error('expected the call to fail');
};
const asApiError = (x: unknown): ApiErr => x as ApiErr;

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

const chunk = (delta: object, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'p', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const usageChunk = () => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'p', choices: [], usage: USAGE })}\n\n`;

describe('model broker', () => {
  let store: Store;
  let cp: RunningControlPlane;
  let upstream: http.Server;
  let broker: RunningBroker;
  let base: string;
  let upBase: string;
  let client: OpenAI;
  const seen: Seen[] = [];
  let gate = deferred();
  let hangArrived = deferred();
  let hangClosed = deferred();
  /** The gated provider's response closed (the broker let go of it). */
  let gatedClosed = deferred();
  const logged: string[] = [];
  const realWrite = process.stderr.write.bind(process.stderr);

  const config = (apiBase: string): BrokerConfig =>
    parseConfig({
      models: [
        { name: 'gpt-mini', model: 'provider-ok', apiBase, priceInputPer1k: 1, priceOutputPer1k: 2 },
        { name: 'gpt-500', model: 'provider-500', apiBase },
        { name: 'gpt-429', model: 'provider-429', apiBase },
        { name: 'gpt-hang', model: 'provider-hang', apiBase },
        { name: 'gpt-reset', model: 'provider-reset', apiBase },
        { name: 'gpt-badjson', model: 'provider-badjson', apiBase },
        { name: 'gpt-401', model: 'provider-401', apiBase },
        { name: 'gpt-gated', model: 'provider-gated', apiBase },
        { name: 'gpt-cut', model: 'provider-cut', apiBase },
        { name: 'forbidden', model: 'provider-ok', apiBase },
        { name: 'gpt-regulated', model: 'provider-ok', apiBase },
      ],
    });
  const used = () => cp.plane.budget.usage('bot', Date.now());
  /** bot's usage once every report of earlier calls has landed (they go out after each reply). */
  const usedBefore = async () => {
    await new Promise((r) => setImmediate(r));
    await broker.usage.flush();
    return used();
  };
  const agentClient = (actor: string | undefined, opts: { baseURL?: string } = {}) =>
    new OpenAI({ apiKey: CALLER_KEY, baseURL: opts.baseURL ?? `${base}/v1`, maxRetries: 0, defaultHeaders: actor ? { [H.actor]: actor } : {} });
  const post = (body: string | Buffer, headers: Record<string, string> = { [H.actor]: 'bot' }) =>
    fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });

  beforeAll(async () => {
    process.stderr.write = ((s: string | Uint8Array, ...rest: unknown[]) => {
      logged.push(String(s));
      return (realWrite as (...a: unknown[]) => boolean)(s, ...rest);
    }) as typeof process.stderr.write;
    upstream = http.createServer((req, res) => {
      let text = '';
      req.on('data', (c: Buffer) => (text += c.toString()));
      req.on('end', () => {
        const body = JSON.parse(text) as Seen['body'];
        seen.push({ auth: req.headers.authorization, body });
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
            res.on('close', () => gatedClosed.resolve());
            res.write(chunk({ role: 'assistant', content: 'first' }));
            void gate.promise.then(() => {
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
          case 'provider-reset':
            return req.socket.destroy();
          case 'provider-hang':
            hangArrived.resolve();
            res.on('close', () => hangClosed.resolve());
            return; // never answers
          default:
            return json(404, { error: { message: `unknown model ${body.model}`, type: 'invalid_request_error', code: 'model_not_found' } });
        }
      });
    });
    const upPort = await listen(upstream, '127.0.0.1:0');
    upBase = `http://127.0.0.1:${upPort}/v1`;
    store = await openStore({ backend: 'memory' });
    // An in-process identity authority answering delegation checks: task "t-ok" is approved.
    const identity: IdentityPort = {
      verifyPresentation: async () => ({ ok: false, reason: 'no VPs in this test' }),
      checkDelegation: async (q) =>
        q.task === 't-ok' && q.action === 'model:invoke'
          ? { ok: true, reason: 'ok', vcJti: 'jti-1', notAfter: Math.floor(Date.now() / 1000) + 600 }
          : { ok: false, reason: 'no approved delegation' },
    };
    cp = await startControlPlane({ store, env: {}, identity, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    const models = config('http://x/v1').models.map((m) => m.name);
    for (const name of models)
      await cp.plane.registry.upsert({
        name,
        upstream: 'broker.default.svc:8080',
        kind: 'model',
        ...(name === 'gpt-regulated' ? { dataClass: 'regulated' as const } : {}),
      });
    await cp.plane.registry.upsert({ name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowModels: models.filter((m) => m !== 'forbidden') });
    await cp.plane.registry.upsert({
      name: 'thrifty',
      upstream: 'thrifty.agents.svc:8080',
      kind: 'agent',
      allowModels: ['gpt-mini'],
      budget: { tokensPerHour: THRIFTY },
    });
    broker = await startBroker({
      env: {},
      addr: '127.0.0.1:0',
      config: config(upBase),
      authzUrl: `http://127.0.0.1:${cp.decisionPort}/authz`,
      usageUrl: `http://127.0.0.1:${cp.mgmtPort}/v1/usage`,
      providerKey: BROKER_KEY,
      upstreamTimeoutMs: 800,
      maxBodyBytes: 64 * 1024,
    });
    base = `http://127.0.0.1:${broker.port}`;
    client = agentClient('bot');
  });

  afterAll(async () => {
    process.stderr.write = realWrite;
    gate.resolve();
    await broker?.close(500);
    await cp?.close();
    await store?.close();
    if (upstream) await close(upstream);
  });

  it('completes (non-streaming) with the broker key, maps the model, and lands usage and cost', async () => {
    const before = await usedBefore();
    const n = seen.length;
    const r = await client.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    expect(r.data.choices[0]?.message.content).toBe('hello');
    expect(r.data.usage?.total_tokens).toBe(20);
    expect(r.response.headers.get('x-request-id')).toBe('req-up-1');
    expect(r.response.headers.get('x-ratelimit-remaining-tokens')).toBeNull();
    expect(seen[n]?.auth).toBe(`Bearer ${BROKER_KEY}`);
    expect(seen[n]?.body.model).toBe('provider-ok');
    expect(seen[n]?.body.stream_options).toBeUndefined();
    await eventually(() => used().tokensLastHour === before.tokensLastHour + 20, 'usage to land');
    // 12 prompt tokens at 1 USD/1k + 8 completion tokens at 2 USD/1k
    expect(used().costUsdLastDay - before.costUsdLastDay).toBeCloseTo(0.028, 9);
    const audit = (await (await fetch(`http://127.0.0.1:${cp.mgmtPort}/v1/audit?limit=5`)).json()) as {
      action: string;
      actor?: string;
      service?: string;
      allow: boolean;
    }[];
    expect(audit.some((a) => a.action === 'model.invoke' && a.actor === 'bot' && a.service === 'gpt-mini' && a.allow)).toBe(true);
  });

  it('streams, strips the usage chunk the client did not ask for, and still lands usage', async () => {
    const before = await usedBefore();
    const n = seen.length;
    const stream = await client.chat.completions.create({ model: 'gpt-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    let text = '';
    let usageChunks = 0;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? '';
      if (c.usage) usageChunks++;
    }
    expect(text).toBe('Hello');
    expect(usageChunks).toBe(0);
    expect(seen[n]?.body.stream_options?.include_usage).toBe(true);
    expect(seen[n]?.auth).toBe(`Bearer ${BROKER_KEY}`);
    await eventually(() => used().tokensLastHour === before.tokensLastHour + 20, 'stream usage to land');
  });

  it('passes the usage chunk through when the client asked for it', async () => {
    const stream = await client.chat.completions.create({
      model: 'gpt-mini',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'hi' }],
    });
    const usages: number[] = [];
    for await (const c of stream) if (c.usage) usages.push(c.usage.total_tokens);
    expect(usages).toEqual([20]);
  });

  it('forwards each chunk as the upstream sends it (the client reads chunk 1 before chunk 2 exists)', async () => {
    gate = deferred();
    const stream = await client.chat.completions.create({ model: 'gpt-gated', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const parts: string[] = [];
    for await (const c of stream) {
      parts.push(c.choices[0]?.delta.content ?? '');
      if (parts.length === 1) gate.resolve(); // the upstream holds chunk 2 until the client has chunk 1
    }
    expect(parts.join('')).toBe('first second');
  });

  it('stops the provider when the client leaves a stream midway, and charges what went by', async () => {
    gate = deferred();
    gatedClosed = deferred();
    const before = await usedBefore();
    const stream = await client.chat.completions.create({ model: 'gpt-gated', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    // The client reads the first chunk and leaves (the SDK aborts its request); chunk 2 never comes.
    for await (const c of stream) {
      expect(c.choices[0]?.delta.content).toBe('first');
      break;
    }
    await gatedClosed.promise;
    // 'hi' -> 1 prompt token, 'first' -> at least 1 completion token, as estimated.
    await eventually(() => used().tokensLastHour >= before.tokensLastHour + 2, 'the cut stream charged as estimated');
    gate.resolve();
  });

  it('lists the logical models', async () => {
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toContain('gpt-mini');
    expect(ids).not.toContain('provider-ok');
  });

  it('denies a model outside the allowlist with a 403 OpenAI error, before any upstream call', async () => {
    const n = seen.length;
    const e = await client.chat.completions.create({ model: 'forbidden', messages: [{ role: 'user', content: 'hi' }] }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(OpenAI.PermissionDeniedError);
    const err = e as InstanceType<typeof OpenAI.PermissionDeniedError>;
    expect(err.status).toBe(403);
    expect(err.code).toBe('permission_denied');
    expect(err.message).toMatch(/forbidden is not in bot\.allowModels/);
    expect(seen.length).toBe(n);
  });

  it('a scoping header the agent sent twice reaches the decision as two lines: 403, the provider never called', async () => {
    const n = seen.length;
    const reply = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(
        `${base}/v1/chat/completions`,
        // Array values go out as one header line each, as an agent sending the header twice would.
        { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${CALLER_KEY}`, [H.actor]: 'bot', [H.task]: ['t-1', 't-2'] } },
        (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }] }));
    });
    expect(reply.status).toBe(403);
    expect(JSON.parse(reply.body)).toMatchObject({ error: { message: expect.stringMatching(/x-writ-task sent more than once/) } });
    expect(seen.length).toBe(n);
    // One line with a comma in it is a task like any other.
    const ok = await client.chat.completions.create(
      { model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }] },
      { headers: { [H.task]: 't-1, part 2' } },
    );
    expect(ok.choices[0]?.message.content).toBe('hello');
  });

  it('passes task headers to the decision: regulated model needs an approved delegation (401 + needs-approval)', async () => {
    const ask = (headers: Record<string, string>) =>
      client.chat.completions.create({ model: 'gpt-regulated', messages: [{ role: 'user', content: 'hi' }] }, { headers }).then(unexpected, asApiError);
    const before = await usedBefore();
    const noTask = await ask({});
    expect(noTask.status).toBe(403);
    expect(noTask.message).toMatch(/needs task, action and resource/);
    const pending = await ask({ [H.task]: 't-none', [H.action]: 'model:invoke', [H.resource]: 'chat' });
    expect(pending.status).toBe(401);
    expect(pending.headers?.get(H.needsApproval)).toBe('true');
    expect(pending.message).toMatch(/needs approval/);
    const ok = await client.chat.completions.create(
      { model: 'gpt-regulated', messages: [{ role: 'user', content: 'hi' }] },
      { headers: { [H.task]: 't-ok', [H.action]: 'model:invoke', [H.resource]: 'chat' } },
    );
    expect(ok.choices[0]?.message.content).toBe('hello');
    await eventually(() => used().tokensLastHour === before.tokensLastHour + 20, 'regulated usage');
  });

  it('denies once the budget is spent (after the usage lands)', async () => {
    const thrifty = agentClient('thrifty');
    const r = await thrifty.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 });
    expect(r.usage?.total_tokens).toBe(20);
    await eventually(() => cp.plane.budget.usage('thrifty', Date.now()).tokensLastHour === 20, 'thrifty usage settled');
    // 20 used: the next call's worst case no longer fits; refused before the provider.
    const n = seen.length;
    const e = await thrifty.chat.completions
      .create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'again' }], max_tokens: 8 })
      .catch((x: unknown) => x);
    expect(e).toBeInstanceOf(OpenAI.RateLimitError);
    expect((e as InstanceType<typeof OpenAI.APIError>).code).toBe('budget_exceeded');
    expect((e as Error).message).toMatch(
      new RegExp(`tokensPerHour budget of agent thrifty: this call needs up to \\d+ of ${THRIFTY} tokens per hour and 20 are used or reserved`),
    );
    expect(seen.length).toBe(n);
  });

  it('requires the actor header and a known model', async () => {
    const e1 = await agentClient(undefined)
      .chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }] })
      .catch((x: unknown) => x);
    expect(e1).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((e1 as InstanceType<typeof OpenAI.APIError>).code).toBe('missing_actor');
    const e2 = await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }).catch((x: unknown) => x);
    expect(e2).toBeInstanceOf(OpenAI.NotFoundError);
    expect((e2 as InstanceType<typeof OpenAI.APIError>).code).toBe('model_not_found');
    const r = await post(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'x' }] }), { [H.actor]: 'a,b' });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe('invalid_actor');
  });

  it('maps upstream 500 to 502, 429 to 429 with retry-after, 401 to a broker-key error, bad JSON to 502', async () => {
    const call = (model: string) => client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] }).then(unexpected, asApiError);
    const e500 = await call('gpt-500');
    expect(e500.status).toBe(502);
    expect(e500.code).toBe('upstream_error');
    expect(e500.message).toMatch(/model overloaded/);
    const e429 = await call('gpt-429');
    expect(e429).toBeInstanceOf(OpenAI.RateLimitError);
    expect(e429.headers?.get('retry-after')).toBe('7');
    const e401 = await call('gpt-401');
    expect(e401.status).toBe(502);
    expect(e401.code).toBe('upstream_auth_failed');
    expect(e401.message).not.toContain(BROKER_KEY);
    const bad = await call('gpt-badjson');
    expect(bad.status).toBe(502);
    expect(bad.message).toMatch(/invalid JSON/);
  });

  it('maps a reset connection to 502 and a hung upstream to 504', async () => {
    const reset = await client.chat.completions.create({ model: 'gpt-reset', messages: [{ role: 'user', content: 'hi' }] }).then(unexpected, asApiError);
    expect(reset.status).toBe(502);
    expect(reset.code).toBe('upstream_unreachable');
    hangArrived = deferred();
    hangClosed = deferred();
    const hung = await client.chat.completions.create({ model: 'gpt-hang', messages: [{ role: 'user', content: 'hi' }] }).then(unexpected, asApiError);
    expect(hung.status).toBe(504);
    expect(hung.code).toBe('upstream_timeout');
    await hangClosed.promise; // the broker let go of the upstream call
  });

  it('aborts the upstream call when the client goes away', async () => {
    hangArrived = deferred();
    hangClosed = deferred();
    const before = await usedBefore();
    const ac = new AbortController();
    const p = client.chat.completions
      .create({ model: 'gpt-hang', messages: [{ role: 'user', content: 'hi' }] }, { signal: ac.signal })
      .catch((x: unknown) => x);
    await hangArrived.promise;
    ac.abort();
    expect(await p).toBeInstanceOf(OpenAI.APIUserAbortError);
    await hangClosed.promise;
    // The provider may have started: the prompt ('hi' -> 1 token) is charged as an estimate.
    await eventually(() => used().tokensLastHour === before.tokensLastHour + 1, 'prompt estimate');
  });

  it('charges an estimate when the upstream stream is cut short', async () => {
    const before = await usedBefore();
    const stream = await client.chat.completions.create({ model: 'gpt-cut', stream: true, messages: [{ role: 'user', content: 'abcdefgh' }] });
    const e = await (async () => {
      for await (const _c of stream) void _c;
    })().catch((x: unknown) => x);
    expect(e).toBeInstanceOf(Error);
    // 8 prompt chars -> 2 tokens, 40 completion chars -> 10 tokens
    await eventually(() => used().tokensLastHour === before.tokensLastHour + 12, `estimated usage (have ${used().tokensLastHour - before.tokensLastHour})`);
  });

  it('rejects bad JSON, bad shapes and oversize bodies with OpenAI-style errors', async () => {
    const bad = await post('{"model": ');
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({
      error: { message: 'request body is not valid JSON', type: 'invalid_request_error', param: null, code: 'invalid_json' },
    });
    expect((await post('[1,2]')).status).toBe(400);
    const noMsgs = await post(JSON.stringify({ model: 'gpt-mini' }));
    expect(((await noMsgs.json()) as { error: { code: string } }).error.code).toBe('invalid_messages');
    expect((await post(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'x' }], stream: 'yes' }))).status).toBe(400);
    const big = await post(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'x'.repeat(70_000) }] }));
    expect(big.status).toBe(413);
    expect(((await big.json()) as { error: { code: string } }).error.code).toBe('request_too_large');
  });

  it('answers probes, 404 and 405 in OpenAI shape', async () => {
    expect((await fetch(`${base}/health/liveliness`)).status).toBe(200);
    expect((await fetch(`${base}/health/readiness`)).status).toBe(200);
    const nf = await fetch(`${base}/v1/embeddings`, { method: 'POST', body: '{}' });
    expect(nf.status).toBe(404);
    expect(((await nf.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
    const na = await fetch(`${base}/v1/chat/completions`);
    expect(na.status).toBe(405);
    expect(na.headers.get('allow')).toBe('POST');
  });

  it('refuses (503) when the decision engine is unreachable, and with a placeholder key names the variable', async () => {
    // Refused: port 1 is privileged and below the ephemeral range, so unlike a port freed after
    // listen(0) no other test's server can be handed it (proxy.test.ts saw that race in CI).
    const deadPort = 1;
    const b2 = await startBroker({
      env: {},
      addr: '127.0.0.1:0',
      config: config(upBase),
      authzUrl: `http://127.0.0.1:${deadPort}/authz`,
      usageUrl: `http://127.0.0.1:${cp.mgmtPort}/v1/usage`,
      decisionTimeoutMs: 500,
    });
    const b3 = await startBroker({
      env: {},
      addr: '127.0.0.1:0',
      config: config(upBase),
      authzUrl: `http://127.0.0.1:${cp.decisionPort}/authz`,
      usageUrl: `http://127.0.0.1:${cp.mgmtPort}/v1/usage`,
    });
    try {
      const n = seen.length;
      const e = await agentClient('bot', { baseURL: `http://127.0.0.1:${b2.port}/v1` })
        .chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }] })
        .then(unexpected, asApiError);
      expect(e.status).toBe(503);
      expect(e.code).toBe('decision_unavailable');
      expect(seen.length).toBe(n);
      const p = await agentClient('bot', { baseURL: `http://127.0.0.1:${b3.port}/v1` })
        .chat.completions.create({ model: 'gpt-401', messages: [{ role: 'user', content: 'hi' }] })
        .then(unexpected, asApiError);
      expect(p.status).toBe(502);
      expect(p.message).toMatch(/no key is configured, set BROKER_PROVIDER_KEY/);
    } finally {
      await b2.close(100);
      await b3.close(100);
    }
  });

  it('never writes the provider key or the caller key to the log', () => {
    expect(logged.length).toBeGreaterThan(0);
    expect(logged.join('')).not.toContain(BROKER_KEY);
    expect(logged.join('')).not.toContain(CALLER_KEY);
  });
});
