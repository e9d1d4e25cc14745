/**
 * `npm run bench`: runs every bench/*.bench.ts in its own child process, one after another, and
 * prints their lines. Each benchmark measures its own baseline in the same run and prints ratios.
 * `npm run bench -- authz` runs only the benchmarks whose file name contains "authz".
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchProcessEnv } from './lib.js';

const dir = dirname(fileURLToPath(import.meta.url));
const filter = process.argv[2];
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.bench.ts') && (!filter || f.includes(filter)))
  .sort();
let failed = 0;
for (const f of files) {
  process.stdout.write(`\n== ${f}\n`);
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(dir, f)], { stdio: 'inherit', timeout: 15 * 60_000, env: benchProcessEnv() });
  if (r.status !== 0) {
    failed++;
    process.stdout.write(`!! ${f} exited with ${r.status ?? r.signal}\n`);
  }
}
process.exit(failed ? 1 : 0);
