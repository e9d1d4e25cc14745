/**
 * A streamed completion that goes wrong after the client's stream began, with the real `openai`
 * SDK, the real control plane and the harness's scripted provider (server-testing.ts): the
 * provider breaking off, ending without [DONE], sending a malformed event or stalling past the
 * gap timeout ends the client's stream with a final error event the SDK raises (not a reset, not
 * a silent end), and the usage that flowed is settled, once. So does a stream still running at
 * the broker's whole-stream deadline.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asApiError, promptEstimate, script, startBrokerHarness, type BrokerHarness, type Script } from './server-testing.js';

type Chunk = OpenAI.Chat.Completions.ChatCompletionChunk;
const streamed = (s: Script) => ({ model: 'gpt-script', stream: true as const, messages: [{ role: 'user' as const, content: script(s) }] });

/** The content chunks a stream delivered, and the error its iteration threw (undefined when it ended well). */
async function drain(stream: AsyncIterable<Chunk>): Promise<{ pieces: number; err?: unknown }> {
  let pieces = 0;
  try {
    for await (const ch of stream) if (ch.choices[0]?.delta.content) pieces++;
    return { pieces };
  } catch (e) {
    return { pieces, err: e };
  }
}

describe('broker streams: a provider failure mid-stream', () => {
  let t: BrokerHarness;
  beforeAll(async () => {
    t = await startBrokerHarness();
  });
  afterAll(() => t?.close());

  const cases: [NonNullable<Script['breaks']>, string, RegExp][] = [
    ['reset', 'upstream_error', /^the model provider's stream broke off \(.+\); stream stopped$/],
    ['close', 'upstream_error', /^the model provider ended the stream without data: \[DONE\]; stream stopped$/],
    ['malformed', 'upstream_error', /^the model provider sent a stream event that is not a JSON object; stream stopped$/],
    // The harness broker's gap timeout is 800 ms.
    ['stall', 'upstream_timeout', /^the model provider sent nothing for 800 ms; stream stopped$/],
  ];
  for (const [breaks, code, message] of cases) {
    it(`ends the stream with an error event the SDK raises, and settles what flowed (provider: ${breaks})`, async () => {
      const name = `broken-${breaks}`;
      // A budget: the stream holds a reservation (its worst case) until it is settled.
      await t.agent(name, { tokensPerHour: 1_000_000 }, ['gpt-script']);
      const body = streamed({ tokens: 6, breaks });
      const { pieces, err } = await drain(await t.agentClient(name).chat.completions.create(body));
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect(err).not.toBeInstanceOf(OpenAI.APIConnectionError);
      expect(asApiError(err).code).toBe(code);
      expect(asApiError(err).error).toMatchObject({ message: expect.stringMatching(message) });
      expect(pieces).toBe(6);
      // Settled to what flowed: the prompt estimate and one token per piece; the reservation's worst case is gone.
      await expect.poll(() => t.used(name).tokensLastHour, { timeout: 5000 }).toBe(promptEstimate(body) + 6);
    });
  }

  it('ends a stream still running at the deadline with a stream_timeout event the SDK raises, and settles what flowed', async () => {
    await t.agent('trickler', { tokensPerHour: 1_000_000 }, ['gpt-script']);
    const b = await t.anotherBroker({ providerKey: 'sk-broker', streamMaxMs: 300 });
    try {
      // A piece every 40 ms, forever (well under the gap timeout, and the 20-token allowance is not reached by 300 ms).
      const body = streamed({ tokens: 1, trickleMs: 40 });
      const client = t.agentClient('trickler', { baseURL: `http://127.0.0.1:${b.port}/v1` });
      const { pieces, err } = await drain(await client.chat.completions.create(body));
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect(asApiError(err).code).toBe('stream_timeout');
      expect(asApiError(err).error).toMatchObject({ type: 'timeout_error', message: "the stream ran past the broker's limit of 300 ms; stream stopped" });
      expect(pieces).toBeGreaterThan(0);
      await expect.poll(() => t.used('trickler').tokensLastHour, { timeout: 5000 }).toBe(promptEstimate(body) + pieces);
    } finally {
      await b.close(100);
    }
  });
});
