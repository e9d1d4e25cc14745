/**
 * Factory for the JSON management APIs (hono + zod-openapi): one validation hook that answers
 * 422 `{detail:[…]}`, one error handler that answers `{error:{code,message}}` and never a 500
 * body with internals, and a body-size limit.
 *
 * Input no store can hold is rejected here, once for every route: a NUL character or an unpaired
 * UTF-16 surrogate in any string (body values and keys, path and query parameters), and JSON
 * nested deeper than MAX_INPUT_DEPTH (free-form fields such as capability `constraints`).
 */
import { OpenAPIHono, z } from '@hono/zod-openapi';
import { bodyLimit } from 'hono/body-limit';
import { HTTPException } from 'hono/http-exception';
import type { Context, MiddlewareHandler } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { isUtf8 } from 'node:buffer';
import type { IncomingMessage } from 'node:http';
import { ApiError, envelope, isStoreError, zodDetail, type ValidationDetail } from './errors.js';
import { parseJsonInSlices } from './json-slices.js';
import { hasBody, readBody } from './http.js';
import { errMsg, logger, withoutParams } from './log.js';

const log = logger('api');

/** Default request body limit of the management APIs (SPEC is silent: 1 MiB). */
/** A producer's name as an apply's `owner` (`api`, `folder:<path>`, `kubernetes:<cluster>`, ...). */
export const ProducerOwner = z
  .string()
  .min(1)
  .max(300)
  .regex(/^[\x21-\x7e][\x20-\x7e]*$/, 'owner: printable ASCII');

export const DEFAULT_BODY_LIMIT = 1024 * 1024;

/** Deepest nesting of arrays and objects a request may carry (the body itself is level 1). */
export const MAX_INPUT_DEPTH = 32;

// Code units, no `u` flag: a NUL, a high surrogate not followed by a low one, a low one not preceded by a high one.
const NUL_OR_LONE_SURROGATE = /\0|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const badString = (s: string): boolean => NUL_OR_LONE_SURROGATE.test(s);
const STRING_DETAIL = { msg: 'string contains a NUL character or an unpaired surrogate', type: 'string_invalid_characters' };

/** Parts of a request body already walked by `inputProblems` as they were parsed (slicedJsonBody). */
const vetted = new WeakSet<object>();

/**
 * What in a parsed request value no store can hold: strings (values or keys) with a NUL or an
 * unpaired surrogate, and nesting deeper than MAX_INPUT_DEPTH. The recursion never goes deeper
 * than that bound (so a hostile depth cannot overflow the stack), shares one path array (a 100k-
 * user SCIM body is walked without an allocation per node), and stops after a few findings.
 */
export function inputProblems(value: unknown, where: string | readonly (string | number)[]): ValidationDetail[] {
  const out: ValidationDetail[] = [];
  const path: (string | number)[] = typeof where === 'string' ? [where] : [...where];
  const walk = (v: unknown): void => {
    if (out.length >= 10) return;
    if (typeof v === 'string') {
      if (badString(v)) out.push({ loc: [...path], ...STRING_DETAIL });
      return;
    }
    if (v === null || typeof v !== 'object' || vetted.has(v)) return;
    if (path.length > MAX_INPUT_DEPTH) {
      out.push({ loc: [...path], msg: `nested deeper than ${MAX_INPUT_DEPTH} levels`, type: 'too_deep', ctx: { max_depth: MAX_INPUT_DEPTH } });
      return;
    }
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        path.push(i);
        walk(v[i]);
        path.pop();
      }
      return;
    }
    for (const k in v) {
      if (!Object.prototype.hasOwnProperty.call(v, k)) continue;
      path.push(k);
      if (badString(k)) out.push({ loc: [...path], ...STRING_DETAIL });
      else walk((v as Record<string, unknown>)[k]);
      path.pop();
    }
  };
  walk(value);
  return out;
}

/** Path segments and query parameters of a request URL that decode to a NUL, or do not decode at all. */
export function urlProblems(url: string): ValidationDetail[] {
  const u = new URL(url);
  const out: ValidationDetail[] = [];
  const check = (raw: string, loc: (string | number)[]) => {
    let s: string;
    try {
      s = decodeURIComponent(raw);
    } catch {
      out.push({ loc, msg: 'percent-encoding is not valid UTF-8', type: 'string_invalid_characters' });
      return;
    }
    if (badString(s)) out.push({ loc, ...STRING_DETAIL });
  };
  if (u.pathname.includes('%')) check(u.pathname, ['path']);
  if (u.search.includes('%') || u.search.includes('\0')) {
    for (const pair of u.search.slice(1).split('&')) {
      const [k = '', v = ''] = pair.replace(/\+/g, ' ').split('=', 2);
      check(k, ['query']);
      check(v, ['query', k]);
    }
  }
  return out;
}

