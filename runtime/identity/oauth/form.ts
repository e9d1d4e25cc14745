/**
 * `application/x-www-form-urlencoded` request bodies of the OAuth endpoints (RFC 6749 3.2, 4.1.3):
 * parameters sent without a value are treated as omitted, and a parameter sent more than once is
 * refused (RFC 6749 3.1, 3.2: "MUST NOT be included more than once"), as is any other media type.
 * `audience` and `resource` may repeat by RFC 8693 and 8707; a repeat is `invalid_target` here.
 */
import { invalidRequest, invalidTarget } from './errors.js';

/** RFC 8693 and 8707 allow several of these; a Writ token is for one registry entry. */
const TARGETS = new Set(['audience', 'resource']);

const FORM = /^application\/x-www-form-urlencoded\s*(;|$)/i;

/** Parameters by name; throws `invalid_request` for another media type or a repeated parameter. */
export function parseForm(contentType: string | undefined, body: string): Map<string, string> {
  if (!FORM.test(contentType ?? '')) throw invalidRequest('the request body must be application/x-www-form-urlencoded');
  const out = new Map<string, string>();
  for (const [k, v] of new URLSearchParams(body)) {
    if (v === '') continue;
    if (out.has(k) && TARGETS.has(k)) throw invalidTarget(`one ${k} per token: a token is issued for one registry entry`);
    if (out.has(k)) throw invalidRequest(`parameter ${k} is included more than once`);
    out.set(k, v);
  }
  return out;
}

/** The parameter `name`, or `invalid_request` naming it when it is missing. */
export function required(form: Map<string, string>, name: string): string {
  const v = form.get(name);
  if (v === undefined) throw invalidRequest(`missing parameter ${name}`);
  return v;
}
