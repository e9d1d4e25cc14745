/**
 * JSON.parse for very large request bodies that must not hold the event loop (a 100k-user SCIM
 * snapshot is ~90 MB: one JSON.parse of it blocks every other listener of the process for most
 * of a second). The top-level object is taken apart by a small structural scanner: each member
 * value, and each element of a member that is an array, is handed to the native JSON.parse on its
 * own, and the loop gets a turn whenever a slice of work has taken `sliceMs`. The scanner only
 * finds where values end (strings with their escapes, nesting); JSON.parse validates every byte of
 * every value, so what this accepts and what it returns are exactly JSON.parse's. A body that is not
 * a top-level object, or is small, goes to JSON.parse whole.
 */

/** JSON's whitespace bytes (1), indexed by byte. */
export const WS = new Uint8Array(256);
for (const c of [0x20, 0x09, 0x0a, 0x0d]) WS[c] = 1;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Below this size one JSON.parse is short enough (about a millisecond per 100 kB). */
export const SLICED_PARSE_MIN_BYTES = 512 * 1024;

export interface SliceOptions {
  /** Work between two turns of the event loop (default 8 ms). */
  sliceMs?: number;
  /**
   * Called with each element of a top-level member that is an array (its member name and index),
   * as soon as it is parsed; may throw to stop the parse. Only for a top-level object.
   */
  onElement?: (value: unknown, member: string, index: number) => void;
  /** Called with each top-level member value that is not an array; may throw to stop the parse. */
  onMember?: (value: unknown, member: string) => void;
}

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function malformed(at: number, what: string): SyntaxError {
  return new SyntaxError(`malformed JSON at byte ${at}: ${what}`);
}

/** Index just past the string starting at `i` (a quote). */
export function stringEnd(b: Buffer, i: number): number {
  let j = i + 1;
  for (;;) {
    const q = b.indexOf(QUOTE, j);
    if (q < 0) throw malformed(i, 'unterminated string');
    let k = q - 1;
    while (b[k] === BACKSLASH) k--;
    // An even number of backslashes before the quote: it closes the string.
    if ((q - 1 - k) % 2 === 0) return q + 1;
    j = q + 1;
  }
}

/** Index just past the value starting at `i` (not validated: JSON.parse does that). */
export function valueEnd(b: Buffer, i: number): number {
  const c = b[i];
  if (c === QUOTE) return stringEnd(b, i);
  if (c === 0x7b || c === 0x5b) {
    let depth = 0;
    let j = i;
    while (j < b.length) {
      const d = b[j]!;
      if (d === QUOTE) {
        j = stringEnd(b, j);
        continue;
      }
      if (d === 0x7b || d === 0x5b) depth++;
      else if (d === 0x7d || d === 0x5d) {
        depth--;
        if (depth === 0) return j + 1;
      }
      j++;
    }
    throw malformed(i, 'unterminated object or array');
  }
  // A number, true, false or null: up to the next delimiter.
  let j = i;
  while (j < b.length) {
    const d = b[j]!;
    if (d === 0x2c || d === 0x5d || d === 0x7d || WS[d]) break;
    j++;
  }
  if (j === i) throw malformed(i, 'value expected');
  return j;
}

/** Index of the first byte at or after `i` that is not JSON whitespace. */
export const skipWs = (b: Buffer, i: number): number => {
  while (i < b.length && WS[b[i]!]) i++;
  return i;
};

const parseSpan = (b: Buffer, from: number, to: number): unknown => JSON.parse(b.toString('utf8', from, to));

/** Sets an own enumerable property as JSON.parse does (a `__proto__` key is a plain property). */
function define(o: Record<string, unknown>, k: string, v: unknown): void {
  Object.defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
}

/** Parses `body` (UTF-8 JSON) as JSON.parse would, giving the event loop a turn every `sliceMs`. */
export async function parseJsonInSlices(body: Buffer, opts: SliceOptions = {}): Promise<unknown> {
  const sliceMs = opts.sliceMs ?? 8;
  // A UTF-8 byte order mark is dropped, as TextDecoder (and so Request.text()) drops it.
  const bom = body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
  let i = skipWs(body, bom);
  if (body.length < SLICED_PARSE_MIN_BYTES || body[i] !== 0x7b) {
    const v: unknown = JSON.parse(body.toString('utf8', bom));
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
      for (const [k, m] of Object.entries(v)) {
        if (Array.isArray(m)) m.forEach((e, n) => opts.onElement?.(e, k, n));
        else opts.onMember?.(m, k);
      }
    }
    return v;
  }
  let sliceStart = performance.now();
  const pace = async () => {
    if (performance.now() - sliceStart < sliceMs) return;
    await turn();
    sliceStart = performance.now();
  };
  const out: Record<string, unknown> = {};
  i = skipWs(body, i + 1);
  if (body[i] === 0x7d) i++;
  else {
    for (;;) {
      if (body[i] !== QUOTE) throw malformed(i, 'member name expected');
      const keyEnd = stringEnd(body, i);
      const key = parseSpan(body, i, keyEnd) as string;
      i = skipWs(body, keyEnd);
      if (body[i] !== 0x3a) throw malformed(i, "':' expected");
      i = skipWs(body, i + 1);
      if (body[i] === 0x5b) {
        const list: unknown[] = [];
        i = skipWs(body, i + 1);
        if (body[i] === 0x5d) i++;
        else {
          for (;;) {
            const end = valueEnd(body, i);
            const v = parseSpan(body, i, end);
            opts.onElement?.(v, key, list.length);
            list.push(v);
            i = skipWs(body, end);
            await pace();
            if (body[i] === 0x2c) i = skipWs(body, i + 1);
            else if (body[i] === 0x5d) {
              i++;
              break;
            } else throw malformed(i, "',' or ']' expected");
          }
        }
        define(out, key, list);
      } else {
        const end = valueEnd(body, i);
        const v = parseSpan(body, i, end);
        opts.onMember?.(v, key);
        define(out, key, v);
        i = end;
        await pace();
      }
      i = skipWs(body, i);
      if (body[i] === 0x2c) i = skipWs(body, i + 1);
      else if (body[i] === 0x7d) {
        i++;
        break;
      } else throw malformed(i, "',' or '}' expected");
    }
  }
  if (skipWs(body, i) !== body.length) throw malformed(i, 'unexpected data after the value');
  return out;
}