/**
 * Middleware for apps that read bodies outside the validation hook (the control plane's
 * management API): rejects the URL and JSON body problems above through `reject`.
 */
export function rejectBadInput(reject: (c: Context, detail: ValidationDetail[]) => Response): MiddlewareHandler {
  return async (c, next) => {
    let detail = urlProblems(c.req.url);
    if (!detail.length && isJson(c.req.header('content-type'))) {
      let body: unknown;
      try {
        body = await c.req.json();
      } catch {
        return next(); // malformed JSON: the route's own validation answers it
      }
      detail = inputProblems(body, 'body');
    }
    return detail.length ? reject(c, detail) : next();
  };
}

const JSON_MEDIA = /^application\/([\w.-]+\+)?json$/i;

/**
 * Does a Content-Type header declare JSON (`application/json` or `application/<x>+json`, any
 * parameters) in UTF-8? JSON text is UTF-8 (RFC 8259 section 8.1): a body declared in another
 * charset is refused (415), not read as UTF-8.
 */
export function isJson(contentType: string | undefined): boolean {
  const [type = '', ...params] = (contentType ?? '').split(';');
  if (!JSON_MEDIA.test(type.trim())) return false;
  for (const p of params) {
    const eq = p.indexOf('=');
    if (p.slice(0, eq).trim().toLowerCase() !== 'charset') continue;
    const charset = p
      .slice(eq + 1)
      .trim()
      .replace(/^"(.*)"$/, '$1')
      .toLowerCase();
    if (charset !== 'utf-8' && charset !== 'utf8') return false;
  }
  return true;
}

/**
 * A request body of at most `max` bytes, else 413. A Content-Length (without Transfer-Encoding) is
 * checked from the header alone, leaving the body untouched, so a route reads it straight from the
 * socket (@hono/node-server's direct read); hono's bodyLimit materializes a web Request for every
 * body, and reading 90 MB through its stream held the event loop for over a second. A chunked
 * body is counted as it is read (hono's bodyLimit).
 */
export function limitBody(max: number): MiddlewareHandler {
  const tooLarge = (c: Context) => c.json(envelope('payload_too_large', `request body exceeds ${max} bytes`), 413);
  const counted = bodyLimit({ maxSize: max, onError: tooLarge });
  return (c, next) => {
    const length = c.req.header('content-length');
    if (length !== undefined && c.req.header('transfer-encoding') === undefined) return Number(length) > max ? Promise.resolve(tooLarge(c)) : next();
    if (c.req.method === 'GET' || c.req.method === 'HEAD') return next();
    return counted(c, next);
  };
}

