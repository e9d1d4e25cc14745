/**
 * The Kubernetes source: client-node informers over RegistryService, AgentPolicy and
 * GovernedAgent (cluster-wide), fed to the applier under owner `kubernetes:<cluster>`.
 *
 * - Every replica keeps its informers warm; only the Lease holder (leader.ts) writes. Each write
 *   (finalizer, apply, status) checks leadership right before it is made.
 * - A pass: add the finalizer to live CRs that lack it, run the applier (reconcile + one apply
 *   + governance), write each status that changed through the status subresource (with the
 *   object's resourceVersion: a 409 means a newer object is on its way and the next pass redoes
 *   it), then drop the finalizer of deleting CRs whose withdrawal completed (a CR that was never
 *   applied is withdrawn trivially).
 * - Passes run on informer events (debounced), on becoming leader, and every `resyncMs` (the
 *   informers have no resync of their own; this also puts back entries changed by hand).
 * - An informer stops on a non-410 error (client-node's ListWatch): it is restarted with backoff.
 *   410 Gone is handled inside client-node's ListWatch (it relists).
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { API_GROUP } from '../../runtime/lib/brand.js';
import { errMsg, logger } from '../../runtime/lib/log.js';
import type { Applier, PassResult } from '../apply.js';
import { KINDS, type CrdKind } from '../crd/definitions.js';
import type { ObservedWithAge } from '../reconcile.js';
import { checkResource, keyOf } from '../resource.js';
import type { CrStatus } from '../status.js';
import { createKubeClient, statusOf, type Cr, type KubeClient } from './client.js';
import { startLeaderElection, type LeaderElection, type LeaderElectionOptions } from './leader.js';

const log = logger('kubernetes-source');

export const FINALIZER = `${API_GROUP}/withdraw`;

export interface KubernetesSourceOptions {
  kubeConfig: KubeConfig;
  /** Builds the applier for this cluster's owner (`kubernetes:<cluster>`). */
  applier: (owner: string) => Applier;
  cluster: string;
  /** Pod name (Lease holder identity). */
  identity: string;
  /** Namespace and name of the leader-election Lease. */
  leaseNamespace: string;
  leaseName?: string;
  election?: Pick<LeaderElectionOptions, 'leaseDurationMs' | 'renewDeadlineMs' | 'retryPeriodMs'>;
  /** Full pass period; default 30 s. */
  resyncMs?: number;
  debounceMs?: number;
  onPass?: (r: PassResult, writes: number) => void;
}

export interface KubernetesSource {
  owner: string;
  isLeader(): boolean;
  /** True once leader election told this replica it leads or stands by (readiness). */
  roleKnown(): boolean;
  /** Resolves once every informer has listed (a list that failed does not count). */
  synced: Promise<void>;
  /** Runs a pass now (no-op when not leader); resolves to the number of writes it made. */
  resync(): Promise<number>;
  /** Graceful stop: informers stopped, Lease released. */
  close(): Promise<void>;
  /** Stops without releasing the Lease, as a crashed replica would (tests). */
  crash(): Promise<void>;
}

