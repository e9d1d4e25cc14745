/**
 * The pure half of `apply(desired, {owner})`: desired entries against the current ones ->
 * what to create, update and prune, what is unchanged, what another owner holds (a conflict,
 * never taken over) and what is invalid (reported, never blocking the others). The registry
 * plans once against its snapshot (nothing changed: no transaction at all) and again inside the
 * write transaction against the rows it locked, so a stale snapshot never writes a wrong plan.
 */
import { RegistryValidationError, parseService, storedShape } from './service.js';
import type { Service } from '../types.js';

export interface CurrentEntry {
  readonly svc: Service;
  readonly owner: string;
  readonly key: string;
}

export interface ApplyPlan {
  /** Validated services to create, in desired order. */
  creates: Service[];
  /** Validated services to update (owned by this owner, content changed). */
  updates: Service[];
  /** Names to prune: owned by this owner and no longer desired. */
  deletes: string[];
  unchanged: string[];
  /** Desired names held by another owner, with that owner. */
  conflicts: { name: string; owner: string }[];
  /** Desired entries that failed validation (or repeat a name), with why. */
  invalid: { name: string; error: string }[];
}

/** The canonical content of a service: its stored shape without registeredAt, as JSON. */
export function contentKey(s: Service): string {
  return JSON.stringify(storedShape(s, ''));
}

function nameOf(input: unknown, i: number): string {
  const n = input && typeof input === 'object' ? (input as { name?: unknown }).name : undefined;
  return typeof n === 'string' && n ? n : `#${i}`;
}

/**
 * `current(name)` reads the entry as it stands; `owned` lists the names this owner holds now.
 * `prune: false` (the single-entry API upsert) never deletes.
 */
export function planApply(
  desired: readonly unknown[],
  owner: string,
  current: (name: string) => CurrentEntry | undefined,
  owned: Iterable<string>,
  opts: { prune?: boolean } = {},
): ApplyPlan {
  const plan: ApplyPlan = { creates: [], updates: [], deletes: [], unchanged: [], conflicts: [], invalid: [] };
  const seen = new Set<string>();
  desired.forEach((input, i) => {
    const name = nameOf(input, i);
    if (seen.has(name)) {
      plan.invalid.push({ name, error: `duplicate name ${JSON.stringify(name)} in the desired state` });
      return;
    }
    seen.add(name);
    let svc: Service;
    try {
      svc = parseService(input);
    } catch (e) {
      plan.invalid.push({ name, error: e instanceof RegistryValidationError ? e.message : String(e) });
      return;
    }
    const cur = current(svc.name);
    if (!cur) plan.creates.push(svc);
    else if (cur.owner !== owner) plan.conflicts.push({ name: svc.name, owner: cur.owner });
    else if (cur.key === contentKey(svc)) plan.unchanged.push(svc.name);
    else plan.updates.push(svc);
  });
  // An invalid desired entry keeps its current version: seen covers it, so it is not pruned.
  if (opts.prune !== false) for (const name of owned) if (!seen.has(name)) plan.deletes.push(name);
  plan.deletes.sort();
  return plan;
}

/** True when the plan writes nothing. */
export const isNoop = (p: ApplyPlan): boolean => p.creates.length === 0 && p.updates.length === 0 && p.deletes.length === 0;
