/**
 * Error shapes shared by every API.
 * - identity authority: `{error:{code,message}}`, validation `422 {detail:[{loc,msg,type,input?,ctx?}]}`
 * - control-plane usage: `400 {error:'invalid body'}` (SPEC 4.3)
 */
import type { ZodError } from 'zod';

export interface ValidationDetail {
  loc: (string | number)[];
  msg: string;
  type: string;
  input?: unknown;
  ctx?: Record<string, unknown>;
}

/** A failure a handler can throw; the API error handler turns it into the envelope. */
export class ApiError extends Error {
  constructor(
    readonly status: 400 | 401 | 403 | 404 | 409 | 413 | 415 | 422 | 429 | 503,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

export const notFound = (what: string, id: string): ApiError =>
  new ApiError(404, 'not_found', `${what} ${JSON.stringify(id)} not found`);
export const conflict = (code: string, message: string, extra: Record<string, unknown> = {}): ApiError =>
  new ApiError(409, code, message, extra);
export const badRequest = (code: string, message: string): ApiError => new ApiError(400, code, message);

export function envelope(code: string, message: string, extra: Record<string, unknown> = {}) {
  return { error: { code, message, ...extra } };
}

/** Converts zod issues to the pydantic-style `detail` list; `where` is the request part. */
export function zodDetail(err: ZodError, where: string): ValidationDetail[] {
  return err.issues.map((i) => {
    const d: ValidationDetail = {
      loc: [where, ...i.path.map((p) => (typeof p === 'number' ? p : String(p)))],
      msg: i.message,
      type: i.code,
    };
    const ctx: Record<string, unknown> = {};
    for (const k of ['expected', 'minimum', 'maximum', 'keys', 'values', 'format'] as const) {
      if (k in i) ctx[k] = (i as unknown as Record<string, unknown>)[k];
    }
    if (Object.keys(ctx).length) d.ctx = ctx;
    return d;
  });
}
