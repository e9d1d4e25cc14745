/**
 * `node dist/runtime/broker/main.js` (or `tsx runtime/broker/main.ts`): the model broker as its
 * own process on BROKER_ADDR (:8080), asking BROKER_AUTHZ_URL and reporting to BROKER_USAGE_URL
 * (see server.ts and README.md). In-flight completions get 10 s on SIGTERM.
 */
import { BRAND } from '../lib/brand.js';
import { isMain, runUntilSignal } from '../lib/process.js';
import { initTracing, shutdownTracing } from '../lib/tracing.js';
import { startBroker } from './server.js';

if (isMain(import.meta.url)) {
  void runUntilSignal('broker', async (config) => {
    const tracing = initTracing(config.tracing, `${BRAND}-broker`);
    const b = await startBroker({ settings: config });
    return {
      ports: { broker: b.port },
      async close() {
        await b.close();
        if (tracing) await shutdownTracing();
      },
    };
  });
}
