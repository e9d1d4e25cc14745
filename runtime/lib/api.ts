/**
 * Factory for the JSON management APIs (hono + zod-openapi): one validation hook that answers
 * 422 `{detail:[…]}`, one error handler that answers `{error:{code,message}}` and never a 500
 * body with internals, and a body-size limit.
 */
import { OpenAPIHono } from '@hono/zod-openapi';
import { bodyLimit } from 'hono/body-limit';
import { HTTPException } from 'hono/http-exception';
import type { Context, MiddlewareHandler } from 'hono';
import { ApiError, envelope, zodDetail } from './errors.js';
import { logger } from './log.js';

const log = logger('api');

/** Default request body limit of the management APIs (SPEC is silent: 1 MiB). */
export const DEFAULT_BODY_LIMIT = 1024 * 1024;

export function validationHook(result: { success: boolean; error?: unknown; target: string }, c: Context) {
  if (!result.success) {
    return c.json({ detail: zodDetail(result.error as import('zod').ZodError, result.target === 'json' ? 'body' : result.target) }, 422);
  }
  return undefined;
}

export function onApiError(err: Error, c: Context): Response {
  if (err instanceof ApiError) return c.json(envelope(err.code, err.message, err.extra), err.status);
  if (err instanceof HTTPException) {
    const status = err.status;
    if (status === 400 && /Malformed JSON/i.test(err.message)) {
      return c.json({ detail: [{ loc: ['body'], msg: 'JSON decode error: body is not valid JSON', type: 'json_invalid' }] }, 422);
    }
    if (status === 413) return c.json(envelope('payload_too_large', err.message || 'request body too large'), 413);
    if (status === 415) return c.json(envelope('unsupported_media_type', 'Content-Type must be application/json'), 415);
    return c.json(envelope('http_error', err.message || 'request failed'), status);
  }
  log.error('unhandled error', { err: err.message, stack: err.stack, path: c.req.path });
  return c.json(envelope('internal_error', 'internal error'), 500);
}

/**
 * An OpenAPIHono app with the shared error shapes and a request body limit: `bodyLimit` bytes
 * (default DEFAULT_BODY_LIMIT), or what `bodyLimitFor(path)` says for a path that needs more.
 */
export function createApi(opts: { bodyLimit?: number; bodyLimitFor?: (path: string) => number | undefined } = {}): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: validationHook });
  const max = opts.bodyLimit ?? DEFAULT_BODY_LIMIT;
  const limiters = new Map<number, MiddlewareHandler>();
  const limiter = (n: number): MiddlewareHandler => {
    let m = limiters.get(n);
    if (!m) {
      m = bodyLimit({ maxSize: n, onError: (c) => c.json(envelope('payload_too_large', `request body exceeds ${n} bytes`), 413) });
      limiters.set(n, m);
    }
    return m;
  };
  const fixed = limiter(max);
  const pick = opts.bodyLimitFor;
  app.use('*', pick ? (c, next) => limiter(pick(c.req.path) ?? max)(c, next) : fixed);
  app.onError(onApiError);
  app.notFound((c) => c.json(envelope('not_found', `no route for ${c.req.method} ${c.req.path}`), 404));
  return app;
}
