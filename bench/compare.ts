/**
 * `npm run bench:compare -- <filter> [ref]`: runs the benchmarks whose file name contains
 * <filter> on this tree and on a git ref (default `HEAD~1`) checked out as a worktree beside it,
 * alternating the two in the same run (rounds interleaved, so machine noise falls on both), and
 * prints each tree's lines after each other. A bench file that does not exist at the ref runs on
 * this tree only. The worktree shares this tree's node_modules and is removed afterwards.
 *
 *   npm run bench:compare -- authz 22707ee
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const filter = process.argv[2] ?? '';
const ref = process.argv[3] ?? 'HEAD~1';
const rounds = Number(process.env.BENCH_ROUNDS ?? 2);

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

function run(tree: string, file: string): string {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(tree, 'bench', file)], {
    cwd: tree,
    encoding: 'utf8',
    timeout: 15 * 60_000,
    env: { ...process.env, BENCH_SOURCE: '1' },
  });
  return (r.stdout ?? '') + (r.status === 0 ? '' : `!! exited with ${r.status ?? r.signal}\n${(r.stderr ?? '').slice(-2000)}`);
}

try {
  for (const f of files) {
    const atBase = existsSync(join(base, 'bench', f));
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
