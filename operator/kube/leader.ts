/**
 * Lease-based leader election (coordination.k8s.io/v1), with client-go's rules:
 *
 * - a candidate takes the Lease when it does not exist, has no holder, or its record (holder,
 *   renewTime) has not changed for `leaseDuration` as measured on the candidate's own clock since
 *   it first saw that record (never comparing clocks across machines);
 * - every write carries the Lease's resourceVersion, so of two candidates only one wins (409);
 * - the leader renews every `retryPeriod` and considers itself leader only until `renewDeadline`
 *   after its last successful renew. renewDeadline < leaseDuration, so a leader that cannot renew
 *   stops writing before anyone else may take over: never two writers.
 */
import type { V1Lease } from '@kubernetes/client-node';
import { errMsg, logger } from '../../runtime/lib/log.js';
import { statusOf, type KubeClient } from './client.js';

const log = logger('leader-election');

export interface LeaderElectionOptions {
  client: KubeClient;
  namespace: string;
  name: string;
  /** This replica's identity (pod name). */
  identity: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  onStartedLeading?: () => void;
  onStoppedLeading?: () => void;
  /** Local monotonic-ish clock (ms). */
  now?: () => number;
}

export interface LeaderElection {
  isLeader(): boolean;
  /** False until one attempt told this replica where it stands: leader, or standby behind a live holder. */
  known(): boolean;
  /** Stops campaigning; a leader releases the Lease (holder cleared) so a successor need not wait. */
  stop(): Promise<void>;
  /** Stops without releasing, as a crash would (tests). */
  halt(): void;
}

const micro = (ms: number) => new Date(ms).toISOString().replace(/Z$/, '000Z');

export function startLeaderElection(o: LeaderElectionOptions): LeaderElection {
  const now = o.now ?? (() => performance.timeOrigin + performance.now());
  const leaseDurationMs = o.leaseDurationMs ?? 15_000;
  const renewDeadlineMs = o.renewDeadlineMs ?? 10_000;
  const retryPeriodMs = o.retryPeriodMs ?? 2_000;
  if (!(renewDeadlineMs < leaseDurationMs)) throw new Error('renewDeadline must be shorter than leaseDuration');
  let leading = false;
  let known = false;
  let lastRenew = -Infinity;
  let observedRecord = '';
  let observedAt = -Infinity;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let inflight: Promise<void> = Promise.resolve();

  const leaderNow = () => leading && now() < lastRenew + renewDeadlineMs;
  function setLeading(v: boolean): void {
    known = true;
    if (v === leading) return;
    leading = v;
    log.info(v ? 'started leading' : 'stopped leading', { lease: `${o.namespace}/${o.name}`, identity: o.identity });
    (v ? o.onStartedLeading : o.onStoppedLeading)?.();
  }

  function spec(prev: V1Lease | undefined, takeOver: boolean): V1Lease['spec'] {
    const t = now();
    const s = prev?.spec ?? {};
    return {
      holderIdentity: o.identity,
      leaseDurationSeconds: Math.max(1, Math.ceil(leaseDurationMs / 1000)),
      acquireTime: (takeOver ? micro(t) : (s.acquireTime ?? micro(t))) as never,
      renewTime: micro(t) as never,
      leaseTransitions: (s.leaseTransitions ?? 0) + (takeOver && prev ? 1 : 0),
    };
  }

  async function tryOnce(): Promise<void> {
    const t = now();
    try {
      const cur = await o.client.readLease(o.namespace, o.name);
      if (!cur) {
        await o.client.createLease(o.namespace, {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: o.name, namespace: o.namespace },
          spec: spec(undefined, true),
        });
        lastRenew = t;
        setLeading(true);
        return;
      }
      const holder = cur.spec?.holderIdentity ?? '';
      const record = `${holder}|${String(cur.spec?.renewTime ?? '')}|${cur.metadata?.resourceVersion ?? ''}`;
      if (record !== observedRecord) {
        observedRecord = record;
        observedAt = t;
      }
      if (holder === o.identity) {
        await o.client.replaceLease(o.namespace, o.name, { ...cur, spec: spec(cur, false) });
        lastRenew = t;
        setLeading(true);
        return;
      }
      const durationMs = (cur.spec?.leaseDurationSeconds ?? leaseDurationMs / 1000) * 1000;
      if (holder !== '' && t < observedAt + durationMs) {
        setLeading(false);
        return;
      }
      await o.client.replaceLease(o.namespace, o.name, { ...cur, spec: spec(cur, true) });
      lastRenew = t;
      log.info('acquired lease', { lease: `${o.namespace}/${o.name}`, identity: o.identity, previous: holder || null });
      setLeading(true);
    } catch (e) {
      // 409: another candidate wrote first; anything else: we could not renew. Either way we are
      // leader only until the renew deadline passes.
      if (statusOf(e) !== 409) log.warn('lease attempt failed', { err: errMsg(e) });
      // A 409 means another candidate holds it now: standby is known. Any other error tells nothing.
      const wasKnown = known;
      if (!leaderNow()) setLeading(false);
      known = wasKnown || statusOf(e) === 409;
    }
  }

  const loop = () => {
    if (stopped) return;
    inflight = tryOnce().finally(() => {
      if (!stopped) timer = setTimeout(loop, retryPeriodMs);
    });
  };
  loop();
  // Step down exactly at the deadline, not at the next attempt.
  const watchdog = setInterval(
    () => {
      if (leading && !leaderNow()) setLeading(false);
    },
    Math.max(10, Math.floor(retryPeriodMs / 4)),
  );
  watchdog.unref();

  return {
    isLeader: leaderNow,
    known: () => known,
    halt() {
      stopped = true;
      clearTimeout(timer);
      clearInterval(watchdog);
      leading = false;
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      clearInterval(watchdog);
      await inflight.catch(() => {});
      if (!leaderNow()) {
        leading = false;
        return;
      }
      leading = false;
      o.onStoppedLeading?.();
      try {
        const cur = await o.client.readLease(o.namespace, o.name);
        if (cur?.spec?.holderIdentity === o.identity) {
          await o.client.replaceLease(o.namespace, o.name, {
            ...cur,
            spec: { ...cur.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: micro(now()) as never },
          });
        }
      } catch (e) {
        log.warn('lease release failed', { err: errMsg(e) });
      }
    },
  };
}
