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

export const notFound = (what: string, id: string): ApiError => new ApiError(404, 'not_found', `${what} ${JSON.stringify(id)} not found`);
export const conflict = (code: string, message: string, extra: Record<string, unknown> = {}): ApiError => new ApiError(409, code, message, extra);
export const badRequest = (code: string, message: string): ApiError => new ApiError(400, code, message);
export const forbidden = (code: string, message: string): ApiError => new ApiError(403, code, message);

/** A unique or primary-key violation (SQLSTATE 23505), however deep the driver wrapped it. */
export function isUniqueViolation(e: unknown): boolean {
  for (let c: unknown = e, i = 0; c && i < 5; c = (c as { cause?: unknown }).cause, i++) {
    if ((c as { code?: unknown }).code === '23505') return true;
  }
  return false;
}

/** A store call ran past its deadline; it was cancelled and rolled back, so it never takes effect. */
export class StoreTimeoutError extends Error {
  readonly code = 'STORE_TIMEOUT';
}

// postgres.js connection codes, Node socket codes, and SQLSTATEs of a lost, shut-down or cancelled backend.
const UNAVAILABLE = new Set([
  'STORE_TIMEOUT',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  '57014',
  '57P01',
  '57P02',
  '57P03',
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  '25P03',
  '40001',
  '40P01',
  '53300',
]);

/**
 * Is `e` a failure of the store rather than of the request: a failed query (drizzle wraps it with
 * its `query`), a database error (SQLSTATE `code`), a lost connection, a deadline, a closed PGlite?
 * The APIs answer these 503: the operation did not complete and may be retried.
 */
export function isStoreError(e: unknown): boolean {
  for (let x: unknown = e, i = 0; x instanceof Error && i < 4; x = (x as { cause?: unknown }).cause, i++) {
    const code = (x as { code?: unknown }).code;
    if (typeof code === 'string' && (UNAVAILABLE.has(code) || /^[0-9A-Z]{5}$/.test(code))) return true;
    if ('query' in x && 'params' in x) return true;
    if (x.name === 'PostgresError' || /PGlite is closed/.test(x.message)) return true;
  }
  return false;
}

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
