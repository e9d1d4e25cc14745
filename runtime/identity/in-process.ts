/**
 * The identity authority called in process, for a control plane that shares its process (the
 * all-in-one): the two calls made once per agent request, verify-presentation and the delegation
 * check, answered as their routes answer them (the route's input check, the same function, the
 * same span), without a loopback request and its answer on both ends of one event loop. What a
 * route would answer instead of 200 (its validation's 422, 503 while the authority is not ready or
 * its store fails, as `onApiError` maps a thrown error) rejects with a `RouteRefusal` carrying
 * that status and body, which the client reads as it reads an HTTP answer.
 * Every other call stays HTTP.
 */
import type { ZodType } from 'zod';
import { apiErrorAnswer, validationProblems } from '../lib/api.js';
import { BRAND } from '../lib/brand.js';
import { withSpan } from '../lib/tracing.js';
import { notReady } from './context.js';
import type { CheckVerdict } from './delegation-core.js';
import { VERIFY_SPAN_ATTRS } from './fast-verify.js';
import { verifyPresentation, type VerifyAnswer } from './routes-agents.js';
import { delegationVerdict } from './routes-delegations.js';
import { CheckQuerySchema, VerifyRequestSchema } from './schemas.js';
import type { IdentityAuthority } from './server.js';

const VERIFY_PATH = '/v1/agents/verify-presentation';
const CHECK_PATH = '/v1/delegations/check';
const CHECK_SPAN_ATTRS = {
  'http.request.method': 'GET',
  'http.route': CHECK_PATH,
  'http.response.status_code': 200,
  [`${BRAND}.operation`]: 'delegation.check',
};

export interface InProcessIdentity {
  verifyPresentation(vp: string, audience?: string): Promise<VerifyAnswer>;
  checkDelegation(q: { actor: string; task: string; action: string; resource: string }): Promise<CheckVerdict>;
}

/** What a route would have answered instead of 200: its status and body. */
export class RouteRefusal extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {
    super(`the route would answer ${status}`);
    this.name = 'RouteRefusal';
  }
}

/**
 * Runs a route's work and refuses as the route would answer: what its handler throws becomes the
 * status and body `onApiError` gives it (not ready: 503; a store failure: a 503 that names no SQL).
 */
async function asRoute<T>(path: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (e) {
    if (e instanceof RouteRefusal) throw e;
    const a = apiErrorAnswer(e instanceof Error ? e : new Error(String(e)), path);
    throw new RouteRefusal(a.status, a.body);
  }
}

/** `input` as the route's validation takes it (`target` as hono names it), or its 422. */
function validated<T>(schema: ZodType<T>, input: unknown, target: 'json' | 'query'): T {
  const result = schema.safeParse(input);
  const problems = validationProblems(result, target);
  if (problems) throw new RouteRefusal(422, problems);
  return result.data as T;
}

export function inProcessIdentity(authority: IdentityAuthority): InProcessIdentity {
  const ready = () => {
    if (!authority.ready()) throw notReady();
  };
  return {
    verifyPresentation: (vp, audience) =>
      asRoute(VERIFY_PATH, async () => {
        ready();
        // As the HTTP client sends it: an empty audience is no audience.
        const req = validated(VerifyRequestSchema, audience ? { vp, audience } : { vp }, 'json');
        return withSpan('vp.verify', VERIFY_SPAN_ATTRS, () => verifyPresentation(authority.context, req.vp, req.audience));
      }),
    checkDelegation: (q) =>
      asRoute(CHECK_PATH, async () => {
        ready();
        const query = validated(CheckQuerySchema, q, 'query');
        return withSpan('delegation.check', CHECK_SPAN_ATTRS, () => delegationVerdict(authority.context, query));
      }),
  };
}
