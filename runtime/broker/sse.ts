/**
 * Server-sent-events pass-through for streamed completions. Upstream bytes are forwarded event by
 * event as soon as an event is complete (only a partial event is ever held), so the client sees
 * every chunk when the provider sends it. On the way the scanner reads each `data:` JSON chunk
 * to pick up the provider's usage (the final chunk when `stream_options.include_usage` is on),
 * counts generated characters (for an estimate if the stream is cut short) and, when the client
 * did not ask for usage itself, drops that extra usage-only chunk so the client sees exactly what
 * it asked for. However the stream stops early (at the output allowance, at a broken or malformed
 * provider stream, at the broker's deadline) the client gets one final OpenAI-shaped error event
 * (`data: {"error": ...}`, which the SDKs raise) and then the end of the stream: `stop` below.
 */
import { StringDecoder } from 'node:string_decoder';
import { Transform, type Readable, type TransformCallback, type Writable } from 'node:stream';
import { streamBudgetCut, streamEventMalformed, streamEventTooLarge, streamUnfinished, type ErrorBody } from './openai-error.js';
import { CHARS_PER_TOKEN, chunkTextChars, usageOf, type TokenUsage } from './usage.js';

export interface SseScanState {
  usage?: TokenUsage;
  completionChars: number;
  /** True once `data: [DONE]` went by. */
  done: boolean;
  /** Chunks that carried generated text (providers stream about one token per chunk). */
  textChunks: number;
  /** True once the stream was ended early with a final error event (`stop`). */
  cut: boolean;
  /** That event's message, unless it was the output allowance: the provider's stream failed, or the broker stopped it. */
  failure?: string;
}

export interface ScanOptions {
  stripUsageChunk: boolean;
  /** Output allowance (tokens): a chunk that would pass it is replaced by a `budget_exceeded` error event and the stream ends. */
  maxCompletionTokens?: number;
  /** Largest event held (characters, default MAX_EVENT_CHARS): one larger ends the stream with an error event. */
  maxEventChars?: number;
}

/** Largest single SSE event (characters) the scanner holds: providers send events of a few hundred. */
export const MAX_EVENT_CHARS = 8 * 1024 * 1024;

/** Output tokens counted so far: at least one per text chunk, at least one per CHARS_PER_TOKEN characters. */
export const outputTokensOf = (s: SseScanState): number => Math.max(s.textChunks, Math.ceil(s.completionChars / CHARS_PER_TOKEN));

const BOUNDARY = /\r\n\r\n|\n\n|\r\r/g;
/** Longest boundary less one: how far back into held text a boundary may start. */
const EDGE = 3;

/** The `data:` payload of one event (multi-line data joined with \n), or undefined. */
export function eventData(event: string): string | undefined {
  let data: string | undefined;
  for (const line of event.split(/\r\n|\n|\r/)) {
    if (!line.startsWith('data:')) continue;
    const v = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
    data = data === undefined ? v : `${data}\n${v}`;
  }
  return data;
}

/**
 * Pure core of the scanner: feed decoded text, get back the text to forward. Events are split on
 * a blank line (any of the three line-ending styles SSE allows). Only new text is searched for
 * the blank line (with the last few held characters, where one may start), and an unfinished
 * event is held as its pieces, joined once when it completes: linear in the stream's size
 * whatever its events' sizes. An event growing past `maxEventChars`, or a `data:` payload that is
 * neither `[DONE]` nor a JSON object (the SDKs would fail parsing it), ends the stream with an
 * error event (nothing of it forwarded or counted); so does an end without `data: [DONE]`.
 */
