/**
 * `tools/list` answers cut down to the tools an agent may call (issue 42), without parsing and
 * writing the whole answer again. A structural scan (lib/json-slices.ts) finds the answer's
 * `result.tools` array and each tool's `name`, and the answer is spliced: its bytes before the
 * array, the kept tools' own bytes, its bytes after the array. What goes out is still only what
 * JSON.parse accepts and reads as the scan did: each kept tool is parsed and its parsed name must
 * be the one the scan read, and the answer around the array is parsed with the array empty (the
 * dropped tools, most of a large list, are never parsed). A batch, a tool naming itself twice
 * (parsers differ on which name wins), a later `result.tools` that lists anything, or anything else
 * the scan does not expect takes the whole-parse path, which keeps what JSON.parse keeps. An answer that is not JSON is
 * refused, never passed on unfiltered: a lenient client might read what JSON.parse refuses.
 */
import { skipWs, stringEnd, valueEnd, WS } from '../lib/json-slices.js';

/** May the agent see the tool of this name? (control-plane/decision/tool.ts `mayList`) */
export type MayList = (name: string) => boolean;

/** The upstream's `tools/list` answer could not be read as JSON: it is refused, not passed on. */
export class UnreadableList extends Error {}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;
const COMMA = 0x2c;
const COMMA_BUF = Buffer.from(',');
const OPEN_BUF = Buffer.from('[');
const CLOSE_BUF = Buffer.from(']');

/** A JSON body (one JSON-RPC message or a batch) with every `result.tools` cut to what `may` allows. */
export function filterListAnswer(body: Buffer, may: MayList): Buffer {
  try {
    const spliced = splice(body, may);
    if (spliced) return spliced;
  } catch (e) {
    if (!(e instanceof SyntaxError)) throw e;
  }
  return reparse(body, may);
}

/** The whole-parse path: parsed, filtered and written again (the body as it came when it lists no tools). */
function reparse(body: Buffer, may: MayList): Buffer {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    throw new UnreadableList('the answer is not JSON');
  }
  let changed = false;
  for (const m of Array.isArray(v) ? v : [v]) {
    const result = (m as { result?: { tools?: unknown } } | null)?.result;
    if (result === null || typeof result !== 'object' || !Array.isArray(result.tools)) continue;
    result.tools = result.tools.filter((t: unknown) => {
      const name = (t as { name?: unknown } | null)?.name;
      return typeof name === 'string' && may(name);
    });
    changed = true;
  }
  return changed ? Buffer.from(JSON.stringify(v)) : body;
}

/** The spliced answer, or undefined when it is not one message with one `result.tools` array. */
function splice(b: Buffer, may: MayList): Buffer | undefined {
  const start = skipWs(b, 0);
  if (b[start] !== OPEN_OBJECT) return undefined;
  const result = memberValue(b, start, 'result');
  if (result < 0 || b[result] !== OPEN_OBJECT) return undefined;
  const open = memberValue(b, result, 'tools');
  if (open < 0 || b[open] !== OPEN_ARRAY) return undefined;
  const tools = keptTools(b, open, may);
  if (!tools) return undefined;
  // The answer around the array parses, and with the array empty its tools are none: a later
  // `result` or `tools` member (which JSON.parse would take) lists nothing either.
  const around = JSON.parse(b.toString('utf8', start, open + 1) + b.toString('utf8', tools.close)) as { result?: { tools?: unknown } };
  if (!Array.isArray(around.result?.tools) || around.result.tools.length !== 0) return undefined;
  const array: Buffer[] = [OPEN_BUF];
  tools.kept.forEach((t, n) => array.push(...(n ? [COMMA_BUF, t] : [t])));
  array.push(CLOSE_BUF);
  const kept = Buffer.concat(array);
  // What is kept parses, as the tools the scan named, in its order.
  const parsed = JSON.parse(kept.toString('utf8')) as { name?: unknown }[];
  if (parsed.length !== tools.names.length || parsed.some((t, n) => t?.name !== tools.names[n])) return undefined;
  return Buffer.concat([b.subarray(start, open), kept, b.subarray(tools.close + 1)]);
}

/**
 * The tools of the array at `open` that `may` allows (their bytes and names), and where the array
 * closes; undefined when a kept tool names itself twice. One pass: strings are skipped whole
 * (their escapes honoured), brackets counted, and a tool's `name` read where a member name stands
 * directly in the tool's object. The scan does not validate: what it keeps, JSON.parse does.
 */
