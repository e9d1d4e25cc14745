/**
 * The pure reconcile: observed custom resources -> desired state (controller-runtime shape,
 * level-based: the answer depends on the set, never on the order it arrived in).
 *
 * - RegistryService `metadata.name` and AgentPolicy `spec.agent` claim registry names;
 *   GovernedAgent `metadata.name` claims a governed-agent name. Two live resources claiming one
 *   name: the winner is the oldest (creationTimestamp), then the lowest kind/namespace/name; the
 *   loser is `Accepted=False, Conflict` and contributes nothing (never a silent overwrite).
 * - An invalid resource is `Accepted=False, Invalid` and contributes nothing; the others proceed.
 * - A resource being deleted contributes nothing (its entries are pruned: the grant is withdrawn).
 */
import type { Service } from '../runtime/control-plane/types.js';
import { keyOf, type Observed } from './resource.js';

export interface DesiredGoverned {
  name: string;
  tenant: string;
  ownerType: string;
  ownerRef: string;
  teamRef?: string;
  businessSponsor?: string;
  riskTier?: string;
  approvedRuntime?: string;
  state: string;
}

export interface DesiredIdentity {
  name: string;
  role: string;
  capabilities: { action: string; resource: string }[];
}

export type Verdict = { accepted: true } | { accepted: false; reason: 'Invalid' | 'Conflict'; message: string };

export interface Desired {
  /** Registry entries (SPEC 2.1 shape), sorted by name. */
  services: Service[];
  governed: DesiredGoverned[];
  identities: DesiredIdentity[];
  /** Resource key -> acceptance. Every observed resource that is not being deleted has one. */
  verdicts: Map<string, Verdict>;
  /** Registry name or `governed:<name>` -> the resource key that produced it. */
  claims: Map<string, string>;
  /** Keys of resources being deleted (their finalizer may go once the apply succeeded). */
  deleting: string[];
}

export interface ObservedWithAge extends Observed {
  /** metadata.creationTimestamp (Kubernetes); absent for folder resources. */
  createdAt?: string;
}

/** Default upstream of an AgentPolicy without one: the agent's Service in its namespace. */
export const defaultAgentUpstream = (agent: string, namespace: string): string => `${agent}.${namespace}.svc:8080`;

const claimOf = (r: Observed): string => (r.kind === 'GovernedAgent' ? `governed:${r.name}` : r.kind === 'AgentPolicy' ? String(r.spec!.agent) : r.name);

/** Older first, then kind/namespace/name: the same winner whatever the arrival order. */
function before(a: ObservedWithAge, b: ObservedWithAge): boolean {
  const ta = a.createdAt ?? '';
  const tb = b.createdAt ?? '';
  if (ta !== tb) return ta === '' ? false : tb === '' ? true : ta < tb;
  return keyOf(a) < keyOf(b);
}

function serviceOf(r: Observed): Service {
  const s = r.spec!;
  if (r.kind === 'RegistryService') {
    const out: Service = { name: r.name, upstream: s.upstream, public: s.public ?? false, kind: s.kind };
    if (s.owner) out.owner = s.owner;
    if (s.requireScope) out.requireScope = s.requireScope;
    if (s.dataClass) out.dataClass = s.dataClass;
    if (s.protocol) out.protocol = s.protocol;
    if (s.path) out.path = s.path;
    if (s.tools?.length) out.tools = s.tools.map((t: { name: string; costUsd: number }) => ({ name: t.name, costUsd: t.costUsd }));
    if (s.upstreamAuth) out.upstreamAuth = s.upstreamAuth;
    if (s.oauthResource) out.oauthResource = s.oauthResource;
    return out;
  }
  const out: Service = { name: s.agent, upstream: s.upstream ?? defaultAgentUpstream(s.agent, r.namespace), kind: 'agent' };
  if (s.owner) out.owner = s.owner;
  for (const k of ['allowModels', 'allowTools', 'allowAgents', 'egressAllow'] as const) if (s[k]?.length) out[k] = [...s[k]];
  if (s.budget) out.budget = { ...s.budget };
  if (s.dataClass) out.dataClass = s.dataClass;
  if (s.toolRules?.length) out.toolRules = s.toolRules.map((r: Record<string, unknown>) => ({ ...r }));
  return out;
}

function governedOf(r: Observed): DesiredGoverned {
  const s = r.spec!;
  const out: DesiredGoverned = { name: r.name, tenant: s.tenant, ownerType: s.ownerType, ownerRef: s.ownerRef, state: s.state ?? 'draft' };
  for (const k of ['teamRef', 'businessSponsor', 'riskTier', 'approvedRuntime'] as const) if (s[k] !== undefined) out[k] = s[k];
  return out;
}

export function reconcile(observed: readonly ObservedWithAge[]): Desired {
  const verdicts = new Map<string, Verdict>();
  const winners = new Map<string, ObservedWithAge>();
  const deleting: string[] = [];
  // Two copies of the same resource (one key twice, e.g. a folder with a duplicated document):
  // the second is a conflict too.
  const seenKeys = new Set<string>();
  for (const r of observed) {
    const key = keyOf(r);
    if (r.deleting) {
      deleting.push(key);
      continue;
    }
    if (r.errors.length || !r.spec) {
      verdicts.set(key, { accepted: false, reason: 'Invalid', message: r.errors.join('; ') || 'invalid resource' });
      continue;
    }
    if (seenKeys.has(key)) {
      verdicts.set(`${key}@${r.origin}`, { accepted: false, reason: 'Conflict', message: `${key} is declared twice (${r.origin})` });
      continue;
    }
    seenKeys.add(key);
    const claim = claimOf(r);
    const cur = winners.get(claim);
    if (!cur || before(r, cur)) winners.set(claim, r);
  }
  const claims = new Map<string, string>();
  for (const [claim, r] of winners) claims.set(claim, keyOf(r));
  for (const r of observed) {
    const key = keyOf(r);
    if (r.deleting || verdicts.has(key)) continue;
    const owner = claims.get(claimOf(r));
    if (owner === key) verdicts.set(key, { accepted: true });
    else {
      const what = r.kind === 'GovernedAgent' ? `governed agent ${r.name}` : `registry name ${claimOf(r)}`;
      verdicts.set(key, { accepted: false, reason: 'Conflict', message: `${what} is already claimed by ${owner}` });
    }
  }
  const services: Service[] = [];
  const governed: DesiredGoverned[] = [];
  const identities: DesiredIdentity[] = [];
  for (const r of winners.values()) {
    if (r.kind === 'GovernedAgent') governed.push(governedOf(r));
    else {
      services.push(serviceOf(r));
      const id = r.kind === 'AgentPolicy' ? r.spec!.identity : undefined;
      if (id)
        identities.push({
          name: r.spec!.agent,
          role: id.role,
          capabilities: (id.capabilities ?? []).map((c: DesiredIdentity['capabilities'][number]) => ({ action: c.action, resource: c.resource })),
        });
    }
  }
  const byName = <T extends { name: string }>(a: T, b: T) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  return { services: services.sort(byName), governed: governed.sort(byName), identities: identities.sort(byName), verdicts, claims, deleting: deleting.sort() };
}
