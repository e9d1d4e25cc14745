/** Token accounting: generated output counted in every field a delta or a message carries it in; the estimate charges the whole request. */
import { describe, expect, it } from 'vitest';
import { chunkTextChars, completionTextChars, estimateUsage } from './usage.js';

const chunk = (...deltas: object[]) => ({ choices: deltas.map((delta, index) => ({ index, delta, finish_reason: null })) });

describe('usage', () => {
  it('counts generated characters in every field of a delta, the role, ids and types aside', () => {
    expect(chunkTextChars(chunk({ role: 'assistant', content: '' }))).toBe(0);
    expect(chunkTextChars(chunk({ content: 'abcd' }))).toBe(4);
    expect(chunkTextChars(chunk({ function_call: { name: 'f', arguments: '{"a":1}' } }))).toBe(8);
    expect(chunkTextChars(chunk({ tool_calls: [{ index: 0, id: 'call_123', type: 'function', function: { name: 'go', arguments: '{}' } }] }))).toBe(4);
    expect(chunkTextChars(chunk({ refusal: 'no' }, { reasoning: 'hmm' }, { reasoning_content: 'why' }))).toBe(8);
    expect(chunkTextChars(chunk({ content: [{ type: 'text', text: 'part' }] }))).toBe(4);
    expect(chunkTextChars({ choices: [], usage: { prompt_tokens: 1 } })).toBe(0);
    expect(chunkTextChars('data')).toBe(0);
  });

  it('counts every choice of a whole completion, and estimates the prompt from the request size', () => {
    const body = {
      choices: [
        { index: 0, message: { role: 'assistant', content: 'hello', refusal: null }, finish_reason: 'stop' },
        { index: 1, message: { role: 'assistant', content: null, refusal: 'not that' }, finish_reason: 'stop' },
      ],
    };
    expect(completionTextChars(body)).toBe(13);
    expect(estimateUsage(4001, 13)).toEqual({ promptTokens: 1001, completionTokens: 4, totalTokens: 1005, estimated: true });
  });
});
