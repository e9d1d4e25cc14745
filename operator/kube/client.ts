/**
 * The operator's Kubernetes calls, all of them, through @kubernetes/client-node: informers
 * (list + watch) for the three kinds, the finalizer and status updates (optimistic concurrency:
 * the object's resourceVersion goes with every update, a stale one is a 409), and the Lease.
 * Each call is checked against the RBAC table (access.ts) first.
 */
import {
  CoordinationV1Api,
  CustomObjectsApi,
  makeInformer,
  type Informer,
  type KubeConfig,
  type KubernetesObject,
  type ObjectCache,
  type V1Lease,
} from '@kubernetes/client-node';
import { API_GROUP } from '../../runtime/lib/brand.js';
import { VERSION, type CrdKind } from '../crd/definitions.js';
import { allowed } from './access.js';

export type Cr = KubernetesObject & { spec?: Record<string, unknown>; status?: Record<string, unknown> };

export interface KubeClient {
  /** A cluster-wide informer over one kind (not started). */
  informer(kind: CrdKind): Informer<Cr> & ObjectCache<Cr>;
  /** PUT of the main resource (metadata.finalizers changes). */
  replace(kind: CrdKind, obj: Cr): Promise<Cr>;
  /** PUT of the status subresource. */
  replaceStatus(kind: CrdKind, obj: Cr): Promise<Cr>;
  readLease(namespace: string, name: string): Promise<V1Lease | undefined>;
  createLease(namespace: string, body: V1Lease): Promise<V1Lease>;
  replaceLease(namespace: string, name: string, body: V1Lease): Promise<V1Lease>;
}

/** HTTP status of a client-node error (ApiException.code, or the watch's statusCode). */
export function statusOf(e: unknown): number | undefined {
  const x = e as { code?: unknown; statusCode?: unknown };
  return typeof x?.code === 'number' ? x.code : typeof x?.statusCode === 'number' ? x.statusCode : undefined;
}

export function createKubeClient(kc: KubeConfig): KubeClient {
  const custom = kc.makeApiClient(CustomObjectsApi);
  const coordination = kc.makeApiClient(CoordinationV1Api);
  const ref = (kind: CrdKind, obj: Cr) => ({
    group: API_GROUP,
    version: VERSION,
    plural: kind.plural,
    namespace: obj.metadata!.namespace!,
    name: obj.metadata!.name!,
    body: obj,
  });
  return {
    informer(kind) {
      allowed(API_GROUP, kind.plural, 'list');
      allowed(API_GROUP, kind.plural, 'watch');
      const path = `/apis/${API_GROUP}/${VERSION}/${kind.plural}`;
      return makeInformer<Cr>(kc, path, () => custom.listClusterCustomObject({ group: API_GROUP, version: VERSION, plural: kind.plural }));
    },
    async replace(kind, obj) {
      allowed(API_GROUP, kind.plural, 'update');
      return (await custom.replaceNamespacedCustomObject(ref(kind, obj))) as Cr;
    },
    async replaceStatus(kind, obj) {
      allowed(API_GROUP, `${kind.plural}/status`, 'update');
      return (await custom.replaceNamespacedCustomObjectStatus(ref(kind, obj))) as Cr;
    },
    async readLease(namespace, name) {
      allowed('coordination.k8s.io', 'leases', 'get');
      try {
        return await coordination.readNamespacedLease({ namespace, name });
      } catch (e) {
        if (statusOf(e) === 404) return undefined;
        throw e;
      }
    },
    async createLease(namespace, body) {
      allowed('coordination.k8s.io', 'leases', 'create');
      return coordination.createNamespacedLease({ namespace, body });
    },
    async replaceLease(namespace, name, body) {
      allowed('coordination.k8s.io', 'leases', 'update');
      return coordination.replaceNamespacedLease({ namespace, name, body });
    },
  };
}
