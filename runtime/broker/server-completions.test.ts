/**
 * The broker over real sockets (server-testing.ts): the official `openai` client -> broker -> a
 * local OpenAI-compatible upstream, with the real control plane on in-memory PGlite receiving
 * usage. Completions relayed, non-streaming and streamed chunk by chunk, the model list, and usage
 * landing in the budget, as reported or, for a stream cut short or a client gone, as estimated.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../lib/poll-testing.js';
import { BROKER_KEY, deferred, promptEstimate, startBrokerHarness, type BrokerHarness } from './server-testing.js';

describe('model broker: completions, streams and usage', () => {
  let t: BrokerHarness;
  beforeAll(async () => {
    t = await startBrokerHarness();
  });
  afterAll(() => t?.close());

  it('completes (non-streaming) with the broker key, maps the model, and lands usage and cost', async () => {
    const before = await t.usedBefore();
    const n = t.seen.length;
    const r = await t.client.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    expect(r.data.choices[0]?.message.content).toBe('hello');
    expect(r.data.usage?.total_tokens).toBe(20);
    expect(r.response.headers.get('x-request-id')).toBe('req-up-1');
    expect(r.response.headers.get('x-ratelimit-remaining-tokens')).toBeNull();
    expect(t.seen[n]?.auth).toBe(`Bearer ${BROKER_KEY}`);
    expect(t.seen[n]?.body.model).toBe('provider-ok');
    expect(t.seen[n]?.body.stream_options).toBeUndefined();
    await eventually(() => t.used().tokensLastHour === before.tokensLastHour + 20, 'usage to land');
    // 12 prompt tokens at 1 USD/1k + 8 completion tokens at 2 USD/1k
    expect(t.used().costUsdLastDay - before.costUsdLastDay).toBeCloseTo(0.028, 9);
    const audit = (await (await fetch(`http://127.0.0.1:${t.cp.mgmtPort}/v1/audit?limit=5`)).json()) as {
      action: string;
      actor?: string;
      service?: string;
      allow: boolean;
    }[];
    expect(audit.some((a) => a.action === 'model.invoke' && a.actor === 'bot' && a.service === 'gpt-mini' && a.allow)).toBe(true);
  });

  it('streams, strips the usage chunk the client did not ask for, and still lands usage', async () => {
    const before = await t.usedBefore();
    const n = t.seen.length;
    const stream = await t.client.chat.completions.create({ model: 'gpt-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    let text = '';
    let usageChunks = 0;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? '';
      if (c.usage) usageChunks++;
    }
    expect(text).toBe('Hello');
    expect(usageChunks).toBe(0);
    expect(t.seen[n]?.body.stream_options?.include_usage).toBe(true);
    expect(t.seen[n]?.auth).toBe(`Bearer ${BROKER_KEY}`);
    await eventually(() => t.used().tokensLastHour === before.tokensLastHour + 20, 'stream usage to land');
  });

  it('passes the usage chunk through when the client asked for it', async () => {
    const stream = await t.client.chat.completions.create({
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
    t.gate = deferred();
    const stream = await t.client.chat.completions.create({ model: 'gpt-gated', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const parts: string[] = [];
    for await (const c of stream) {
      parts.push(c.choices[0]?.delta.content ?? '');
      if (parts.length === 1) t.gate.resolve(); // the upstream holds chunk 2 until the client has chunk 1
    }
    expect(parts.join('')).toBe('first second');
  });

  it('stops the provider when the client leaves a stream midway, and charges what went by', async () => {
    t.gate = deferred();
    t.gatedClosed = deferred();
    const before = await t.usedBefore();
    const stream = await t.client.chat.completions.create({ model: 'gpt-gated', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    // The client reads the first chunk and leaves (the SDK aborts its request); chunk 2 never comes.
    for await (const c of stream) {
      expect(c.choices[0]?.delta.content).toBe('first');
      break;
    }
    await t.gatedClosed.promise;
    // 'hi' -> 1 prompt token, 'first' -> at least 1 completion token, as estimated.
    await eventually(() => t.used().tokensLastHour >= before.tokensLastHour + 2, 'the cut stream charged as estimated');
    t.gate.resolve();
  });

  it('lists the logical models', async () => {
    const ids: string[] = [];
    for await (const m of t.client.models.list()) ids.push(m.id);
    expect(ids).toContain('gpt-mini');
    expect(ids).not.toContain('provider-ok');
  });

  it('aborts the upstream call when the client goes away', async () => {
    t.hangArrived = deferred();
    t.hangClosed = deferred();
    const before = await t.usedBefore();
    const ac = new AbortController();
    const body = { model: 'gpt-hang', messages: [{ role: 'user' as const, content: 'hi' }] };
    const p = t.client.chat.completions.create(body, { signal: ac.signal }).catch((x: unknown) => x);
    await t.hangArrived.promise;
    ac.abort();
    expect(await p).toBeInstanceOf(OpenAI.APIUserAbortError);
    await t.hangClosed.promise;
    // The provider may have started: the prompt (the whole request, a token per 4 bytes) is charged as an estimate.
    await eventually(() => t.used().tokensLastHour === before.tokensLastHour + promptEstimate(body), 'prompt estimate');
  });

  it('charges an estimate when the upstream stream is cut short', async () => {
    const before = await t.usedBefore();
    const body = { model: 'gpt-cut', stream: true as const, messages: [{ role: 'user' as const, content: 'abcdefgh' }] };
    const stream = await t.client.chat.completions.create(body);
    const e = await (async () => {
      for await (const _c of stream) void _c;
    })().catch((x: unknown) => x);
    expect(e).toBeInstanceOf(Error);
    // The request's bytes / 4 prompt tokens, 40 completion chars -> 10 tokens
    const want = promptEstimate(body) + 10;
    await eventually(
      () => t.used().tokensLastHour === before.tokensLastHour + want,
      `estimated usage (have ${t.used().tokensLastHour - before.tokensLastHour})`,
    );
  });
});
