/**
 * Ingress (north-south) evaluation, SPEC 4.1: identity, then registry, then inline rules, then
 * the optional OPA veto. Pure: the OIDC verification and the OPA verdict are answers.
 */
import { H } from '../../lib/brand.js';
import type { Service } from '../types.js';
import { bearerToken, hasScopes } from './credentials.js';
import { ANONYMOUS, resolveHost } from './outcome.js';
import { HEADER_SAFE, Run } from './run.js';
import { isFailure, type Answers, type IngressFacts, type PolicySnapshot, type Step } from './types.js';

export function evaluateIngress(f: IngressFacts, snap: PolicySnapshot, a: Answers, explain = false): Step {
  const run = new Run(snap, explain);
  const s = snap.settings;
  let subject = ANONYMOUS;
  const requested = f.service ?? f.host;
  const end = (d: ReturnType<Run['deny']>, target?: Service) => run.end(d, 'authz', { subject, service: target?.name ?? requested }, target?.name);

  // 1. Identity. With workforce OIDC on, a presented credential must verify; with it off
  //    (development posture) any bearer credential passes anonymously.
  const token = bearerToken(f.authorization);
  let claims: Record<string, unknown> | undefined;
  if (s.oidc && f.authorization) {
    if (!token) return end(run.deny(401, 'identity', 'credential is not a bearer token'));
    const v = a.oidc;
    if (!v) return run.ask({ kind: 'oidc', token });
    if (isFailure(v)) return end(run.deny(401, 'identity', `credential verification failed: ${v.failed}`));
    if (!v.ok) return end(run.deny(401, 'identity', `invalid credential: ${v.reason}`));
    // The subject is stamped on the upstream request: a value that cannot be a header denies.
    if (!HEADER_SAFE.test(v.subject) || !v.subject) return end(run.deny(401, 'identity', 'credential subject is not a valid header value'));
    subject = v.subject;
    claims = v.claims;
  }
  run.pass(run.explain ? (claims ? `verified subject ${subject}` : 'anonymous') : '', 'registry');

  // 2. Registry.
  const target: Service | undefined = f.service !== undefined ? snap.registry.get(f.service) : f.host ? resolveHost(snap.registry, f.host) : undefined;
  if (!target) return end(run.deny(403, 'registry', requested ? `unknown service ${JSON.stringify(requested)}` : 'no target service named'));
  run.pass(run.explain ? `service ${target.name}` : '', 'inline');

  // 3. Inline rules.
  let reason: string;
  if (target.public) {
    reason = 'public service';
  } else if (s.oidc) {
    if (!claims) return end(run.deny(401, 'identity', 'credential required'), target);
    if (!hasScopes(claims, target.requireScope)) return end(run.deny(403, 'inline', `missing required scope ${JSON.stringify(target.requireScope)}`), target);
    reason = target.requireScope ? `authenticated with scope ${target.requireScope}` : 'authenticated';
  } else {
    if (!token) return end(run.deny(403, 'inline', 'private service needs credentials'), target);
    // A scope cannot be checked without a verifier: fail closed.
    if (target.requireScope?.trim()) return end(run.deny(403, 'inline', 'required scope cannot be verified: workforce OIDC is not configured'), target);
    reason = 'credential accepted (OIDC off, development posture)';
  }
  run.pass(run.explain ? reason : '', 'opa');

  // 4. Optional org-wide veto.
  if (s.opa) {
    const v = a.opa;
    if (!v) {
      return run.ask({
        kind: 'opa',
        input: {
          path: 'ingress',
          service: target.name,
          subject,
          method: f.method ?? '',
          requestPath: f.requestPath ?? '',
          dataClass: target.dataClass ?? '',
          public: target.public === true,
        },
      });
    }
    if (isFailure(v)) return end(run.deny(403, 'opa', `decision error: ${v.failed}`), target);
    if (!v.allow) return end(run.deny(403, 'opa', `opa: ${v.reason}`), target);
    run.pass(run.explain ? v.reason || 'policy allowed' : '');
  }
  return end(run.allow('inline', reason, { [H.subject]: subject, [H.upstream]: target.upstream }), target);
}
