/**
 * Token accounting. Pure: reads the `usage` object of a completion (or of the final stream chunk)
 * and prices it from the model table. When a stream ends early (client gone, upstream reset) the
 * provider never sends its usage; the broker then estimates from characters (about 4 per token,
 * the usual rule of thumb for English BPE tokenizers) so an agent cannot dodge its budget by
 * hanging up before the final chunk.
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

/** Characters of the text parts of the request messages (the prompt), for an estimate. */
export function promptChars(messages: unknown): number {
  if (!Array.isArray(messages)) return 0;
  let n = 0;
  for (const m of messages) {
    if (typeof m !== 'object' || m === null) continue;
    const content = (m as { content?: unknown }).content;
    if (typeof content === 'string') n += content.length;
    else if (Array.isArray(content)) {
      for (const part of content) {
        const t = typeof part === 'object' && part !== null ? (part as { text?: unknown }).text : undefined;
        if (typeof t === 'string') n += t.length;
      }
    }
  }
  return n;
}

/** Usage estimated from prompt characters and the completion characters streamed so far. */
export function estimateUsage(promptCharCount: number, completionCharCount: number): TokenUsage {
  const promptTokens = tokensOfChars(promptCharCount);
  const completionTokens = tokensOfChars(completionCharCount);
  return { promptTokens, completionTokens, totalTokens: promptTokens + completionTokens, estimated: true };
}

/** Characters of generated text in one stream chunk (`choices[].delta.content` and tool-call arguments). */
export function chunkTextChars(chunk: unknown): number {
  if (typeof chunk !== 'object' || chunk === null) return 0;
  const choices = (chunk as { choices?: unknown }).choices;
  if (!Array.isArray(choices)) return 0;
  let n = 0;
  for (const c of choices) {
    const d = typeof c === 'object' && c !== null ? (c as { delta?: unknown }).delta : undefined;
    if (typeof d !== 'object' || d === null) continue;
    const delta = d as { content?: unknown; reasoning_content?: unknown; tool_calls?: unknown };
    if (typeof delta.content === 'string') n += delta.content.length;
    if (typeof delta.reasoning_content === 'string') n += delta.reasoning_content.length;
    if (Array.isArray(delta.tool_calls)) {
      for (const t of delta.tool_calls) {
        const f = typeof t === 'object' && t !== null ? (t as { function?: { arguments?: unknown; name?: unknown } }).function : undefined;
        if (typeof f?.arguments === 'string') n += f.arguments.length;
        if (typeof f?.name === 'string') n += f.name.length;
      }
    }
  }
  return n;
}
