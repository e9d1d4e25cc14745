/**
 * `node dist/runtime/identity/main.js` (or `tsx runtime/identity/main.ts`): the identity
 * authority as its own process on `:${PORT}` (8090), store from IDP_STORE_BACKEND / IDP_DB_URL /
 * IDP_DATA_DIR (see server.ts).
 */
import { isMain, runUntilSignal } from '../lib/process.js';
import { startIdentityAuthority } from './server.js';

if (isMain(import.meta.url)) {
  void runUntilSignal('identity', async (config) => {
    const idp = await startIdentityAuthority({ config });
    return { ports: { identity: idp.port }, close: () => idp.close() };
  });
}
