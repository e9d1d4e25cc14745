/**
 * Ingress (north-south) decision, SPEC 4.1: identity, then registry, then inline rules, then the
 * optional OPA veto. Audit and metrics are the caller's (see pipeline.ts) so the proxy and a dry
 * run can reuse this function. Any exception is a deny (fail closed).
 */
import { errMsg } from '../../lib/log.js';
import { H } from '../../lib/brand.js';
import type { Service } from '../types.js';
import { bearerToken, hasScopes } from './credentials.js';
import { ANONYMOUS, UNKNOWN_LABEL, allow, auditOf, deny, resolveHost } from './outcome.js';
import { drive, wait, type Step } from './maybe.js';
import type { DecisionDeps, IngressFacts, Outcome, Rule } from './types.js';

/**
 * The outcome itself when nothing had to be awaited (no OIDC verification, no OPA call), else a
 * promise of it (see maybe.ts). Never rejects for a decision error: that is a deny.
 */
export function decideIngress(facts: IngressFacts, deps: DecisionDeps): Outcome | Promise<Outcome> {
  return drive(ingress(facts, deps));
}

/** The outcome of a decision (a module function: no closure per request). */
function outcome(subject: string, target: Service | undefined, requested: string | undefined, d: Outcome['decision']): Outcome {
  return {
    decision: d,
    audit: auditOf('authz', d, { subject, service: target?.name ?? requested }),
    serviceLabel: target?.name ?? UNKNOWN_LABEL,
  };
}

function* ingress(facts: IngressFacts, deps: DecisionDeps): Step<Outcome> {
  let stage: Rule = 'identity';
  let subject = ANONYMOUS;
  let target: Service | undefined;
  const requested = facts.service ?? facts.host;
  try {
    // 1. Identity. With workforce OIDC on, a presented credential must verify; with it off
    //    (development posture) any bearer credential passes anonymously.
    const token = bearerToken(facts.authorization);
    const presented = !!facts.authorization;
    let claims: Record<string, unknown> | undefined;
    if (deps.oidc && presented) {
      if (!token) return outcome(subject, target, requested, deny(401, 'identity', 'credential is not a bearer token'));
      const v = yield* wait(deps.oidc.verify(token));
      if (!v.ok) return outcome(subject, target, requested, deny(401, 'identity', `invalid credential: ${v.reason}`));
      subject = v.subject;
      claims = v.claims;
    }

    // 2. Registry.
    stage = 'registry';
    target = facts.service !== undefined ? deps.registry.get(facts.service) : facts.host ? resolveHost(deps.registry, facts.host) : undefined;
    if (!target) {
      return outcome(subject, target, requested, deny(403, 'registry', requested ? `unknown service ${JSON.stringify(requested)}` : 'no target service named'));
    }

    // 3. Inline rules.
    stage = 'inline';
    let reason: string;
    if (target.public) {
      reason = 'public service';
    } else if (deps.oidc) {
      if (!claims) return outcome(subject, target, requested, deny(401, 'identity', 'credential required'));
      if (!hasScopes(claims, target.requireScope)) {
        return outcome(subject, target, requested, deny(403, 'inline', `missing required scope ${JSON.stringify(target.requireScope)}`));
      }
      reason = target.requireScope ? `authenticated with scope ${target.requireScope}` : 'authenticated';
    } else {
      if (!token) return outcome(subject, target, requested, deny(403, 'inline', 'private service needs credentials'));
      // A scope cannot be checked without a verifier: fail closed.
      if (target.requireScope?.trim()) {
        return outcome(subject, target, requested, deny(403, 'inline', 'required scope cannot be verified: workforce OIDC is not configured'));
      }
      reason = 'credential accepted (OIDC off, development posture)';
    }

    // 4. Optional org-wide veto.
    if (deps.opa) {
      stage = 'opa';
      const v = yield* wait(
        deps.opa.evaluate({
        path: 'ingress',
        service: target.name,
        subject,
        method: facts.method ?? '',
        requestPath: facts.path ?? '',
        public: !!target.public,
        requireScope: target.requireScope ?? '',
          claims: claims ?? {},
        }),
      );
      if (!v.allow) return outcome(subject, target, requested, deny(403, 'opa', `opa: ${v.reason}`));
    }
    return outcome(subject, target, requested, allow('inline', reason, { [H.subject]: subject, [H.upstream]: target.upstream }));
  } catch (e) {
    return outcome(subject, target, requested, deny(403, stage, `decision error: ${errMsg(e)}`));
  }
}
