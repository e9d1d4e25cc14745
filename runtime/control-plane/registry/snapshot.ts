/**
 * An immutable, versioned view of the registry: what every decision reads. A new snapshot is
 * built (copy on write) for each change; readers holding the old one keep a consistent view.
 * Derived indexes (sorted list, upstream index, content hash) are computed on first use.
 */
import { createHash } from 'node:crypto';
import type { Service } from '../types.js';

/** One stored entry: the served (frozen) service, its owner, the version it was written at and its content key. */
export interface RegistryEntry {
  readonly svc: Service;
  readonly owner: string;
  readonly rev: number;
  /** Canonical content (storedShape without registeredAt, as JSON): equal keys, equal entries. */
  readonly key: string;
}

export interface RegistrySnapshot {
  /** The registry version this snapshot shows (0 for an empty store that was never written). */
  readonly version: number;
  readonly size: number;
  get(name: string): Service | undefined;
  entry(name: string): RegistryEntry | undefined;
  /** Every service, sorted by name (a frozen array). */
  list(): readonly Service[];
  /** The first service by name whose upstream is `host:port` (host case-insensitive). */
  findByUpstream(hostPort: string): Service | undefined;
  /** Every service whose upstream is `host:port`, sorted by name. */
  byUpstream(hostPort: string): readonly Service[];
  /** Names owned by `owner`. */
  ownedBy(owner: string): string[];
  /** SHA-256 over every entry's owner and content, in name order (hex). */
  readonly hash: string;
  /** The entries, for building the next snapshot. */
  readonly entries: ReadonlyMap<string, RegistryEntry>;
}

const EMPTY: readonly Service[] = Object.freeze([]);

export function createSnapshot(version: number, entries: ReadonlyMap<string, RegistryEntry>): RegistrySnapshot {
  let sorted: readonly Service[] | undefined;
  let upstreams: Map<string, Service[]> | undefined;
  let hash: string | undefined;
  const sortedList = (): readonly Service[] =>
    (sorted ??= Object.freeze([...entries.values()].map((e) => e.svc).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))));
  const upstreamIndex = (): Map<string, Service[]> => {
    if (!upstreams) {
      upstreams = new Map();
      for (const s of sortedList()) {
        const k = s.upstream.toLowerCase();
        const list = upstreams.get(k);
        if (list) list.push(s);
        else upstreams.set(k, [s]);
      }
    }
    return upstreams;
  };
  return Object.freeze({
    version,
    size: entries.size,
    entries,
    get: (name: string) => entries.get(name)?.svc,
    entry: (name: string) => entries.get(name),
    list: sortedList,
    findByUpstream: (hostPort: string) => upstreamIndex().get(hostPort.toLowerCase())?.[0],
    byUpstream: (hostPort: string) => upstreamIndex().get(hostPort.toLowerCase()) ?? EMPTY,
    ownedBy(owner: string) {
      const out: string[] = [];
      for (const [name, e] of entries) if (e.owner === owner) out.push(name);
      return out;
    },
    get hash() {
      if (hash === undefined) {
        const h = createHash('sha256');
        for (const s of sortedList()) {
          const e = entries.get(s.name)!;
          h.update(`${e.owner}\n${e.key}\n`);
        }
        hash = h.digest('hex');
      }
      return hash;
    },
  });
}

export const emptySnapshot = (): RegistrySnapshot => createSnapshot(0, new Map());

/** A snapshot of plain services (tests, benchmarks and the dry-run of a desired state). */
export function snapshotOf(services: readonly Service[], version = 1, owner = 'api'): RegistrySnapshot {
  const entries = new Map<string, RegistryEntry>();
  for (const s of services) {
    const svc = Object.freeze({ ...s });
    entries.set(s.name, { svc, owner, rev: version, key: JSON.stringify(svc) });
  }
  return createSnapshot(version, entries);
}
