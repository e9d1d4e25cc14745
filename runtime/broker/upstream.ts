/**
 * The provider's answer as the broker reads it: a body read up to a bound, and a failed call or
 * a non-2xx answer mapped to the broker's OpenAI-style error (never echoing the provider key).
 */
import type { Dispatcher } from 'undici';
import { errMsg } from '../lib/log.js';
import { firstHeader } from './decision-client.js';
import {
  streamBroken,
  streamStalled,
  upstreamAuth,
  upstreamFailed,
  upstreamRejected,
  upstreamTimeout,
  upstreamUnreachable,
  type ErrorBody,
  type OpenAIError,
} from './openai-error.js';

/** What the mapping needs of the broker's settings. */
export interface UpstreamSettings {
  key: string;
  keyVar: string;
  placeholder: boolean;
  upstreamTimeoutMs: number;
}

/** Reads at most `limit` bytes of an upstream body; undefined when it was longer. */
export async function readUpstream(body: Dispatcher.ResponseData['body'], limit: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of body) {
    size += (c as Buffer).length;
    if (size > limit) {
      body.destroy();
      return undefined;
    }
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}

/** The code of the error that ends a whole (not streamed) answer still arriving at the upstream timeout. */
export const ANSWER_DEADLINE = 'BROKER_ANSWER_DEADLINE';
const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT', ANSWER_DEADLINE]);
const errCode = (e: unknown): string => (e as { code?: string }).code ?? '';

export function upstreamCallError(e: unknown, timeoutMs: number): OpenAIError {
  const code = errCode(e);
  if (TIMEOUT_CODES.has(code)) return upstreamTimeout(timeoutMs);
  return upstreamUnreachable(code || errMsg(e));
}

/** The final SSE event's body for a provider stream that failed after the client's stream began. */
export function streamFailure(e: unknown, timeoutMs: number): ErrorBody {
  const code = errCode(e);
  if (TIMEOUT_CODES.has(code)) return streamStalled(timeoutMs);
  return streamBroken(code || errMsg(e));
}

/** Maps a non-2xx provider answer to the broker's OpenAI-style error. */
export function mapUpstreamStatus(status: number, text: string, headers: Dispatcher.ResponseData['headers'], d: UpstreamSettings): OpenAIError {
  if (status === 401 || status === 403) return upstreamAuth(status, d.keyVar, d.placeholder);
  let msg = '';
  let type = '';
  let code = '';
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown; type?: unknown; code?: unknown } | string };
    const err = j.error;
    if (typeof err === 'string') msg = err;
    else if (err && typeof err === 'object') {
      if (typeof err.message === 'string') msg = err.message;
      if (typeof err.type === 'string') type = err.type;
      if (typeof err.code === 'string') code = err.code;
    }
  } catch {}
  // Never echo the provider key, even if a provider quotes it back.
  msg = (msg || text.slice(0, 300)).split(d.key).join('[redacted]').slice(0, 1000);
  if (status === 408 || status === 504) return upstreamTimeout(d.upstreamTimeoutMs);
  if (status >= 500) return upstreamFailed(`the model provider failed (${status})${msg ? `: ${msg}` : ''}`);
  const extra: Record<string, string> = {};
  const retryAfter = firstHeader(headers['retry-after']);
  if (retryAfter && /^[\w ,:.-]{1,64}$/.test(retryAfter)) extra['retry-after'] = retryAfter;
  if (status === 429)
    return upstreamRejected(
      429,
      type || 'rate_limit_error',
      code || 'rate_limit_exceeded',
      `the model provider is rate limiting: ${msg || 'too many requests'}`,
      extra,
    );
  if (status >= 400 && status < 500)
    return upstreamRejected(status, type || 'invalid_request_error', code || 'upstream_rejected', msg || `the model provider answered ${status}`, {
      'x-should-retry': 'false',
    });
  return upstreamFailed(`unexpected answer from the model provider (${status})`);
}
