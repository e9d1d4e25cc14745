/**
 * The broker over real sockets (server-testing.ts): the official `openai` client -> broker -> a
 * local OpenAI-compatible upstream, with the real control plane (registry, /authz, budgets,
 * delegations) on in-memory PGlite deciding. Refusals before the provider (allowlist, scoping
 * headers, approvals, budget, actor, bad requests, decision engine down), upstream failures mapped
 * to OpenAI errors, probes, and no key in the log.
 */
import http from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { eventually } from '../lib/poll-testing.js';
import { asApiError, BROKER_KEY, CALLER_KEY, deferred, startBrokerHarness, THRIFTY, unexpected, type BrokerHarness } from './server-testing.js';

describe('model broker: refusals and errors', () => {
  let t: BrokerHarness;
  beforeAll(async () => {
    t = await startBrokerHarness();
  });
  afterAll(() => t?.close());

  it('denies a model outside the allowlist with a 403 OpenAI error, before any upstream call', async () => {
    const n = t.seen.length;
    const e = await t.client.chat.completions.create({ model: 'forbidden', messages: [{ role: 'user', content: 'hi' }] }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(OpenAI.PermissionDeniedError);
    const err = e as InstanceType<typeof OpenAI.PermissionDeniedError>;
    expect(err.status).toBe(403);
    expect(err.code).toBe('permission_denied');
    expect(err.message).toMatch(/forbidden is not in bot\.allowModels/);
    expect(t.seen.length).toBe(n);
  });

  it('a scoping header the agent sent twice reaches the decision as two lines: 403, the provider never called', async () => {
    const n = t.seen.length;
    const reply = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(
        `${t.base}/v1/chat/completions`,
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
    expect(t.seen.length).toBe(n);
    // One line with a comma in it is a task like any other.
    const ok = await t.client.chat.completions.create(
      { model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }] },
      { headers: { [H.task]: 't-1, part 2' } },
    );
    expect(ok.choices[0]?.message.content).toBe('hello');
  });

  it('passes task headers to the decision: regulated model needs an approved delegation (401 + needs-approval)', async () => {
    const ask = (headers: Record<string, string>) =>
      t.client.chat.completions.create({ model: 'gpt-regulated', messages: [{ role: 'user', content: 'hi' }] }, { headers }).then(unexpected, asApiError);
    const before = await t.usedBefore();
    const noTask = await ask({});
    expect(noTask.status).toBe(403);
    expect(noTask.message).toMatch(/needs task, action and resource/);
    const pending = await ask({ [H.task]: 't-none', [H.action]: 'model:invoke', [H.resource]: 'chat' });
    expect(pending.status).toBe(401);
    expect(pending.headers?.get(H.needsApproval)).toBe('true');
    expect(pending.message).toMatch(/needs approval/);
    const ok = await t.client.chat.completions.create(
      { model: 'gpt-regulated', messages: [{ role: 'user', content: 'hi' }] },
      { headers: { [H.task]: 't-ok', [H.action]: 'model:invoke', [H.resource]: 'chat' } },
    );
    expect(ok.choices[0]?.message.content).toBe('hello');
    await eventually(() => t.used().tokensLastHour === before.tokensLastHour + 20, 'regulated usage');
  });

  it('denies once the budget is spent (after the usage lands)', async () => {
    const thrifty = t.agentClient('thrifty');
    const r = await thrifty.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 });
    expect(r.usage?.total_tokens).toBe(20);
    await eventually(() => t.cp.plane.budget.usage('thrifty', Date.now()).tokensLastHour === 20, 'thrifty usage settled');
    // 20 used: the same call's worst case (the whole budget) no longer fits; refused before the provider.
    const n = t.seen.length;
    const e = await thrifty.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(OpenAI.RateLimitError);
    expect((e as InstanceType<typeof OpenAI.APIError>).code).toBe('budget_exceeded');
    expect((e as Error).message).toMatch(
      new RegExp(`tokensPerHour budget of agent thrifty: this call needs up to \\d+ of ${THRIFTY} tokens per hour and 20 are used or reserved`),
    );
    expect(t.seen.length).toBe(n);
  });

  it('requires the actor header and a known model', async () => {
    const e1 = await t
      .agentClient(undefined)
      .chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }] })
      .catch((x: unknown) => x);
    expect(e1).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((e1 as InstanceType<typeof OpenAI.APIError>).code).toBe('missing_actor');
    const e2 = await t.client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }).catch((x: unknown) => x);
    expect(e2).toBeInstanceOf(OpenAI.NotFoundError);
    expect((e2 as InstanceType<typeof OpenAI.APIError>).code).toBe('model_not_found');
    const r = await t.post(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'x' }] }), { [H.actor]: 'a,b' });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe('invalid_actor');
    // One registry name: at most 253 characters.
    const long = await t.post(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'x' }] }), { [H.actor]: 'a'.repeat(254) });
    expect(long.status).toBe(400);
    expect(((await long.json()) as { error: { code: string } }).error.code).toBe('invalid_actor');
  });

  it('maps upstream 500 to 502, 429 to 429 with retry-after, 401 to a broker-key error, bad JSON to 502', async () => {
    const call = (model: string) => t.client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] }).then(unexpected, asApiError);
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
    const reset = await t.client.chat.completions.create({ model: 'gpt-reset', messages: [{ role: 'user', content: 'hi' }] }).then(unexpected, asApiError);
    expect(reset.status).toBe(502);
    expect(reset.code).toBe('upstream_unreachable');
    t.hangArrived = deferred();
    t.hangClosed = deferred();
    const hung = await t.client.chat.completions.create({ model: 'gpt-hang', messages: [{ role: 'user', content: 'hi' }] }).then(unexpected, asApiError);
    expect(hung.status).toBe(504);
    expect(hung.code).toBe('upstream_timeout');
    await t.hangClosed.promise; // the broker let go of the upstream call
  });

  it('a whole answer still dripping in at the upstream timeout is cut there: 504, the provider let go', async () => {
    t.hangClosed = deferred();
    const started = performance.now();
    const drip = await t.client.chat.completions.create({ model: 'gpt-drip', messages: [{ role: 'user', content: 'hi' }] }).then(unexpected, asApiError);
    expect(drip.status).toBe(504);
    expect(drip.code).toBe('upstream_timeout');
    expect(drip.message).toMatch(/the model provider did not answer within 800 ms$/);
    // Cut at 800 ms from the call, not left to drip (the harness gives the SDK no retries).
    expect(performance.now() - started).toBeLessThan(5000);
    await t.hangClosed.promise;
  });

  it('rejects bad JSON, bad shapes and oversize bodies with OpenAI-style errors', async () => {
    const bad = await t.post('{"model": ');
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({
      error: { message: 'request body is not valid JSON', type: 'invalid_request_error', param: null, code: 'invalid_json' },
    });
    expect((await t.post('[1,2]')).status).toBe(400);
    const noMsgs = await t.post(JSON.stringify({ model: 'gpt-mini' }));
    expect(((await noMsgs.json()) as { error: { code: string } }).error.code).toBe('invalid_messages');
    expect((await t.post(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'x' }], stream: 'yes' }))).status).toBe(400);
    const big = await t.post(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: 'x'.repeat(70_000) }] }));
    expect(big.status).toBe(413);
    expect(((await big.json()) as { error: { code: string } }).error.code).toBe('request_too_large');
  });

  it('refuses a body nested deeper than 64 levels (400) before the decision, and takes one 64 deep', async () => {
    // The body is level 1; `x` adds the rest.
    const nested = (levels: number) =>
      `{"model":"gpt-mini","messages":[{"role":"user","content":"hi"}],"x":${'['.repeat(levels - 1)}${']'.repeat(levels - 1)}}`;
    const seen = t.seen.length;
    const audited = t.cp.plane.audit.recent(1)[0]?.seq;
    for (const levels of [65, 5000]) {
      const r = await t.post(nested(levels));
      expect(r.status, String(levels)).toBe(400);
      expect(await r.json()).toEqual({
        error: { message: 'request body is nested deeper than 64 levels', type: 'invalid_request_error', param: null, code: 'invalid_request' },
      });
    }
    // Brackets inside strings (escaped quotes too) are text, not nesting.
    const quoted = await t.post(JSON.stringify({ model: 'gpt-mini', messages: [{ role: 'user', content: `"\\${'['.repeat(100)}` }] }));
    expect(quoted.status).toBe(200);
    expect(t.seen.length).toBe(seen + 1);
    // No decision was asked for the refused ones: one audit record, the quoted call's.
    expect(t.cp.plane.audit.recent(1)[0]?.seq).toBe((audited ?? 0) + 1);
    expect((await t.post(nested(64))).status).toBe(200);
  });

  it('answers probes, 404 and 405 in OpenAI shape', async () => {
    expect((await fetch(`${t.base}/health/liveliness`)).status).toBe(200);
    expect((await fetch(`${t.base}/health/readiness`)).status).toBe(200);
    const nf = await fetch(`${t.base}/v1/embeddings`, { method: 'POST', body: '{}' });
    expect(nf.status).toBe(404);
    expect(((await nf.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
    const na = await fetch(`${t.base}/v1/chat/completions`);
    expect(na.status).toBe(405);
    expect(na.headers.get('allow')).toBe('POST');
  });

  it('refuses (503) when the decision engine is unreachable, and with a placeholder key names the variable', async () => {
    // Refused: port 1 is privileged and below the ephemeral range, so unlike a port freed after
    // listen(0) no other test's server can be handed it (the proxy tests saw that race in CI).
    const deadPort = 1;
    const b2 = await t.anotherBroker({ authzUrl: `http://127.0.0.1:${deadPort}/authz`, decisionTimeoutMs: 500 });
    // No provider key at all.
    const b3 = await t.anotherBroker();
    try {
      const n = t.seen.length;
      const e = await t
        .agentClient('bot', { baseURL: `http://127.0.0.1:${b2.port}/v1` })
        .chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }] })
        .then(unexpected, asApiError);
      expect(e.status).toBe(503);
      expect(e.code).toBe('decision_unavailable');
      expect(t.seen.length).toBe(n);
      const p = await t
        .agentClient('bot', { baseURL: `http://127.0.0.1:${b3.port}/v1` })
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
    expect(t.logged.length).toBeGreaterThan(0);
    expect(t.logged.join('')).not.toContain(BROKER_KEY);
    expect(t.logged.join('')).not.toContain(CALLER_KEY);
  });
});
