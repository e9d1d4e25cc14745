/**
 * The identity authority called in process, for a control plane that shares its process (the
 * all-in-one): the two calls made once per agent request, verify-presentation and the delegation
 * check, answered as their routes answer them (the route's input check, the same function, the
 * same span), without a loopback request and its answer on both ends of one event loop. What a
 * route would answer instead of 200 (422 for bad input, 503 while the authority is not ready or
 * its store fails, as `onApiError` maps a thrown error) rejects with a `RouteRefusal` carrying
 * that status and message, which the client reads as it reads an HTTP status.
 * Every other call stays HTTP.
 */
import { apiErrorAnswer } from '../lib/api.js';
import { BRAND } from '../lib/brand.js';
import { withSpan } from '../lib/tracing.js';
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

/** The status a route would have answered instead of 200, and why. */
export class RouteRefusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'RouteRefusal';
  }
}

/**
 * Runs a route's work and refuses as the route would answer: what its handler throws becomes the
 * status and message `onApiError` gives it (a store failure is a 503 that names no SQL).
 */
async function asRoute<T>(path: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (e) {
    if (e instanceof RouteRefusal) throw e;
    const a = apiErrorAnswer(e instanceof Error ? e : new Error(String(e)), path);
    throw new RouteRefusal(a.status, 'error' in a.body ? a.body.error.message : 'request failed');
  }
}

const invalid = (e: { issues: { path: PropertyKey[]; message: string }[] }) =>
  new RouteRefusal(422, `validation failed: ${e.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);

export function inProcessIdentity(authority: IdentityAuthority): InProcessIdentity {
  const ready = () => {
    if (!authority.ready()) throw new RouteRefusal(503, 'identity authority not ready');
  };
  return {
    verifyPresentation: (vp, audience) =>
      asRoute(VERIFY_PATH, async () => {
        ready();
        // As the HTTP client sends it: an empty audience is no audience.
        const req = VerifyRequestSchema.safeParse(audience ? { vp, audience } : { vp });
        if (!req.success) throw invalid(req.error);
        return withSpan('vp.verify', VERIFY_SPAN_ATTRS, () => verifyPresentation(authority.context, req.data.vp, req.data.audience));
      }),
    checkDelegation: (q) =>
      asRoute(CHECK_PATH, async () => {
        ready();
        const req = CheckQuerySchema.safeParse(q);
        if (!req.success) throw invalid(req.error);
        return withSpan('delegation.check', CHECK_SPAN_ATTRS, () => delegationVerdict(authority.context, req.data));
      }),
  };
}
