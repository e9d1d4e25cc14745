/**
 * The budget ceiling against what a call can do to get past it, with the real `openai` SDK, the
 * real control plane and the harness's scripted provider (server-testing.ts): `n` choices
 * reserved n times, a stream cut at the output it reserved whatever the provider does with
 * max_tokens, max_tokens above the model's cap forwarded as the cap, output counted in every
 * field it can come in, the whole request charged as prompt when the provider reports nothing,
 * and a stream answered with a whole body refused.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { eventually } from '../lib/poll-testing.js';
import type { Budget } from '../control-plane/types.js';
import {
  asApiError,
  deferred,
  promptEstimate,
  script,
  SCRIPT_CAP,
  SCRIPT_PROMPT,
  startBrokerHarness,
  unexpected,
  type BrokerHarness,
  type Script,
} from './server-testing.js';

type Chunk = OpenAI.Chat.Completions.ChatCompletionChunk;
const ask = (s: Script, extra: { n?: number; max_tokens?: number; max_completion_tokens?: number } = {}) => ({
  model: 'gpt-script',
  ...extra,
  messages: [{ role: 'user' as const, content: script(s) }],
});
const streamed = (s: Script, extra: { max_tokens?: number } = {}) => ({ ...ask(s, extra), stream: true as const });
const bytes = (body: object) => Buffer.byteLength(JSON.stringify(body));

/** Every chunk of a stream, and the error it ended with (undefined when it ended well). */
async function drain(stream: AsyncIterable<Chunk>): Promise<{ got: Chunk[]; err?: InstanceType<typeof OpenAI.APIError> }> {
  const got: Chunk[] = [];
  try {
    for await (const ch of stream) got.push(ch);
    return { got };
  } catch (e) {
    return { got, err: asApiError(e) };
  }
}