/** JSON with sorted keys: statuses compare equal whatever order the API server kept. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v);
}

export function startKubernetesSource(o: KubernetesSourceOptions): KubernetesSource {
  const owner = `kubernetes:${o.cluster}`;
  const client: KubeClient = createKubeClient(o.kubeConfig);
  const applier = o.applier(owner);
  const informers = KINDS.map((kind) => ({ kind, inf: client.informer(kind) }));
  /** Parsed resources by uid + resourceVersion (validation and CEL run once per version). */
  const parsed = new Map<string, { rv: string; observed: ObservedWithAge }>();
  let closed = false;
  let running: Promise<number> | undefined;
  let again = false;
  let debounce: NodeJS.Timeout | undefined;

  const election: LeaderElection = startLeaderElection({
    client,
    namespace: o.leaseNamespace,
    name: o.leaseName ?? `${API_GROUP.replace(/\./g, '-')}-operator`,
    identity: o.identity,
    ...o.election,
    onStartedLeading: () => schedule(0),
  });

  function observe(kind: CrdKind, obj: Cr): ObservedWithAge {
    const uid = obj.metadata?.uid ?? `${obj.metadata?.namespace}/${obj.metadata?.name}`;
    const rv = obj.metadata?.resourceVersion ?? '';
    const hit = parsed.get(uid);
    if (hit && hit.rv === rv) return hit.observed;
    const c = checkResource({ ...obj, kind: kind.kind }, `kubernetes:${obj.metadata?.namespace}/${obj.metadata?.name}`);
    const observed: ObservedWithAge = {
      ...c.observed!,
      createdAt: obj.metadata?.creationTimestamp ? new Date(obj.metadata.creationTimestamp).toISOString() : undefined,
    };
    parsed.set(uid, { rv, observed });
    return observed;
  }

  async function pass(): Promise<number> {
    if (!election.isLeader()) return 0;
    let writes = 0;
    const objects: { kind: CrdKind; obj: Cr }[] = [];
    for (const { kind, inf } of informers) for (const obj of inf.list()) objects.push({ kind, obj });
    const live = new Set(objects.map((x) => x.obj.metadata?.uid));
    for (const uid of [...parsed.keys()]) if (!live.has(uid)) parsed.delete(uid);

    // 1. Finalizers first: nothing is granted for a CR whose deletion we could miss.
    for (const x of objects) {
      const m = x.obj.metadata!;
      if (m.deletionTimestamp || (m.finalizers ?? []).includes(FINALIZER)) continue;
      if (!election.isLeader()) return writes;
      try {
        x.obj = await client.replace(x.kind, { ...x.obj, metadata: { ...m, finalizers: [...(m.finalizers ?? []), FINALIZER] } });
        writes++;
      } catch (e) {
        if (statusOf(e) !== 409 && statusOf(e) !== 404) log.warn('finalizer add failed', { resource: `${m.namespace}/${m.name}`, err: errMsg(e) });
      }
    }
    // 2. Reconcile and apply.
    const observed = objects.map((x) => observe(x.kind, x.obj));
    const prev = new Map<string, CrStatus>();
    for (let i = 0; i < objects.length; i++) if (objects[i]!.obj.status) prev.set(keyOf(observed[i]!), objects[i]!.obj.status as unknown as CrStatus);
    if (!election.isLeader()) return writes;
    const r = await applier.run(observed, prev);
    if (r.outcome.apply && (r.outcome.apply.created.length || r.outcome.apply.updated.length || r.outcome.apply.deleted.length)) writes++;
    if (r.outcome.applyError) log.error('apply failed', { owner, err: r.outcome.applyError });
    // 3. Status, only where it changed.
    for (let i = 0; i < objects.length; i++) {
      const x = objects[i]!;
      const next = r.statuses.get(keyOf(observed[i]!));
      if (!next || x.obj.metadata?.deletionTimestamp || canonical(next) === canonical(x.obj.status ?? null)) continue;
      if (!election.isLeader()) return writes;
      try {
        x.obj = await client.replaceStatus(x.kind, { ...x.obj, status: next as unknown as Record<string, unknown> });
        writes++;
      } catch (e) {
        if (statusOf(e) !== 409 && statusOf(e) !== 404)
          log.warn('status write failed', { resource: `${x.obj.metadata?.namespace}/${x.obj.metadata?.name}`, err: errMsg(e) });
      }
    }
    // 4. Deleting CRs whose grants are withdrawn lose the finalizer (then the API server removes them).
    const withdrawn = new Set(r.withdrawn);
    for (let i = 0; i < objects.length; i++) {
      const x = objects[i]!;
      const m = x.obj.metadata!;
      if (!m.deletionTimestamp || !(m.finalizers ?? []).includes(FINALIZER) || !withdrawn.has(keyOf(observed[i]!))) continue;
      if (!election.isLeader()) return writes;
      try {
        await client.replace(x.kind, { ...x.obj, metadata: { ...m, finalizers: (m.finalizers ?? []).filter((f) => f !== FINALIZER) } });
        writes++;
      } catch (e) {
        if (statusOf(e) !== 409 && statusOf(e) !== 404) log.warn('finalizer removal failed', { resource: `${m.namespace}/${m.name}`, err: errMsg(e) });
      }
    }
    o.onPass?.(r, writes);
    return writes;
  }

  function trigger(): Promise<number> {
    if (running) {
      again = true;
      return running;
    }
    running = pass()
      .catch((e) => {
        log.error('pass failed', { owner, err: errMsg(e) });
        return 0;
      })
      .finally(() => {
        running = undefined;
        if (again && !closed) {
          again = false;
          void trigger();
        }
      });
    return running;
  }
  function schedule(ms = o.debounceMs ?? 50): void {
    if (closed) return;
    clearTimeout(debounce);
    debounce = setTimeout(() => void trigger(), ms);
  }

  const restarts = new Map<CrdKind, number>();
  // client-node's start() resolves after a failed list too (it emits `error`): an informer has
  // listed only when a start resolved with no error meanwhile.
  const listed = new Set<CrdKind>();
  let onSynced: () => void = () => {};
  const synced = new Promise<void>((resolve) => (onSynced = resolve));
  const startListing = (kind: CrdKind, inf: (typeof informers)[number]['inf'], failed: { now: boolean }) => {
    failed.now = false;
    return inf.start().then(
      () => {
        if (failed.now) return;
        restarts.delete(kind);
        listed.add(kind);
        if (listed.size === informers.length) onSynced();
      },
      () => {},
    );
  };
  for (const { kind, inf } of informers) {
    const failed = { now: false };
    for (const ev of ['add', 'update', 'delete'] as const) inf.on(ev, () => schedule());
    inf.on('error', (e: unknown) => {
      failed.now = true;
      if (closed) return;
      const delay = Math.min(30_000, (restarts.get(kind) ?? 500) * 2);
      restarts.set(kind, delay);
      log.warn('informer stopped; restarting', { kind: kind.kind, inMs: delay, err: errMsg(e) });
      setTimeout(() => {
        if (!closed) void startListing(kind, inf, failed);
      }, delay).unref();
    });
    void startListing(kind, inf, failed);
  }
  const resyncTimer = setInterval(() => void trigger(), o.resyncMs ?? 30_000);
  resyncTimer.unref();

  async function stopInformers(): Promise<void> {
    closed = true;
    clearTimeout(debounce);
    clearInterval(resyncTimer);
    await Promise.all(informers.map(({ inf }) => inf.stop()));
  }

  return {
    owner,
    isLeader: () => election.isLeader(),
    roleKnown: () => election.known(),
    synced,
    resync: () => (running ? running.then(() => trigger()) : trigger()),
    async close() {
      await stopInformers();
      await running?.catch(() => 0);
      await election.stop();
    },
    async crash() {
      election.halt();
      await stopInformers();
    },
  };
}
