/**
 * A chat completion request as the broker takes it. Pure: the body checked (JSON no deeper than
 * MAX_BODY_DEPTH, the fields the broker reads), the output the call may generate over all its
 * choices (the worst case its reservation holds), and the body the provider gets (the provider
 * model, the output asked for never above the model's cap, usage asked for on a stream).
 */
import { MAX_CALL_TOKENS } from '../lib/reservation-header.js';
import type { ModelEntry } from './config.js';
import { invalidRequest, modelNotFound, type OpenAIError } from './openai-error.js';

export interface Route {
  entry: ModelEntry;
  origin: string;
  path: string;
}

/** Deepest nesting of arrays and objects a request body may have (the body itself is level 1). */
export const MAX_BODY_DEPTH = 64;
/** Most choices (`n`) one request may ask for. */
export const MAX_CHOICES = 128;
/** The request fields that bound one choice's output. */
const OUTPUT_FIELDS = ['max_completion_tokens', 'max_tokens'] as const;

export interface Completion {
  actor: string;
  route: Route;
  body: Record<string, unknown>;
  stream: boolean;
  clientWantsUsage: boolean;
  /** The request body's size in bytes (bounds the prompt's tokens; the prompt estimate). */
  requestBytes: number;
  /** Output tokens the call may generate over all its choices: the worst case reserved. */
  outputTokens: number;
  /** The body sent to the provider. */
  payload: string;
}

/**
 * True when the JSON text `raw` nests arrays and objects deeper than `max`: one pass over the
 * bytes before it is parsed (strings skipped with indexOf), so a hostile depth is refused
 * before anything recurses over it (JSON.stringify overflowed the stack at ~5000 levels).
 */
export function nestedDeeperThan(raw: Buffer, max: number): boolean {
  let depth = 0;
  for (let i = 0; i < raw.length; i++) {
    const b = raw[i];
    if (b === 0x22) {
      // To the closing quote: the next one not escaped (after an even run of backslashes).
      for (;;) {
        i = raw.indexOf(0x22, i + 1);
        if (i === -1) return false; // unterminated: JSON.parse refuses it
        let k = i - 1;
        while (raw[k] === 0x5c) k--;
        if ((i - 1 - k) % 2 === 0) break;
      }
    } else if (b === 0x7b || b === 0x5b) {
      if (++depth > max) return true;
    } else if (b === 0x7d || b === 0x5d) depth--;
  }
  return false;
}

/** Output tokens one choice may generate: the larger `max_completion_tokens` / `max_tokens` given, at most the model's cap; the cap when neither is. */
function perChoice(body: Record<string, unknown>, cap: number): number {
  let want = 0;
  for (const k of OUTPUT_FIELDS) {
    const v = body[k];
    if (typeof v === 'number' && Number.isInteger(v) && v > 0) want = Math.max(want, Math.min(v, cap));
  }
  return want || cap;
}

/** The provider's body: its model id, the output asked for capped at the model's (what was reserved), usage asked for on a stream. */
function upstreamPayload(b: Record<string, unknown>, entry: ModelEntry, stream: boolean): string {
  const up: Record<string, unknown> = { ...b, model: entry.model };
  for (const k of OUTPUT_FIELDS) {
    const v = up[k];
    if (typeof v === 'number' && v > entry.maxOutputTokens) up[k] = entry.maxOutputTokens;
  }
  if (stream) up.stream_options = { ...((b.stream_options as object | null | undefined) ?? {}), include_usage: true };
  return JSON.stringify(up);
}

/** Checks the request; returns the completion or the error to answer. */
export function parseCompletion(raw: Buffer, actor: string, routes: ReadonlyMap<string, Route>): Completion | OpenAIError {
  if (nestedDeeperThan(raw, MAX_BODY_DEPTH)) return invalidRequest(`request body is nested deeper than ${MAX_BODY_DEPTH} levels`);
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    return invalidRequest('request body is not valid JSON', 'invalid_json');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return invalidRequest('request body must be a JSON object');
  const b = body as Record<string, unknown>;
  if (typeof b.model !== 'string' || !b.model) return invalidRequest('`model` is required and must be a string', 'invalid_model');
  if (!Array.isArray(b.messages) || b.messages.length === 0) return invalidRequest('`messages` is required and must be a non-empty array', 'invalid_messages');
  if (b.stream !== undefined && b.stream !== null && typeof b.stream !== 'boolean') return invalidRequest('`stream` must be a boolean', 'invalid_stream');
  const so = b.stream_options;
  if (so !== undefined && so !== null && (typeof so !== 'object' || Array.isArray(so)))
    return invalidRequest('`stream_options` must be an object', 'invalid_stream_options');
  // Each choice generates its own output: the worst case is n times one choice's.
  const n = b.n ?? 1;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > MAX_CHOICES)
    return invalidRequest(`\`n\` must be an integer from 1 to ${MAX_CHOICES}`, 'invalid_n');
  const route = routes.get(b.model);
  if (!route) return modelNotFound(b.model);
  const outputTokens = n * perChoice(b, route.entry.maxOutputTokens);
  if (outputTokens > MAX_CALL_TOKENS)
    return invalidRequest(`this call may generate ${outputTokens} tokens (n times the output of one choice), more than ${MAX_CALL_TOKENS}`, 'invalid_n');
  const stream = b.stream === true;
  const clientWantsUsage = stream && (so as { include_usage?: unknown } | null | undefined)?.include_usage === true;
  return {
    actor,
    route,
    body: b,
    stream,
    clientWantsUsage,
    requestBytes: raw.length,
    outputTokens,
    payload: upstreamPayload(b, route.entry, stream),
  };
}
