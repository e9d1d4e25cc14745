/**
 * Token accounting. Pure: reads the `usage` object of a completion (or of the final stream chunk)
 * and prices it from the model table. When a stream ends early (client gone, upstream reset) or a
 * provider reports no usage, the broker estimates: the prompt from the request body's size, the
 * output from the generated characters (about 4 per token, the usual rule of thumb for English
 * BPE tokenizers) so an agent cannot dodge its budget by hanging up before the final chunk.
 */
import type { ModelEntry } from './config.js';

export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  /** True when counted by the broker, not reported by the provider. */
  estimated: boolean;
}

const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.floor(v) : 0);

/** The provider-reported usage of a completion body or chunk, or undefined when absent. */
export function usageOf(body: unknown): TokenUsage | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const u = (body as { usage?: unknown }).usage;
  if (typeof u !== 'object' || u === null) return undefined;
  const r = u as Record<string, unknown>;
  const promptTokens = count(r.prompt_tokens);
  const completionTokens = count(r.completion_tokens);
  const total = count(r.total_tokens);
  return { promptTokens, completionTokens, totalTokens: Math.max(total, promptTokens + completionTokens), estimated: false };
}

/** USD cost, rounded to 1e-9 so sums of many small calls do not drift in float noise. */
export function costUsd(u: TokenUsage, m: Pick<ModelEntry, 'priceInputPer1k' | 'priceOutputPer1k'>): number {
  const c = (u.promptTokens * m.priceInputPer1k + u.completionTokens * m.priceOutputPer1k) / 1000;
  return Math.round(c * 1e9) / 1e9;
}

export const CHARS_PER_TOKEN = 4;

const tokensOfChars = (chars: number): number => (chars <= 0 ? 0 : Math.ceil(chars / CHARS_PER_TOKEN));

/**
 * Usage estimated from the request body's size in bytes and the generated characters seen. The
 * whole request counts as prompt (messages, tools, functions, image parts, response formats):
 * the provider bills all of it, so one byte in CHARS_PER_TOKEN is charged, more than any text
 * tokenizes to (JSON punctuation included) and never above the worst case reserved (a token per byte).
 */
export function estimateUsage(requestBytes: number, completionCharCount: number): TokenUsage {
  const promptTokens = tokensOfChars(requestBytes);
  const completionTokens = tokensOfChars(completionCharCount);
  return { promptTokens, completionTokens, totalTokens: promptTokens + completionTokens, estimated: true };
}

/** Keys of a message or delta that are not generated text: its role, a tool call's id, type and index. */
const NOT_GENERATED = new Set(['role', 'id', 'type', 'index']);
/** Deeper than any message a provider sends; strings below it are not walked (the stack stays bounded). */
const MAX_WALK_DEPTH = 16;

/**
 * Characters of every string in a message or delta but its role, ids and types: `content` (or its
 * text parts), `refusal`, `reasoning` / `reasoning_content`, tool and function call names and
 * arguments, and any field a provider adds, so no field carries output past the count.
 */
function generatedChars(v: unknown, depth: number): number {
  if (typeof v === 'string') return v.length;
  if (typeof v !== 'object' || v === null || depth > MAX_WALK_DEPTH) return 0;
  let n = 0;
  if (Array.isArray(v)) {
    for (const x of v) n += generatedChars(x, depth + 1);
    return n;
  }
  for (const k in v) if (!NOT_GENERATED.has(k)) n += generatedChars((v as Record<string, unknown>)[k], depth + 1);
  return n;
}

/** Generated characters in `choices[].<field>` of a completion body or stream chunk. */
function choicesChars(body: unknown, field: 'delta' | 'message'): number {
  if (typeof body !== 'object' || body === null) return 0;
  const choices = (body as { choices?: unknown }).choices;
  if (!Array.isArray(choices)) return 0;
  let n = 0;
  for (const c of choices) if (typeof c === 'object' && c !== null) n += generatedChars((c as Record<string, unknown>)[field], 0);
  return n;
}

/** Characters of generated output in one stream chunk (every choice's delta). */
export const chunkTextChars = (chunk: unknown): number => choicesChars(chunk, 'delta');

/** Characters of generated output in a whole (non-streamed) completion (every choice's message). */
export const completionTextChars = (body: unknown): number => choicesChars(body, 'message');
