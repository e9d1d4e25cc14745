/**
 * Second step of `npm run build` (after `tsc -p tsconfig.build.json`): copies the runtime assets
 * the code finds next to itself through `import.meta.url` (SQL migrations, YAML model tables and
 * examples, CRDs and their examples, portal assets) into dist/, at the same relative paths. The
 * rule is "every file that is not TypeScript, a README or test data", so a new asset needs no
 * edit here.
 */
import { cpSync, existsSync, statSync } from 'node:fs';
import { basename, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** The folders tsconfig.build.json compiles, plus the CRDs the operator reads. */
export const ASSET_ROOTS = ['runtime', 'operator', 'webhook', 'sidecar', 'crds'];

/** True for a file (or folder) that belongs in dist/ as an asset. */
export function isAsset(rel: string, isDir: boolean): boolean {
  const parts = rel.split(sep);
  if (parts.some((p) => p === 'testdata' || p === 'testing' || p === 'node_modules')) return false;
  if (isDir) return true;
  const name = basename(rel);
  return !/\.(ts|tsbuildinfo)$/.test(name) && name !== 'README.md';
}

export function copyAssets(root = ROOT, out = join(root, 'dist')): void {
  for (const dir of ASSET_ROOTS) {
    const from = join(root, dir);
    if (!existsSync(from)) continue;
    cpSync(from, join(out, dir), {
      recursive: true,
      filter: (src) => isAsset(relative(root, src), statSync(src).isDirectory()),
    });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) copyAssets();
