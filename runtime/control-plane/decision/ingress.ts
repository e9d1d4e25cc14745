/**
 * Ingress (north-south) evaluation, SPEC 4.1, as layers (evaluate.ts lists them): identity, then
 * registry, then inline rules, then the optional OPA veto. Pure: the OIDC verification and the OPA
 * verdict are answers.
 */
import { H } from '../../lib/brand.js';
import type { Decision, Service } from '../types.js';
import { bearerToken, HEADER_SAFE, hasScopes } from './credentials.js';
import { ask, pass, refuse, type PolicyLayer, type Verdict } from './driver.js';
import { allow, ANONYMOUS, auditOf, resolveHost, UNKNOWN_LABEL } from './outcome.js';
import { vetoLayer } from './veto.js';
import { isFailure, type Answers, type Evaluation, type IngressFacts, type Layer, type PolicySnapshot } from './types.js';

export interface IngressContext {
  readonly facts: IngressFacts;
  readonly snap: PolicySnapshot;
  /** The target as the request names it (`X-Writ-Service`, else the host). */
  readonly requested: string | undefined;
  /** The bearer credential, when the request carries one. */
  readonly token: string | undefined;
  /** The verified subject (identity), else `anonymous`. */
  subject: string;
  /** The verified credential's claims (identity). */
  claims: Record<string, unknown> | undefined;
  /** The registry entry of the target (registry). */
  target: Service | undefined;
  /** Why the inline rules allow (inline). */
  reason: string;
}

type V = Verdict<IngressContext>;

export function ingressContext(f: IngressFacts, snap: PolicySnapshot): IngressContext {
  const requested = f.service ?? f.host;
  return { facts: f, snap, requested, token: bearerToken(f.authorization), subject: ANONYMOUS, claims: undefined, target: undefined, reason: '' };
}

/** With workforce OIDC on, a presented credential must verify; with it off (development posture) any bearer credential passes anonymously. */
function identity(c: Readonly<IngressContext>, a: Answers): V {
  if (!c.snap.settings.oidc || !c.facts.authorization) return pass();
  if (!c.token) return refuse(401, 'identity', 'credential is not a bearer token');
  const v = a.oidc;
  if (!v) return ask({ kind: 'oidc', token: c.token });
  if (isFailure(v)) return refuse(401, 'identity', `credential verification failed: ${v.failed}`);
  if (!v.ok) return refuse(401, 'identity', `invalid credential: ${v.reason}`);
  // The subject is stamped on the upstream request: a value that cannot be a header denies.
  if (!HEADER_SAFE.test(v.subject) || !v.subject) return refuse(401, 'identity', 'credential subject is not a valid header value');
  return pass({ subject: v.subject, claims: v.claims });
}

function registry(c: Readonly<IngressContext>): V {
  const f = c.facts;
  const reg = c.snap.registry;
  const target = f.service !== undefined ? reg.get(f.service) : f.host ? resolveHost(reg, f.host) : undefined;
  if (!target) return refuse(403, 'registry', c.requested ? `unknown service ${JSON.stringify(c.requested)}` : 'no target service named');
  return pass({ target });
}

/** A private service needs a credential; `requireScope` needs a verified one with that scope. */
function inline(c: Readonly<IngressContext>): V {
  const target = c.target!;
  if (target.public) return pass({ reason: 'public service' });
  if (c.snap.settings.oidc) {
    if (!c.claims) return refuse(401, 'identity', 'credential required');
    if (!hasScopes(c.claims, target.requireScope)) return refuse(403, 'inline', `missing required scope ${JSON.stringify(target.requireScope)}`);
    return pass({ reason: target.requireScope ? `authenticated with scope ${target.requireScope}` : 'authenticated' });
  }
  if (!c.token) return refuse(403, 'inline', 'private service needs credentials');
  // A scope cannot be checked without a verifier: fail closed.
  if (target.requireScope?.trim()) return refuse(403, 'inline', 'required scope cannot be verified: workforce OIDC is not configured');
  return pass({ reason: 'credential accepted (OIDC off, development posture)' });
}

export const ingressIdentity: PolicyLayer<IngressContext> = {
  name: 'identity',
  decide: identity,
  why: (c) => (c.claims ? `verified subject ${c.subject}` : 'anonymous'),
};
export const ingressRegistry: PolicyLayer<IngressContext> = { name: 'registry', decide: registry, why: (c) => `service ${c.target!.name}` };
export const ingressInline: PolicyLayer<IngressContext> = { name: 'inline', decide: inline, why: (c) => c.reason };
export const ingressVeto = vetoLayer<IngressContext>((c) => ({
  path: 'ingress',
  service: c.target!.name,
  subject: c.subject,
  method: c.facts.method ?? '',
  requestPath: c.facts.requestPath ?? '',
  dataClass: c.target!.dataClass ?? '',
  public: c.target!.public === true,
}));

/** The Evaluation of decision `d`: the audit row names the subject and the target as requested. */
export function ingressEnd(c: Readonly<IngressContext>, d: Decision, layers: Layer[]): Evaluation {
  const target = c.target;
  const effects = { audit: auditOf('authz', d, { subject: c.subject, service: target?.name ?? c.requested }), serviceLabel: target?.name ?? UNKNOWN_LABEL };
  return { decision: d, layers, effects, version: c.snap.version };
}

export function ingressAllowed(c: Readonly<IngressContext>, layers: Layer[]): Evaluation {
  const target = c.target!;
  return ingressEnd(c, allow('inline', c.reason, { [H.subject]: c.subject, [H.upstream]: target.upstream }), layers);
}
