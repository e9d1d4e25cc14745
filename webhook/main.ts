/**
 * `node dist/webhook/main.js [-addr :8443] [-health-addr :8080] [-idp-url URL] [-require-provisioned=false] ...`
 * (or `tsx webhook/main.ts ...`): the admission webhook. Flags override their env variables
 * (see config.ts and README.md); a bad setting or an unreadable cert exits 1 with one line.
 */
import { isMain, runUntilSignal } from '../runtime/lib/process.js';
import { loadProcessConfig } from '../runtime/lib/settings.js';
import { flagsToEnv, webhookSettings } from './config.js';
import { startWebhook } from './server.js';

if (isMain(import.meta.url)) {
  void runUntilSignal(
    'webhook',
    async (config) => {
      const wh = await startWebhook(webhookSettings(config));
      return { ports: { webhook: wh.port, health: wh.healthPort }, close: () => wh.close() };
    },
    { load: () => loadProcessConfig(flagsToEnv(process.argv.slice(2))) },
  );
}
