/**
 * Who holds an audit chain's lease, and when a starting process may prove that the holder is its
 * own dead predecessor (a container restarted in its pod, a process restarted on its host) and
 * take the chain back at once instead of waiting for the lease to lapse.
 *
 * The holder records its identity (pod or host name), the kernel's boot id, its network and pid
 * namespaces and its pid. A holder is this process's dead predecessor only when all of:
 * - same identity and same kernel boot (same pod name on the same node, not rebooted);
 * - same network namespace (the same pod: a container restart keeps the pod's network
 *   namespace; another pod, or another host, never shares it);
 * - and either the same pid namespace with the holder's pid gone (or now this very process), or a
 *   different pid namespace: the previous container of this pod (Kubernetes runs one container of
 *   a name per pod and restarts it only after it exited; the chart runs one control plane per pod).
 * Anything unknown (not Linux, a holder row written before 0023) proves nothing: the start waits
 * for the lease to lapse as before. Two live processes are never both writers: a live holder in
 * the same pid namespace is seen alive, and one elsewhere is in another pod.
 */
import { readFileSync, readlinkSync } from 'node:fs';

export interface Holder {
  identity: string;
  boot: string;
  netNs: string;
  pidNs: string;
  pid: number;
}

const read = (f: () => string): string | undefined => {
  try {
    return f().trim() || undefined;
  } catch {
    return undefined;
  }
};

/** This process as a lease holder, or undefined where the kernel facts are not readable. */
export function thisHolder(identity: string): Holder | undefined {
  const boot = read(() => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8'));
  const netNs = read(() => readlinkSync('/proc/self/ns/net'));
  const pidNs = read(() => readlinkSync('/proc/self/ns/pid'));
  if (!boot || !netNs || !pidNs) return undefined;
  return { identity, boot, netNs, pidNs, pid: process.pid };
}

/** A stored holder (JSON), or undefined when absent or not of this shape. */
export function parseHolder(text: string | null | undefined): Holder | undefined {
  if (!text) return undefined;
  try {
    const h = JSON.parse(text) as Partial<Holder>;
    const strings = [h.identity, h.boot, h.netNs, h.pidNs].every((v) => typeof v === 'string' && v.length > 0);
    return strings && Number.isInteger(h.pid) && h.pid! > 0 ? (h as Holder) : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `pid` names a live process in this pid namespace (EPERM: alive, someone else's). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Pure: true only when `held` is provably `me`'s own dead predecessor (see the module comment). */
export function isOwnDeadPredecessor(held: Holder | undefined, me: Holder | undefined, alive: (pid: number) => boolean = pidAlive): boolean {
  if (!held || !me) return false;
  if (held.identity !== me.identity || held.boot !== me.boot || held.netNs !== me.netNs) return false;
  if (held.pidNs !== me.pidNs) return true;
  return held.pid === me.pid || !alive(held.pid);
}
