/**
 * Every Kubernetes API call the operator makes, as RBAC (group, resource, verb). The client
 * (client.ts) asks `allowed()` before each call, so a call missing here fails in every test; the
 * chart's operator RBAC is checked against this table (operator/kube/rbac.test.ts), and the fake
 * API server's request log is checked against it too.
 *
 * CRs are watched cluster-wide (ClusterRole); the leader-election Lease lives in the operator's
 * own namespace (Role).
 */
import { API_GROUP } from '../../runtime/lib/brand.js';
import { KINDS } from '../crd/definitions.js';

export interface Access {
  group: string;
  resource: string;
  verbs: readonly string[];
  scope: 'cluster' | 'namespace';
}

export const ACCESS: readonly Access[] = [
  // list + watch: the informers; update: the finalizer (metadata.finalizers) on the main resource.
  { group: API_GROUP, resource: KINDS.map((k) => k.plural).join(','), verbs: ['list', 'watch', 'update'], scope: 'cluster' },
  // update: status written through the status subresource.
  { group: API_GROUP, resource: KINDS.map((k) => `${k.plural}/status`).join(','), verbs: ['update'], scope: 'cluster' },
  // Lease-based leader election.
  { group: 'coordination.k8s.io', resource: 'leases', verbs: ['get', 'create', 'update'], scope: 'namespace' },
];

/** (group, resource, verb) triples, one per resource name (the table's comma lists expanded). */
export function accessTriples(table: readonly Access[] = ACCESS): string[] {
  return table.flatMap((a) => a.resource.split(',').flatMap((r) => a.verbs.map((v) => `${a.group}|${r}|${v}`))).sort();
}

const granted = new Set(accessTriples());

/** Throws when the operator is about to make a call its RBAC does not grant. */
export function allowed(group: string, resource: string, verb: string): void {
  if (!granted.has(`${group}|${resource}|${verb}`))
    throw new Error(`operator RBAC does not grant ${verb} ${resource}.${group}: add it to operator/kube/access.ts`);
}