export function createSseScanner(opts: ScanOptions) {
  const state: SseScanState = { completionChars: 0, done: false, textChunks: 0, cut: false };
  const maxEventChars = opts.maxEventChars ?? MAX_EVENT_CHARS;
  /** The unfinished event, in pieces; `edge` is its last EDGE characters. */
  let held: string[] = [];
  let heldChars = 0;
  let edge = '';
  const drop = () => {
    held = [];
    heldChars = 0;
    edge = '';
  };
  /** Ends the stream: `body` is its final event (with its blank line), nothing held or after it is forwarded. */
  const stop = (body: ErrorBody, failure = true): string => {
    if (state.cut) return '';
    drop();
    state.cut = true;
    if (failure) state.failure = body.error.message;
    return `data: ${JSON.stringify(body)}\n\n`;
  };

  /** Returns the event text to forward, '' to drop it, or the final event of a stream it stops. */
  const onEvent = (event: string): string => {
    if (state.cut) return '';
    const data = eventData(event);
    if (data === undefined) return event;
    if (data === '[DONE]') {
      state.done = true;
      return event;
    }
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {}
    if (typeof chunk !== 'object' || chunk === null || Array.isArray(chunk)) return stop(streamEventMalformed());
    const chars = chunkTextChars(chunk);
    if (chars > 0) {
      state.completionChars += chars;
      state.textChunks++;
      const max = opts.maxCompletionTokens;
      if (max !== undefined && outputTokensOf(state) > max) {
        // This chunk would pass the allowance: it is not forwarded (nor counted), the stream ends.
        state.completionChars -= chars;
        state.textChunks--;
        return stop(streamBudgetCut(max), false);
      }
    }
    const u = usageOf(chunk);
    if (u) {
      state.usage = u;
      const choices = (chunk as { choices?: unknown }).choices;
      if (opts.stripUsageChunk && Array.isArray(choices) && choices.length === 0) return '';
    }
    return event;
  };

  const hold = (text: string) => {
    if (text) held.push(text);
    heldChars += text.length;
    edge = (edge + text).slice(-EDGE);
  };
  /** Past the bound: the held event is dropped and the stream ends with an error event. */
  const tooLarge = (): string => (heldChars <= maxEventChars ? '' : stop(streamEventTooLarge(maxEventChars)));

  return {
    state,
    push(text: string): string {
      if (state.cut) return '';
      const probe = edge + text;
      BOUNDARY.lastIndex = 0;
      let m = BOUNDARY.exec(probe);
      if (!m) {
        hold(text);
        return tooLarge();
      }
      // The pending text as one string, once; index i of `probe` is index base + i of `s`.
      const s = held.length ? held.join('') + text : text;
      const base = heldChars - edge.length;
      drop();
      let out = '';
      let start = 0;
      for (; m; m = BOUNDARY.exec(probe)) {
        const at = base + m.index;
        const ev = onEvent(s.slice(start, at));
        if (state.cut) return out + ev;
        if (ev) out += ev + m[0];
        start = at + m[0].length;
      }
      hold(s.slice(start));
      return out + tooLarge();
    },
    /** Whatever is left when the upstream ends (an unterminated last event); an error event if `[DONE]` never came. */
    end(): string {
      const rest = held.join('');
      drop();
      const out = rest ? onEvent(rest) : '';
      if (state.done || state.cut) return out;
      return (out ? `${out}\n\n` : '') + stop(streamUnfinished());
    },
    /** Ends the stream with `body` as its final event (nothing once it is complete or already stopped). */
    fail: (body: ErrorBody): string => (state.done ? '' : stop(body)),
  };
}

/** A Transform around the scanner; `scan` is read once the stream has ended or been cut. */
export interface SseTransform extends Transform {
  scan: SseScanState;
  /**
   * Ends the client's stream now, with `body` as its final event unless the stream was complete
   * (the provider broke off, the deadline passed); what the provider still sends is dropped.
   */
  fail(body: ErrorBody): void;
}

export function sseTransform(opts: ScanOptions): SseTransform {
  const scanner = createSseScanner(opts);
  const decoder = new StringDecoder('utf8');
  let ended = false;
  /**
   * Forwards `out`. Once the scanner stopped the stream (or `last`) the client's stream ends here;
   * a stopped one emits 'cut', on which the owner stops the upstream.
   */
  const forward = (out: string, last = false) => {
    if (out) t.push(Buffer.from(out, 'utf8'));
    if (!scanner.state.cut && !last) return;
    ended = true;
    t.push(null);
    if (scanner.state.cut) t.emit('cut');
  };
  const t = new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      if (!ended) forward(scanner.push(decoder.write(chunk)));
      cb();
    },
    flush(cb: TransformCallback) {
      if (ended) return cb();
      const out = scanner.push(decoder.end()) + scanner.end();
      cb(null, out ? Buffer.from(out, 'utf8') : undefined);
    },
  });
  return Object.assign(t, {
    scan: scanner.state,
    fail(body: ErrorBody) {
      if (!ended) forward(scanner.fail(body), true);
    },
  });
}

/**
 * Relays `src` through `t` to `res` as `stream.pipeline` does: with backpressure; an error on `t`
 * or `res`, or `res` closing before it finished (the client went away), destroys the others (the
 * provider's stream with them). An error of `src` (the provider's stream broke) does not reset the
 * client: `t.fail` ends its stream with the error event `failure` makes of it. `done` once, when
 * `res` has finished or the relay broke, with the error then (or the provider's). Without what
 * pipeline costs every call: an AbortController aborted at the end (a DOMException, its stack
 * captured) and an error made for each stream still open then (the provider's, which ends after
 * the client's side): ~70 µs a streamed completion, measured alone.
 */
export function relay(src: Readable, t: SseTransform, res: Writable, failure: (err: Error) => ErrorBody, done: (err?: Error) => void): void {
  let over = false;
  let broke: Error | undefined;
  const end = (err?: Error) => {
    if (over) return;
    over = true;
    if (err) for (const s of [src, t, res]) if (!s.destroyed) s.destroy(err);
    done(err ?? broke);
  };
  // The listeners stay: a stream destroyed later (the cut provider's) may still emit an error.
  src.on('error', (err: Error) => {
    if (over) return;
    broke ??= err;
    t.fail(failure(err));
  });
  for (const s of [t, res]) s.on('error', end);
  const gone = () => end(Object.assign(new Error('the client closed the stream'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }));
  res.on('finish', () => end());
  res.on('close', () => res.writableFinished || gone());
  // Already gone (its close went by before the relay began): writing to it would stall, not fail.
  if (res.destroyed) return gone();
  src.pipe(t).pipe(res);
}
