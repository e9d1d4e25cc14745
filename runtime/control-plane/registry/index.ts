/** Registry: `createRegistry(store, {audit, now})` -> Registry (get/list/findByUpstream/upsert/close). */
export { createRegistry } from './registry.js';
export type { Registry, RegistryOptions } from './registry.js';
export { RegistryValidationError, parseService, storedShape } from './service.js';