/** The Node request under @hono/node-server (absent under `app.request()` in tests). */
const incomingOf = (c: Context): IncomingMessage | undefined => (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;

/**
 * The whole request body as one Buffer: with a Content-Length, straight from the socket (readBody
 * copies each chunk into place as it arrives; reading 90 MB through a web stream, then
 * concatenating and copying it to an ArrayBuffer, held the loop for over a second), otherwise
 * through the web Request (a chunked body, counted by limitBody).
 */
async function bodyBuffer(c: Context): Promise<Buffer> {
  const incoming = incomingOf(c);
  const length = Number(c.req.header('content-length') ?? NaN);
  if (incoming && !incoming.readableDidRead && c.req.header('transfer-encoding') === undefined && Number.isSafeInteger(length))
    return readBody(incoming, length);
  return Buffer.from(await c.req.arrayBuffer());
}

/** Was the request body read to its end (so the connection can be kept alive)? */
const bodyRead = (c: Context): boolean => incomingOf(c)?.readableEnded === true || c.req.raw.bodyUsed;

/**
 * For routes whose bodies may be huge (the SCIM sync: ~90 MB for 100k users): the JSON body is
 * parsed in slices (json-slices.ts) and each element checked for input problems as it is parsed,
 * so neither holds the event loop; the route's validator then receives the parsed value (the
 * validation hook skips what was checked here). Answers as the validator would: malformed JSON
 * is the validator's HTTPException (onApiError's `json_invalid`), input problems a 422.
 */
export function slicedJsonBody(): MiddlewareHandler {
  return async (c, next) => {
    if (!isJson(c.req.header('content-type'))) return next();
    const detail: ValidationDetail[] = [];
    const check = (v: unknown, loc: (string | number)[]) => {
      if (detail.length < 10) detail.push(...inputProblems(v, loc).slice(0, 10 - detail.length));
      if (v !== null && typeof v === 'object') vetted.add(v);
    };
    const raw = await bodyBuffer(c);
    // JSON text is UTF-8 (RFC 8259): decoding bytes that are not would turn them into U+FFFD, and
    // two different malformed ids into one.
    if (!isUtf8(raw)) throw new HTTPException(400, { message: 'Malformed JSON in request body: not valid UTF-8' });
    let value: unknown;
    try {
      value = await parseJsonInSlices(raw, {
        onElement: (v, k, n) => check(v, ['body', k, n]),
        onMember: (v, k) => check(v, ['body', k]),
      });
    } catch {
      throw new HTTPException(400, { message: 'Malformed JSON in request body' });
    }
    if (value !== null && typeof value === 'object') for (const k of Object.keys(value)) if (badString(k)) detail.push({ loc: ['body', k], ...STRING_DETAIL });
    if (detail.length) return c.json({ detail: detail.slice(0, 10) }, 422);
    // The validator reads the body with c.req.json(): hand it the parsed value instead.
    (c.req as { json: () => Promise<unknown> }).json = () => Promise.resolve(value);
    return next();
  };
}

/** The 422 body a route answers for a validation result (zod's issues, or problems in what it accepted); undefined when the input is fine. */
export function validationProblems(result: { success: boolean; error?: unknown; data?: unknown }, target: string): { detail: ValidationDetail[] } | undefined {
  const where = target === 'json' ? 'body' : target;
  if (!result.success) return { detail: zodDetail(result.error as import('zod').ZodError, where) };
  const detail = inputProblems(result.data, where);
  return detail.length ? { detail } : undefined;
}

export function validationHook(result: { success: boolean; error?: unknown; target: string; data?: unknown }, c: Context) {
  const problems = validationProblems(result, result.target);
  return problems ? c.json(problems, 422) : undefined;
}

/** What a route answers when its handler throws `err` (status and body); logged as onApiError logs it. */
export function apiErrorAnswer(err: Error, path: string): { status: number; body: { error: { message: string } } | { detail: unknown } } {
  if (err instanceof ApiError) return { status: err.status, body: envelope(err.code, err.message, err.extra) };
  if (err instanceof HTTPException) {
    const status = err.status;
    if (status === 400 && /Malformed JSON/i.test(err.message)) {
      // `Malformed JSON in request body: <why>` names why (slicedJsonBody); plain, it is not JSON.
      const why = /^Malformed JSON in request body: (.+)$/.exec(err.message)?.[1] ?? 'not valid JSON';
      return { status: 422, body: { detail: [{ loc: ['body'], msg: `JSON decode error: body is ${why}`, type: 'json_invalid' }] } };
    }
    if (status === 413) return { status, body: envelope('payload_too_large', err.message || 'request body too large') };
    if (status === 415) return { status, body: envelope('unsupported_media_type', 'Content-Type must be application/json in UTF-8') };
    return { status, body: envelope('http_error', err.message || 'request failed') };
  }
  if (isStoreError(err)) {
    // Never the SQL parameters (errMsg leaves them out): they can hold a signed VC or a key hash.
    log.warn('store error', { err: errMsg(err), path });
    return { status: 503, body: envelope('store_unavailable', 'the store failed or did not answer in time; the operation did not complete, retry later') };
  }
  log.error('unhandled error', { err: errMsg(err), stack: withoutParams(err.stack ?? ''), path });
  return { status: 500, body: envelope('internal_error', 'internal error') };
}

export function onApiError(err: Error, c: Context): Response {
  const a = apiErrorAnswer(err, c.req.path);
  return c.json(a.body, a.status as ContentfulStatusCode);
}

/** A sub-app of an API (its routes, same validation hook), composed into one with `app.route('/', sub)`. */
export function subApi(): OpenAPIHono {
  return new OpenAPIHono({ defaultHook: validationHook });
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Does an Origin header name the host this request was sent to? */
function sameOrigin(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host.toLowerCase();
  } catch {
    return false; // `null` (a sandboxed frame, a file) and anything unparsable
  }
}

/**
 * Why a write must be refused before it is read, or undefined. Both management listeners ask it
 * first, so with WRIT_API_AUTH=off, where the network is the only guard, a web page the operator
 * has open cannot make the browser write here (re-provision an agent, start a revocation cascade,
 * approve a held request, register a service):
 * - a browser's cross-origin write, as Go's `http.CrossOriginProtection` tells it: `Sec-Fetch-Site`
 *   other than `same-origin` or `none` (typed by the user), or without that header an `Origin`
 *   that is not this host: 403. Clients that are no browser (curl, SDKs, Writ's own) send neither;
 * - a body that does not declare JSON: 415. A browser sends a body cross-site without a CORS
 *   preflight only as a form, as text/plain or with no type; every route here reads JSON, except
 *   the OAuth endpoints (`formBody`), which read forms (RFC 6749 3.2) and refuse anything else
 *   themselves: a browser's cross-origin post to them is still refused by the first check.
 */
export function writeRefusal(
  method: string,
  header: (name: string) => string | undefined,
  formBody = false,
): { status: 403 | 415; message: string } | undefined {
  if (SAFE_METHODS.has(method)) return undefined;
  const site = header('sec-fetch-site');
  const origin = header('origin');
  if (site !== undefined ? site !== 'same-origin' && site !== 'none' : origin !== undefined && !sameOrigin(origin, header('host'))) {
    return { status: 403, message: 'cross-origin request refused: a web page may not write to this API' };
  }
  if (!formBody && hasBody({ 'content-length': header('content-length'), 'transfer-encoding': header('transfer-encoding') }) && !isJson(header('content-type')))
    return { status: 415, message: 'Content-Type must be application/json in UTF-8' };
  return undefined;
}

/** A route pattern (`/a/:id`, `/a/:rest{.+}`, `/a/*`) as a regular expression of whole paths. */
function patternOf(path: string): RegExp {
  const parts = path.split('/').map((seg) => {
    if (seg === '*') return '.*';
    const param = /^:[\w-]+(?:\{(.+)\})?$/.exec(seg);
    if (param) return param[1] ? `(?:${param[1]})` : '[^/]+';
    return seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  });
  return new RegExp(`^${parts.join('/')}/?$`);
}

/** Route patterns as regular expressions, by pattern (the routes are fixed once an app is built). */
const patterns = new Map<string, RegExp>();

/**
 * The methods `app` serves `path` with (HEAD wherever GET), for a 405 with `Allow` (RFC 9110
 * 15.5.6) instead of a 404 when the path exists; empty when no route has it. Middleware
 * (`use`, method ALL) is not a route. Read when a request matched nothing, never on a hit.
 */
export function allowedMethods(app: { routes: readonly { method: string; path: string }[] }, path: string): string[] {
  const methods = new Set<string>();
  for (const r of app.routes) {
    if (r.method === 'ALL' || methods.has(r.method)) continue;
    let re = patterns.get(r.path);
    if (!re) patterns.set(r.path, (re = patternOf(r.path)));
    if (re.test(path)) methods.add(r.method);
  }
  if (methods.has('GET')) methods.add('HEAD');
  return [...methods].sort();
}

/**
 * An OpenAPIHono app with the shared error shapes and a request body limit: `bodyLimit` bytes
 * (default DEFAULT_BODY_LIMIT), or what `bodyLimitFor(path)` says for a path that needs more.
 * Writes a browser could be made to send from another site are refused (`writeRefusal`).
 */
export function createApi(
  opts: { bodyLimit?: number; bodyLimitFor?: (path: string) => number | undefined; formPath?: (path: string) => boolean } = {},
): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: validationHook });
  const max = opts.bodyLimit ?? DEFAULT_BODY_LIMIT;
  const limiters = new Map<number, MiddlewareHandler>();
  const limiter = (n: number): MiddlewareHandler => {
    let m = limiters.get(n);
    if (!m) {
      m = limitBody(n);
      limiters.set(n, m);
    }
    return m;
  };
  // An answer given before the whole body was read (413, a route that never reads it) closes the
  // connection: the unread rest must not be taken for the client's next request, and a client
  // told keep-alive must not see that next request dropped.
  app.use('*', async (c, next) => {
    await next();
    if (
      hasBody({ 'content-length': c.req.header('content-length'), 'transfer-encoding': c.req.header('transfer-encoding') }) &&
      (c.res.status === 413 || !bodyRead(c))
    )
      c.res.headers.set('connection', 'close');
  });
  app.use('*', (c, next) => {
    const no = writeRefusal(c.req.method, (h) => c.req.header(h), opts.formPath?.(c.req.path));
    if (!no) return next();
    return Promise.resolve(c.json(envelope(no.status === 403 ? 'cross_origin' : 'unsupported_media_type', no.message), no.status));
  });
  const fixed = limiter(max);
  const pick = opts.bodyLimitFor;
  app.use('*', pick ? (c, next) => limiter(pick(c.req.path) ?? max)(c, next) : fixed);
  // Path and query strings are checked for every route (a route without a schema for them too).
  app.use('*', async (c, next) => {
    const detail = urlProblems(c.req.url);
    return detail.length ? c.json({ detail }, 422) : next();
  });
  app.onError(onApiError);
  app.notFound((c) => {
    const allow = allowedMethods(app, c.req.path);
    if (allow.length === 0) return c.json(envelope('not_found', `no route for ${c.req.method} ${c.req.path}`), 404);
    return c.json(envelope('method_not_allowed', `${c.req.method} is not allowed on ${c.req.path}; allowed: ${allow.join(', ')}`), 405, {
      allow: allow.join(', '),
    });
  });
  return app;
}