describe('broker budgets: the ceiling holds', () => {
  let t: BrokerHarness;
  beforeAll(async () => {
    t = await startBrokerHarness();
  });
  afterAll(() => t?.close());

  const agent = (name: string, budget: Budget) => t.agent(name, budget, ['gpt-script', 'gpt-hang']);
  const used = (name: string) => t.used(name).tokensLastHour;

  it('reserves n times the output of one choice: n choices that do not fit are refused before the provider', async () => {
    const five = ask({ tokens: 10 }, { n: 5, max_tokens: 10 });
    // Room for the prompt bound and one choice of 10 tokens (and 4 more), not for five.
    await agent('chooser', { tokensPerHour: bytes(five) + 14 });
    const c = t.agentClient('chooser');
    const seen = t.seen.length;
    const err = await c.chat.completions.create(five).then(unexpected, asApiError);
    expect(err.status).toBe(429);
    expect(err.code).toBe('budget_exceeded');
    expect(err.message).toMatch(`this call needs up to ${bytes(five) + 50} of ${bytes(five) + 14} tokens per hour`);
    expect(t.seen.length).toBe(seen);
    const one = await c.chat.completions.create(ask({ tokens: 10 }, { n: 1, max_tokens: 10 }));
    expect(one.choices).toHaveLength(1);
    // n is a whole number of choices, at most 128.
    for (const n of [0, -1, 1.5, 129, '3']) {
      const r = await t.post(JSON.stringify({ ...ask({ tokens: 1 }), n }), { [H.actor]: 'chooser' });
      expect(r.status, String(n)).toBe(400);
      expect(((await r.json()) as { error: { code: string; message: string } }).error).toMatchObject({
        code: 'invalid_n',
        message: '`n` must be an integer from 1 to 128',
      });
    }
    expect(t.seen.length).toBe(seen + 1);
  });

  it('cuts a stream at the output it reserved when the provider streams past max_tokens, or past the model cap', async () => {
    await agent('overrun', { tokensPerHour: 1_000_000 });
    const c = t.agentClient('overrun');
    const capped = streamed({ tokens: 60, ignoreMax: true }, { max_tokens: 5 });
    const uncapped = streamed({ tokens: 60 });
    for (const [body, allowance] of [
      [capped, 5],
      [uncapped, SCRIPT_CAP],
    ] as const) {
      const { got, err } = await drain(await c.chat.completions.create(body));
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect(err!.code).toBe('budget_exceeded');
      expect(err!.message).toMatch(`stream stopped at the agent's budget: its output allowance of ${allowance} tokens is used up`);
      expect(got.filter((ch) => ch.choices[0]?.delta.content).length).toBe(allowance);
    }
    // Settled to what flowed: the prompt estimate and the allowance, each.
    await expect.poll(() => used('overrun'), { timeout: 5000 }).toBe(promptEstimate(capped) + 5 + promptEstimate(uncapped) + SCRIPT_CAP);
  });

  it('forwards max_tokens and max_completion_tokens above the model cap as the cap it reserved', async () => {
    const seen = t.seen.length;
    const a = await t.client.chat.completions.create(ask({ tokens: 100 }, { max_tokens: 5000 }));
    const b = await t.client.chat.completions.create(ask({ tokens: 100 }, { max_completion_tokens: 1e12 }));
    expect(t.seen[seen]?.body.max_tokens).toBe(SCRIPT_CAP);
    expect(t.seen[seen + 1]?.body.max_completion_tokens).toBe(SCRIPT_CAP);
    expect([a.usage?.completion_tokens, b.usage?.completion_tokens]).toEqual([SCRIPT_CAP, SCRIPT_CAP]);
    // Within the cap, as asked.
    await t.client.chat.completions.create(ask({ tokens: 100 }, { max_tokens: 7 }));
    expect(t.seen[seen + 2]?.body.max_tokens).toBe(7);
  });

  it('counts output streamed as function-call arguments, refusals and reasoning: such a stream is cut at its allowance too', async () => {
    for (const field of ['function_call', 'refusal', 'reasoning'] as const) {
      const body = streamed({ tokens: 40, field });
      // Room for the prompt bound and 5 output tokens: the stream reserves those 5.
      const name = `sly-${field.replace('_', '-')}`;
      await agent(name, { tokensPerHour: bytes(body) + 5 });
      const { got, err } = await drain(await t.agentClient(name).chat.completions.create(body));
      expect(err?.message, field).toMatch(/its output allowance of 5 tokens is used up/);
      expect(got.length, field).toBe(5);
      await expect.poll(() => used(name), { timeout: 5000 }).toBe(promptEstimate(body) + 5);
    }
  });

  it('charges the whole request as prompt when the client hangs up: tools are not free', async () => {
    t.hangArrived = deferred();
    t.hangClosed = deferred();
    const before = await t.usedBefore();
    const body = {
      model: 'gpt-hang',
      messages: [{ role: 'user' as const, content: 'hi' }],
      tools: [{ type: 'function' as const, function: { name: 'lookup', description: 'd'.repeat(4000), parameters: { type: 'object' } } }],
    };
    const ac = new AbortController();
    const p = t.client.chat.completions.create(body, { signal: ac.signal }).catch((x: unknown) => x);
    await t.hangArrived.promise;
    ac.abort();
    expect(await p).toBeInstanceOf(OpenAI.APIUserAbortError);
    await t.hangClosed.promise;
    expect(promptEstimate(body)).toBeGreaterThan(1000);
    await eventually(() => t.used().tokensLastHour === before.tokensLastHour + promptEstimate(body), 'the whole request charged as prompt');
  });

  it('charges the text of every choice when a whole answer carries no usage', async () => {
    await agent('quiet', { tokensPerHour: 1_000_000 });
    const c = t.agentClient('quiet');
    const plain = ask({ tokens: 12, noUsage: true }, { max_tokens: 12 });
    const refusals = ask({ tokens: 8, noUsage: true, field: 'refusal' }, { n: 2 });
    const r = await c.chat.completions.create(plain);
    expect(r.usage).toBeUndefined();
    await c.chat.completions.create(refusals);
    await expect.poll(() => used('quiet'), { timeout: 5000 }).toBe(promptEstimate(plain) + 12 + promptEstimate(refusals) + 16);
  });

  it('refuses a whole JSON answer to a streamed request (502) and settles the usage it carried', async () => {
    await agent('jsonist', { tokensPerHour: 1_000_000 });
    const err = await t
      .agentClient('jsonist')
      .chat.completions.create(streamed({ tokens: 10, json: true }, { max_tokens: 10 }))
      .then(unexpected, asApiError);
    expect(err.status).toBe(502);
    expect(err.code).toBe('upstream_error');
    expect(err.message).toMatch(/answered a streamed request with "application\/json", not an event stream/);
    await expect.poll(() => used('jsonist'), { timeout: 5000 }).toBe(SCRIPT_PROMPT + 10);
  });
});
