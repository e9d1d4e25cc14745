/**
 * Error shapes of the control plane's management API (`:8181`), shared by its sub-apps: bad
 * input is 400 `{error: string, detail?: [{loc,msg,type}]}` (the control plane's shape, not the
 * identity authority's 422), and POST /v1/usage answers exactly `{error: 'invalid body'}`
 * (SPEC 4.3). Never a 500 for bad input.
 */
import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { ZodError } from 'zod';
import { zodDetail } from '../lib/errors.js';
import { errMsg, logger } from '../lib/log.js';
import { RegistryValidationError } from './registry/service.js';

const log = logger('mgmt');

/** Request body limit of the management API (SPEC is silent; 1 MiB, answered with 413). */
export const MGMT_BODY_LIMIT = 1024 * 1024;
export const USAGE_PATH = '/v1/usage';
const INVALID_BODY = { error: 'invalid body' };
/** What a caller is told when the budget store fails (the detail is logged, never answered). */
export const BUDGET_STORE_UNAVAILABLE = 'budget store unavailable';

/** zod-openapi validation hook: the registry's message for services, `invalid body` for usage, else a summary. */
export function mgmtHook(result: { success: boolean; error?: unknown; target: string }, c: Context) {
  if (result.success) return undefined;
  if (c.req.path === USAGE_PATH) return c.json(INVALID_BODY, 400);
  const detail = zodDetail(result.error as ZodError, result.target === 'json' ? 'body' : result.target);
  if (c.req.path === '/v1/registry/services') {
    const e = new RegistryValidationError(detail);
    return c.json({ error: e.message, detail }, 400);
  }
  const what = detail.map((d) => `${d.loc.slice(1).join('.') || d.loc[0]}: ${d.msg}`).join('; ');
  return c.json({ error: `invalid request: ${what}`, detail }, 400);
}

/** The management app's error handler: malformed JSON and other HTTP errors keep the `{error}` shape. */
export function mgmtOnError(err: Error, c: Context): Response {
  if (err instanceof HTTPException && err.status < 500) {
    if (c.req.path === USAGE_PATH) return c.json(INVALID_BODY, 400);
    if (err.status === 413) return c.json({ error: `body too large: limit ${MGMT_BODY_LIMIT} bytes` }, 413, { connection: 'close' });
    // A 400 from the JSON validator is a body that does not parse.
    return c.json({ error: err.status === 400 ? `malformed JSON body: ${err.message}` : err.message }, err.status);
  }
  log.error('unhandled error', { err: errMsg(err), path: c.req.path });
  return c.json({ error: 'internal error' }, 500);
}
