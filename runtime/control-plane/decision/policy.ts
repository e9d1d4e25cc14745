/**
 * The policy snapshot every decision reads: the registry's immutable snapshot, the governance
 * standing last fetched from the identity authority, and the decision settings. `current()`
 * returns the same frozen object until one of its parts changes (two reference checks a call).
 */
import { createHash } from 'node:crypto';
import type { GovernanceStanding } from '../identity-port.js';
import type { RegistrySnapshot } from '../registry/snapshot.js';
import type { DecisionSettings, PolicySnapshot } from './types.js';

export interface PolicySource {
  current(): PolicySnapshot;
}

export function makePolicySnapshot(registry: RegistrySnapshot, governance: GovernanceStanding | undefined, settings: DecisionSettings): PolicySnapshot {
  let hash: string | undefined;
  return Object.freeze({
    version: registry.version,
    registry,
    governance,
    settings,
    get hash() {
      if (hash === undefined) {
        const h = createHash('sha256').update(registry.hash).update('\n');
        for (const [name, status] of [...(governance?.agents ?? new Map<string, string>())].sort(([a], [b]) => (a < b ? -1 : 1)))
          h.update(`${name}=${status}\n`);
        h.update(JSON.stringify({ ...settings, connectPorts: [...settings.connectPorts].sort((a, b) => a - b) }));
        hash = h.digest('hex');
      }
      return hash;
    },
  });
}

export function createPolicySource(parts: {
  registry: { snapshot(): RegistrySnapshot };
  standing?: () => GovernanceStanding | undefined;
  settings: DecisionSettings;
}): PolicySource {
  let cached: PolicySnapshot | undefined;
  return {
    current() {
      const reg = parts.registry.snapshot();
      const gov = parts.standing?.();
      if (cached && cached.registry === reg && cached.governance === gov) return cached;
      cached = makePolicySnapshot(reg, gov, parts.settings);
      return cached;
    },
  };
}
