/**
 * Budgets as a ceiling at the broker (issue 14), with the real `openai` SDK, a real control plane
 * on PGlite and an in-test provider that counts what it is asked: a reservation larger than the
 * remaining budget is refused before the provider sees the request; 50 concurrent completions
 * against a budget for 10 never exceed it; a stream is cut at the ceiling and the SDK raises; an
 * unsettled reservation (a crash mid-call) expires with its worst case charged and a late report
 * still settles it exactly once.
 */
import http from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { close, listen } from '../lib/http.js';
import { startControlPlane, type RunningControlPlane } from '../control-plane/server.js';
import type { Store } from '../store/factory.js';
import { openTestPglite } from '../store/testing.js';
import { parseConfig } from './config.js';
import { startBroker, type RunningBroker } from './server.js';

const MAX_OUT = 100;
/** The error a call ends with (undefined when it succeeds). */
const failure = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
  );
const chunk = (content: string) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'p', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;

describe('broker budgets: reserve, settle, cut', () => {
  let store: Store;
  let cp: RunningControlPlane;
  let broker: RunningBroker;
  let provider: http.Server;
  let mgmt = '';
  let offset = 0;
  let asked = 0;
  /** Prompt tokens the provider reports (a test sets the worst case to leave nothing to give back). */
  let promptReported = 9;

  const client = (actor: string) =>
    new OpenAI({ apiKey: 'sk-agent', baseURL: `http://127.0.0.1:${broker.port}/v1`, maxRetries: 0, defaultHeaders: { [H.actor]: actor } });
  const status = async (agent: string) =>
    ((await (await fetch(`${mgmt}/v1/budgets/${agent}`)).json()) as { dimensions: Record<string, { limit: number; used: number }> }).dimensions;
  const agent = (name: string, budget: object) =>
    cp.plane.registry.upsert({ name, upstream: `${name}.agents.svc:8080`, kind: 'agent', allowModels: ['m'], budget });
  const messages = [{ role: 'user' as const, content: 'hello' }];
  /** The worst case the broker reserves for `messages` with max_tokens `out` (request bytes + out). */
  const worst = (out: number, stream = false) =>
    Buffer.byteLength(JSON.stringify({ model: 'm', messages, max_tokens: out, ...(stream ? { stream: true } : {}) })) + out;

  beforeAll(async () => {
    provider = http.createServer((req, res) => {
      let text = '';
      req.on('data', (c: Buffer) => (text += c.toString()));
      req.on('end', () => {
        const body = JSON.parse(text) as { stream?: boolean; max_tokens?: number };
        asked++;
        if (body.stream) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          let i = 0;
          const t = setInterval(() => {
            if (res.destroyed || i >= 50) {
              clearInterval(t);
              if (!res.destroyed) res.end('data: [DONE]\n\n');
              return;
            }
            res.write(chunk(`t${i++} `.slice(0, 3)));
          }, 5);
          res.on('close', () => clearInterval(t));
          return;
        }
        // Non-streamed: answers after a pause (the concurrent calls overlap), using what it was allowed.
        setTimeout(() => {
          res.writeHead(200, { 'content-type': 'application/json' });
          const completion = body.max_tokens ?? 10;
          res.end(
            JSON.stringify({
              id: 'c',
              object: 'chat.completion',
              created: 1,
              model: 'p',
              choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
              usage: { prompt_tokens: promptReported, completion_tokens: completion, total_tokens: promptReported + completion },
            }),
          );
        }, 150);
      });
    });
    const upPort = await listen(provider, '127.0.0.1:0');
    store = await openTestPglite();
    cp = await startControlPlane({ store, durableAudit: false, now: () => Date.now() + offset, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    mgmt = `http://127.0.0.1:${cp.mgmtPort}`;
    await cp.plane.registry.upsert({ name: 'm', upstream: 'broker.default.svc:8080', kind: 'model' });
    broker = await startBroker({
      addr: '127.0.0.1:0',
      config: parseConfig({
        models: [{ name: 'm', model: 'p', apiBase: `http://127.0.0.1:${upPort}/v1`, priceInputPer1k: 0, priceOutputPer1k: 0, maxOutputTokens: MAX_OUT }],
      }),
      authzUrl: `http://127.0.0.1:${cp.decisionPort}/authz`,
      usageUrl: `${mgmt}/v1/usage`,
      providerKey: 'sk-broker',
      // Budgets are under test here, not the decision deadline (server-refusals.test.ts): 50 calls
      // at once on a loaded CI machine must not be cut off at the 2 s default.
      decisionTimeoutMs: 30_000,
    });
  }, 180_000);
  afterAll(async () => {
    await broker?.close(0);
    await cp?.close();
    await store?.close();
    if (provider) await close(provider);
  });

  it('a reservation larger than the remaining budget is refused before the provider sees the request', async () => {
    await agent('small', { tokensPerHour: worst(50) + 10 });
    const c = client('small');
    const n = asked;
    // Worst case 50 output tokens fits; the model's cap (no max_tokens) does not.
    const err = await failure(c.chat.completions.create({ model: 'm', messages }));
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err!.status).toBe(429);
    expect(err!.code).toBe('budget_exceeded');
    expect(err!.type).toBe('insufficient_quota');
    // More than the whole budget: no wait makes it fit, so no retry-after.
    expect(err!.message).toMatch(
      /tokensPerHour budget of agent small: this call needs up to \d+ of \d+ tokens per hour, more than the whole budget: it never fits/,
    );
    expect(err!.headers?.get('retry-after')).toBeNull();
    expect(asked).toBe(n);
    const ok = await c.chat.completions.create({ model: 'm', messages, max_tokens: 50 });
    expect(ok.usage?.total_tokens).toBe(59);
    expect(asked).toBe(n + 1);
    // Settled to the real figure (59), not the worst case.
    await expect.poll(async () => (await status('small')).tokensPerHour!.used, { timeout: 5000 }).toBe(59);
    // The same call again fits the budget but not what is left of it: it frees up, and says when.
    const later = await failure(c.chat.completions.create({ model: 'm', messages, max_tokens: 50 }));
    expect(later!.status).toBe(429);
    expect(later!.message).toMatch(/this call needs up to \d+ of \d+ tokens per hour and 59 are used or reserved; frees up from /);
    expect(later!.headers?.get('retry-after')).toMatch(/^\d+$/);
    expect(asked).toBe(n + 1);
  });

  it('a budget already used up is a 429 budget refusal with a retry-after, as one that does not fit', async () => {
    await agent('spent', { callsPerHour: 1 });
    const c = client('spent');
    await c.chat.completions.create({ model: 'm', messages, max_tokens: 5 });
    const n = asked;
    const err = await failure(c.chat.completions.create({ model: 'm', messages, max_tokens: 5 }));
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err!.status).toBe(429);
    expect(err!.type).toBe('insufficient_quota');
    expect(err!.code).toBe('budget_exceeded');
    expect(err!.message).toMatch(/call budget exceeded: 1 of 1 calls per hour/);
    expect(err!.headers?.get('retry-after')).toMatch(/^\d+$/);
    expect(asked).toBe(n);
  });

  it('50 concurrent completions against a budget for 10 never exceed it', async () => {
    const w = worst(20);
    await agent('crowd', { tokensPerHour: 10 * w });
    // Each call really uses its worst case: nothing is given back, so exactly ten fit.
    promptReported = w - 20;
    const c = client('crowd');
    const n = asked;
    const out = await Promise.allSettled(Array.from({ length: 50 }, () => c.chat.completions.create({ model: 'm', messages, max_tokens: 20 })));
    const ok = out.filter((r) => r.status === 'fulfilled');
    const refused = out.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(ok).toHaveLength(10);
    // Refused by the reservation (429) or, once settled calls filled the window, by /authz (403).
    for (const r of refused) expect(String((r.reason as Error).message)).toMatch(/tokensPerHour budget of agent crowd|token budget exceeded/);
    promptReported = 9;
    expect(asked - n).toBe(10);
    // Settled: the ledger holds exactly the ceiling, never more.
    await expect.poll(async () => (await status('crowd')).tokensPerHour!.used, { timeout: 5000 }).toBe(10 * w);
  });

  it('a stream is cut at the ceiling: the SDK raises, and the usage up to the cut is settled', async () => {
    // Room for the prompt bound and 6 output tokens, no more.
    const limit = Buffer.byteLength(JSON.stringify({ model: 'm', messages, stream: true })) + 6;
    await agent('streamer', { tokensPerHour: limit });
    const c = client('streamer');
    const stream = await c.chat.completions.create({ model: 'm', messages, stream: true });
    const got: string[] = [];
    const err = await failure(
      (async () => {
        for await (const ch of stream) got.push(ch.choices[0]?.delta?.content ?? '');
      })(),
    );
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err!.message).toMatch(/stream stopped at the agent's budget: its output allowance of 6 tokens is used up/);
    expect(got.length).toBe(6);
    // Settled to what flowed (prompt estimate, a token per 4 request bytes, + 6 chunks), within the ceiling.
    await expect.poll(async () => (await status('streamer')).tokensPerHour!.used, { timeout: 5000 }).toBe(Math.ceil((limit - 6) / 4) + 6);
    expect((await status('streamer')).tokensPerHour!.used).toBeLessThanOrEqual(limit);
  });

  it('settlement after a crash mid-call: the reservation expires with its worst case charged, a late report settles it once', async () => {
    await agent('crashy', { tokensPerHour: 1000 });
    const reserve = await fetch(`${mgmt}/v1/budgets/crashy/reservations`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ promptTokens: 100, outputTokens: 400, priceInputPer1k: 0, priceOutputPer1k: 0, ttlMs: 60_000 }),
    });
    expect(reserve.status).toBe(200);
    const { id } = (await reserve.json()) as { id: string };
    // The broker "crashes": no report. Before the deadline nothing is reconciled.
    expect(await cp.plane.reservations.expire()).toBe(0);
    offset = 61_000;
    try {
      expect(await cp.plane.reservations.expire()).toBe(1);
      // Never forgiven: the worst case (500) stays charged.
      expect((await status('crashy')).tokensPerHour!.used).toBe(500);
      const report = { agent: 'crashy', model: 'm', tokens: 120, costUsd: 0, reservation: id };
      const post = () => fetch(`${mgmt}/v1/usage`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(report) });
      expect((await post()).status).toBe(200);
      expect((await status('crashy')).tokensPerHour!.used).toBe(120);
      // A retried report never double-counts.
      expect((await post()).status).toBe(200);
      expect((await status('crashy')).tokensPerHour!.used).toBe(120);
    } finally {
      offset = 0;
    }
  });
  it('an /authz allow without the reservation asked for is refused before the provider (fail closed)', async () => {
    // A decision endpoint that ignores X-Writ-Reserve (not Writ's, or one that predates it).
    const bare = http.createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"allow":true}');
    });
    const bp = await listen(bare, '127.0.0.1:0');
    const b2 = await startBroker({
      addr: '127.0.0.1:0',
      config: parseConfig({ models: [{ name: 'm', model: 'p', apiBase: `http://127.0.0.1:1/v1`, priceInputPer1k: 0, priceOutputPer1k: 0 }] }),
      authzUrl: `http://127.0.0.1:${bp}/authz`,
      usageUrl: `${mgmt}/v1/usage`,
      providerKey: 'sk-broker',
    });
    try {
      const c = new OpenAI({ apiKey: 'sk-agent', baseURL: `http://127.0.0.1:${b2.port}/v1`, maxRetries: 0, defaultHeaders: { [H.actor]: 'anyone' } });
      const err = await failure(c.chat.completions.create({ model: 'm', messages }));
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect(err!.status).toBe(503);
      expect(err!.code).toBe('budget_unavailable');
      expect(err!.message).toMatch(/allowed without the reservation asked for/);
    } finally {
      await b2.close(0);
      await close(bare);
    }
  });
});
