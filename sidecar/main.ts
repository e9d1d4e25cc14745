/**
 * `tsx sidecar/main.ts`: runs the sidecar from the environment (see server.ts). Exits 1 with one
 * clear line on stderr when it cannot start (no readable, valid identity file, a non-loopback
 * address, a missing broker or proxy URL); stops cleanly on SIGINT/SIGTERM.
 */
import { fileURLToPath } from 'node:url';
import { errMsg } from '../runtime/lib/log.js';
import { loadConfig } from '../runtime/lib/settings.js';
import { startSidecar, type RunningSidecar } from './server.js';

async function main(): Promise<void> {
  let sidecar: RunningSidecar;
  try {
    sidecar = await startSidecar({ config: loadConfig(process.env) });
  } catch (e) {
    process.stderr.write(`sidecar: refusing to start: ${errMsg(e)}\n`);
    process.exit(1);
  }
  const stop = () => {
    const force = setTimeout(() => process.exit(1), 10_000);
    force.unref();
    void sidecar.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) void main();
