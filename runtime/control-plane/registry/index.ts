/** Registry: `createRegistry(store, {audit, now})` -> Registry (snapshot, apply, upsert, remove). */
export { createRegistry } from './registry.js';
export type { ApplyOptions, ApplyResult, Registry, RegistryOptions } from './registry.js';
export { RegistryConflictError, RegistryValidationError, parseService, storedShape } from './service.js';
export { planApply, contentKey, type ApplyPlan } from './plan.js';
export { createSnapshot, emptySnapshot, type RegistryEntry, type RegistrySnapshot } from './snapshot.js';
