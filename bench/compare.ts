/**
 * `npm run bench:compare -- <filter> [ref]`: runs the benchmarks whose file name contains
 * <filter> on this tree and on a git ref (default `HEAD~1`) checked out as a worktree beside it,
 * alternating the two in the same run (rounds interleaved, so machine noise falls on both), and
 * prints each tree's lines after each other. A bench file that does not exist at the ref runs on
 * this tree only. The worktree shares this tree's node_modules and is removed afterwards.
 *
 *   npm run bench:compare -- authz 22707ee
 *
 * BENCH_BUILT=1 compares built JavaScript, as production runs it: both trees are compiled
 * (`tsc -p tsconfig.build.json` plus the assets; this tree's build config is used for a ref that
 * predates it) and this tree's bench file runs against each build in turn through BENCH_DIST, so
 * the harness is the same and only the code under test differs (benches that load their servers
 * through `codeUnderTest` in bench/lib.ts, or read BENCH_DIST themselves).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchProcessEnv } from './lib.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const filter = process.argv[2] ?? '';
const ref = process.argv[3] ?? 'HEAD~1';
const rounds = Number(process.env.BENCH_ROUNDS ?? 2);
const builtMode = process.env.BENCH_BUILT === '1';

const files = readdirSync(join(ROOT, 'bench'))
  .filter((f) => f.endsWith('.bench.ts') && f.includes(filter))
  .sort();
if (!files.length) {
  console.error(`no bench/*.bench.ts matches ${JSON.stringify(filter)}`);
  process.exit(2);
}
const base = mkdtempSync(join(tmpdir(), 'writ-bench-base-'));
const sha = execFileSync('git', ['rev-parse', '--short', ref], { cwd: ROOT }).toString().trim();
execFileSync('git', ['worktree', 'add', '--detach', base, ref], { cwd: ROOT, stdio: 'ignore' });
symlinkSync(join(ROOT, 'node_modules'), join(base, 'node_modules'));

/** Compiles a tree to its dist/ with this tree's build config (and assets). */
async function build(tree: string): Promise<void> {
  if (!existsSync(join(tree, 'tsconfig.build.json'))) copyFileSync(join(ROOT, 'tsconfig.build.json'), join(tree, 'tsconfig.build.json'));
  rmSync(join(tree, 'dist'), { recursive: true, force: true });
  execFileSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], { cwd: tree, stdio: 'inherit' });
  const { copyAssets } = await import('../runtime/lib/build-assets.js');
  copyAssets(tree);
}

function run(tree: string, file: string): string {
  // Built: this tree's harness against the tree's build; source: each tree's own bench under tsx.
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(builtMode ? ROOT : tree, 'bench', file)], {
    cwd: builtMode ? ROOT : tree,
    encoding: 'utf8',
    timeout: 15 * 60_000,
    // spawnSync kills the child with SIGTERM past maxBuffer (1 MiB by default).
    maxBuffer: 256 * 1024 * 1024,
    env: builtMode ? benchProcessEnv({ BENCH_DIST: join(tree, 'dist/runtime/') }) : benchProcessEnv({ BENCH_SOURCE: '1' }),
  });
  return (r.stdout ?? '') + (r.status === 0 ? '' : `!! exited with ${r.status ?? r.signal}\n${(r.stderr ?? '').slice(-2000)}`);
}

try {
  if (builtMode) for (const tree of [ROOT, base]) await build(tree);
  for (const f of files) {
    const atBase = builtMode || existsSync(join(base, 'bench', f));
    for (let i = 1; i <= rounds; i++) {
      // Alternate which tree goes first, so neither always runs on the warmer machine.
      const order = i % 2 ? (['this', 'base'] as const) : (['base', 'this'] as const);
      for (const which of order) {
        if (which === 'base' && !atBase) continue;
        const tree = which === 'this' ? ROOT : base;
        process.stdout.write(`\n== ${f} round ${i}/${rounds} on ${which === 'this' ? 'this tree' : `${ref} (${sha})`}\n${run(tree, f)}`);
      }
    }
    if (!atBase) process.stdout.write(`(${f} does not exist at ${ref}: this tree only)\n`);
  }
} finally {
  execFileSync('git', ['worktree', 'remove', '--force', base], { cwd: ROOT, stdio: 'ignore' });
  rmSync(base, { recursive: true, force: true });
}
