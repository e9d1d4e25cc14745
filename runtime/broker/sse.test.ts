/** The SSE scanner: any split of the upstream bytes gives the same events, usage picked up, usage chunk stripped on request. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createSseScanner, eventData } from './sse.js';

const ev = (o: unknown) => `data: ${JSON.stringify(o)}`;
const STREAM = [
  ev({ choices: [{ index: 0, delta: { role: 'assistant', content: 'Hé' } }] }),
  ': keep-alive comment',
  ev({ choices: [{ index: 0, delta: { content: 'llo' } }] }),
  ev({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }),
  'data: [DONE]',
];

function run(parts: string[], strip: boolean) {
  const s = createSseScanner({ stripUsageChunk: strip });
  let out = '';
  for (const p of parts) out += s.push(p);
  out += s.end();
  return { out, state: s.state };
}

function splitAt(text: string, cuts: number[]): string[] {
  const at = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
  const parts: string[] = [];
  let prev = 0;
  for (const c of at) {
    parts.push(text.slice(prev, c));
    prev = c;
  }
  parts.push(text.slice(prev));
  return parts;
}

describe('SSE scanner', () => {
  for (const nl of ['\n', '\r\n', '\r']) {
    it(`gives the same result for every split of the stream (line ending ${JSON.stringify(nl)})`, () => {
      const text = STREAM.join(nl + nl) + nl + nl;
      const whole = run([text], true);
      expect(whole.state.usage).toEqual({ promptTokens: 3, completionTokens: 2, totalTokens: 5, estimated: false });
      expect(whole.state.done).toBe(true);
      expect(whole.state.completionChars).toBe(5);
      expect(whole.out).not.toContain('usage');
      expect(whole.out).toContain('[DONE]');
      expect(run([text], false).out).toBe(text);
      fc.assert(
        fc.property(fc.array(fc.nat(), { maxLength: 12 }), (cuts) => {
          const r = run(splitAt(text, cuts), true);
          expect(r.out).toBe(whole.out);
          expect(r.state).toEqual(whole.state);
        }),
        { numRuns: 200 },
      );
    });
  }

  it('keeps a usage chunk that also carries choices, and forwards an unterminated last event', () => {
    const withChoices = ev({ choices: [{ index: 0, delta: { content: 'x' } }], usage: { prompt_tokens: 1, completion_tokens: 1 } });
    const r = run([`${withChoices}\n\ndata: [DONE]`], true);
    expect(r.out).toBe(`${withChoices}\n\ndata: [DONE]`);
    expect(r.state.usage?.totalTokens).toBe(2);
    expect(eventData('event: x\ndata: a\ndata: b')).toBe('a\nb');
  });
});
