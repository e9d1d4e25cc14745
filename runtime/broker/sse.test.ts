/**
 * The SSE scanner: any split of the upstream bytes gives the same events, usage picked up, usage
 * chunk stripped on request, a stream that goes wrong ended with one error event. The relay: done
 * once, the rest destroyed when the client side breaks, an error event when the provider does.
 */
import { once } from 'node:events';
import { Readable, Writable } from 'node:stream';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { streamBroken, streamEventMalformed, streamUnfinished, type ErrorBody } from './openai-error.js';
import { createSseScanner, eventData, MAX_EVENT_CHARS, relay, sseTransform } from './sse.js';

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

  it('searches only new text for the end of an event: one 7 MiB event in 1 KiB pieces is split in linear time', () => {
    const s = createSseScanner({ stripUsageChunk: false });
    const piece = 'a'.repeat(1024);
    const t0 = performance.now();
    expect(s.push('data: {"x":"')).toBe('');
    for (let i = 0; i < 7 * 1024; i++) expect(s.push(piece)).toBe('');
    const out = s.push('"}\n\ndata: [DONE]\n\n');
    const ms = performance.now() - t0;
    expect(out.length).toBe(7 * 1024 * 1024 + 14 + 16);
    expect(out.endsWith('"}\n\ndata: [DONE]\n\n')).toBe(true);
    expect(s.state.done).toBe(true);
    // Linear: tens of ms. Rescanning what is held on every piece took minutes.
    expect(ms).toBeLessThan(3000);
  });

  it('ends the stream with an error event when one event grows past the bound, and forwards nothing more', () => {
    const first = ev({ choices: [{ index: 0, delta: { content: 'ok' } }] });
    const s = createSseScanner({ stripUsageChunk: false, maxEventChars: 1000 });
    expect(s.push(`${first}\n\ndata: {"x":"${'a'.repeat(600)}`)).toBe(`${first}\n\n`);
    const out = s.push('a'.repeat(600));
    expect(out).toMatch(/^data: .*\n\n$/);
    expect(JSON.parse(eventData(out.trim())!)).toEqual({
      error: {
        message: 'the model provider sent a stream event larger than 1000 characters; stream stopped',
        type: 'api_error',
        param: null,
        code: 'upstream_error',
      },
    });
    expect(s.state).toMatchObject({ cut: true, failure: expect.stringMatching(/larger than 1000 characters/), textChunks: 1, completionChars: 2 });
    expect(s.push(`"}\n\n${first}\n\n`) + s.end()).toBe('');
    // The default bound: 8 Mi characters.
    const big = createSseScanner({ stripUsageChunk: false });
    let got = big.push('data: {"x":"');
    for (let i = 0; i <= MAX_EVENT_CHARS / 65536 && !big.state.cut; i++) got += big.push('a'.repeat(65536));
    expect(big.state.failure).toMatch(/larger than 8388608 characters/);
    expect(got).toMatch(/larger than 8388608 characters/);
  });

  const errorEvent = (body: ErrorBody) => `data: ${JSON.stringify(body)}\n\n`;
  const okEvent = ev({ choices: [{ index: 0, delta: { content: 'ok' } }] });

  it('ends the stream with an error event at a payload that is neither [DONE] nor a JSON object, and forwards nothing after it', () => {
    for (const bad of ['{"choices": [', 'hello', '[1]', 'null', '']) {
      const r = run([`${okEvent}\n\ndata: ${bad}\n\n${okEvent}\n\ndata: [DONE]\n\n`], false);
      expect(r.out, bad).toBe(`${okEvent}\n\n${errorEvent(streamEventMalformed())}`);
      expect(r.state, bad).toMatchObject({ cut: true, done: false, textChunks: 1, failure: streamEventMalformed().error.message });
    }
  });

  it('ends a stream the provider ended without [DONE] with an error event, after its last event', () => {
    for (const [text, before] of [
      [`${okEvent}\n\n`, `${okEvent}\n\n`],
      [okEvent, `${okEvent}\n\n`],
      ['', ''],
    ]) {
      const r = run([text!], false);
      expect(r.out, JSON.stringify(text)).toBe(before + errorEvent(streamUnfinished()));
      expect(r.state.failure).toBe('the model provider ended the stream without data: [DONE]; stream stopped');
    }
  });

  it('fail ends a stream with the error event given, dropping the event held, and does nothing to a complete one', () => {
    const s = createSseScanner({ stripUsageChunk: false });
    expect(s.push(`${okEvent}\n\ndata: {"choices"`)).toBe(`${okEvent}\n\n`);
    expect(s.fail(streamBroken('reset'))).toBe(errorEvent(streamBroken('reset')));
    expect(s.push('}\n\n') + s.end() + s.fail(streamBroken('again'))).toBe('');
    const complete = createSseScanner({ stripUsageChunk: false });
    complete.push(`${okEvent}\n\ndata: [DONE]\n\n`);
    expect(complete.fail(streamBroken('reset'))).toBe('');
    expect(complete.state.cut).toBe(false);
  });
});

describe('relay', () => {
  const upstream = () => Readable.from(STREAM.map((e) => Buffer.from(`${e}\n\n`)));
  const sink = () => {
    const got: Buffer[] = [];
    const w = new Writable({ write: (c: Buffer, _e, cb) => (got.push(c), cb()) });
    return { w, text: () => Buffer.concat(got).toString('utf8') };
  };
  const relayed = (src: Readable, res: Writable) =>
    new Promise<{ err?: Error; calls: number }>((resolve) => {
      let calls = 0;
      relay(
        src,
        sseTransform({ stripUsageChunk: true }),
        res,
        (e) => streamBroken(e.message),
        (err) => {
          calls++;
          setTimeout(() => resolve({ err, calls }), 20);
        },
      );
    });

  it('relays every event and calls back once, without an error', async () => {
    const out = sink();
    expect(await relayed(upstream(), out.w)).toEqual({ err: undefined, calls: 1 });
    expect(out.text()).toContain('llo');
    expect(out.text()).toContain('[DONE]');
  });

  it('a client already gone: the provider stream is destroyed and the callback has the error', async () => {
    const src = upstream();
    const out = sink();
    out.w.destroy();
    await once(out.w, 'close'); // its close went by before the relay began
    const r = await relayed(src, out.w);
    expect(r.calls).toBe(1);
    expect(r.err).toMatchObject({ code: 'ERR_STREAM_PREMATURE_CLOSE' });
    expect(src.destroyed).toBe(true);
  });

  it('a provider that fails midway: the client stream ends with an error event (not a reset) and the callback has its error', async () => {
    const src = new Readable({ read() {} });
    const out = sink();
    const p = relayed(src, out.w);
    src.push(Buffer.from(`${STREAM[0]}\n\n`));
    setTimeout(() => src.destroy(new Error('provider reset')), 5);
    const r = await p;
    expect(r).toMatchObject({ calls: 1, err: { message: 'provider reset' } });
    expect(out.w.writableFinished).toBe(true);
    expect(out.text()).toBe(`${STREAM[0]}\n\ndata: ${JSON.stringify(streamBroken('provider reset'))}\n\n`);
  });
});