function keptTools(b: Buffer, open: number, may: MayList): { kept: Buffer[]; names: string[]; close: number } | undefined {
  const kept: Buffer[] = [];
  const names: string[] = [];
  const n = b.length;
  let depth = 0;
  let from = -1;
  let inObject = false;
  let name: string | undefined;
  let seen = 0;
  let prev = OPEN_ARRAY;
  for (let i = open + 1; i < n; i++) {
    const c = b[i]!;
    if (c === QUOTE) {
      let end = stringEnd(b, i);
      if (depth === 1 && inObject && (prev === OPEN_OBJECT || prev === COMMA) && isName(b, i, end)) {
        const at = skipWs(b, end);
        if (b[at] !== 0x3a) throw new SyntaxError(`':' expected at byte ${at}`);
        const value = skipWs(b, at + 1);
        seen++;
        name = undefined;
        if (b[value] === QUOTE) {
          end = stringEnd(b, value);
          name = text(b, value, end);
        } else end = value;
      }
      i = end - 1;
      prev = QUOTE;
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (depth === 0) [from, inObject, name, seen] = [i, c === OPEN_OBJECT, undefined, 0];
      depth++;
      prev = c;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      if (depth === 0) return { kept, names, close: i };
      depth--;
      if (depth === 0 && name !== undefined && may(name)) {
        if (seen !== 1) return undefined;
        kept.push(b.subarray(from, i + 1));
        names.push(name);
      }
      prev = c;
    } else if (!WS[c]) prev = c;
  }
  throw new SyntaxError('unterminated tools array');
}

/** Is the string from `from` to `to` the member name `name`? */
const isName = (b: Buffer, from: number, to: number): boolean =>
  to - from === 6
    ? b[from + 1] === 0x6e && b[from + 2] === 0x61 && b[from + 3] === 0x6d && b[from + 4] === 0x65
    : hasEscape(b, from, to) && text(b, from, to) === 'name';

/**
 * Where the value of the first member `key` of the object at `at` starts, or -1 when it has none.
 * Members after it are not read: the parse of the answer around the tools array covers them.
 */
function memberValue(b: Buffer, at: number, key: string): number {
  let i = skipWs(b, at + 1);
  if (b[i] === CLOSE_OBJECT) return -1;
  for (;;) {
    if (b[i] !== QUOTE) throw new SyntaxError(`member name expected at byte ${i}`);
    const keyEnd = stringEnd(b, i);
    const isKey = keyEnd - i - 2 === key.length || hasEscape(b, i, keyEnd) ? text(b, i, keyEnd) === key : false;
    i = skipWs(b, keyEnd);
    if (b[i] !== 0x3a) throw new SyntaxError(`':' expected at byte ${i}`);
    i = skipWs(b, i + 1);
    if (isKey) return i;
    i = skipWs(b, valueEnd(b, i));
    if (b[i] === COMMA) i = skipWs(b, i + 1);
    else if (b[i] === CLOSE_OBJECT) return -1;
    else throw new SyntaxError(`',' or '}' expected at byte ${i}`);
  }
}

function hasEscape(b: Buffer, from: number, to: number): boolean {
  for (let k = from; k < to; k++) if (b[k] === BACKSLASH) return true;
  return false;
}

/** The string from `from` (its opening quote) to `to` (past its closing quote), escapes decoded. */
const text = (b: Buffer, from: number, to: number): string =>
  hasEscape(b, from, to) ? (JSON.parse(b.toString('utf8', from, to)) as string) : b.toString('utf8', from + 1, to - 1);

/**
 * An SSE answer (text/event-stream) with the data of each event filtered as a JSON body; events
 * without data (comments, a priming event) pass, and events keep their order. Filtered data is
 * written back one `data:` line per line, so the event carries the same text.
 */
export function filterListEvents(events: string, may: MayList): string {
  return events
    .split(/(\r?\n\r?\n)/)
    .map((part) => {
      const lines = part.split(/\r?\n/);
      const data = lines.filter((l) => l.startsWith('data:')).map((l) => l.slice(l.startsWith('data: ') ? 6 : 5));
      if (data.join('').trim() === '') return part;
      const body = Buffer.from(data.join('\n'));
      const out = filterListAnswer(body, may);
      if (out === body) return part;
      const dataLines = out
        .toString('utf8')
        .split('\n')
        .map((l) => `data: ${l}`);
      return [...lines.filter((l) => !l.startsWith('data:')), ...dataLines].join('\n');
    })
    .join('');
}
