/**
 * `node dist/runtime/identity/main.js` (or `tsx runtime/identity/main.ts`): the identity
 * authority as its own process on `:${PORT}` (8090), store from IDP_STORE_BACKEND / IDP_DB_URL /
 * IDP_DATA_DIR. With WRIT_EXAMPLES=true the example agents (runtime/examples/registry.yaml) that
 * do not exist yet are registered once the issuer key is loaded.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { envName } from '../lib/brand.js';
import { bool, type Env } from '../lib/config.js';
import { logger } from '../lib/log.js';
import { isMain, runUntilSignal, type Closable } from '../lib/process.js';
import { startIdentityAuthority } from './server.js';

const log = logger('identity');
const EXAMPLES = fileURLToPath(new URL('../examples/registry.yaml', import.meta.url));

export async function startIdentityProcess(env: Env = process.env): Promise<Closable> {
  const examples = bool(env, envName('EXAMPLES'), false);
  const idp = await startIdentityAuthority({ env });
  if (examples) {
    try {
      await idp.authority.whenReady();
      const doc = (parseYaml(readFileSync(EXAMPLES, 'utf8')) ?? {}) as { agents?: { name?: unknown }[] };
      for (const a of doc.agents ?? []) {
        if ((await idp.authority.app.request(`/v1/agents/${encodeURIComponent(String(a.name))}`)).status === 200) continue;
        const res = await idp.authority.app.request('/v1/agents', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(a) });
        if (res.status >= 300) throw new Error(`example agent rejected: ${res.status} ${await res.text()}`);
      }
      log.info('example agents registered', { agents: (doc.agents ?? []).length });
    } catch (e) {
      await idp.close();
      throw e;
    }
  }
  return { ports: { identity: idp.port }, close: () => idp.close() };
}

if (isMain(import.meta.url)) void runUntilSignal('identity', () => startIdentityProcess());
