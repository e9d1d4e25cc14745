/**
 * Readers shared by the static checks of the deployment files (image, compose, chart): which
 * components the image's entrypoint knows, and which environment variables the code reads.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BRAND_UPPER } from '../../runtime/lib/brand.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The image's entrypoint script (`/usr/local/bin/writ`), written inline in the Dockerfile. */
export function entrypointScript(dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8')): string {
  const m = /<<'SCRIPT' \/usr\/local\/bin\/writ\n([\s\S]*?)\nSCRIPT\n/.exec(dockerfile);
  if (!m) throw new Error('Dockerfile: no inline /usr/local/bin/writ script');
  return m[1]! + '\n';
}

/** `component) exec node ... dist/<path>.js` lines of the Dockerfile's entrypoint script -> source path. */
export function imageComponents(dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8')): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of dockerfile.matchAll(/^\s*([a-z-]+)\)\s+exec node\b[^\n]*?\bdist\/(\S+)\.js\b/gm)) out.set(m[1]!, `${m[2]}.ts`);
  return out;
}

function sources(dir: string, acc: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (name === 'node_modules' || name === 'testdata' || name === 'testing') continue;
    if (statSync(p).isDirectory()) sources(p, acc);
    else if (name.endsWith('.ts') && !name.endsWith('.test.ts') && !name.endsWith('testing.ts') && name !== 'testkit.ts') acc.push(p);
  }
  return acc;
}

/** `[file, package]` for every import of a devDependency from shipped (non-test) code. */
export function devImportsInShippedCode(): [string, string][] {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { devDependencies?: Record<string, string> };
  const dev = new Set(Object.keys(pkg.devDependencies ?? {}));
  const out: [string, string][] = [];
  for (const dir of ['runtime', 'operator', 'webhook', 'sidecar']) {
    for (const file of sources(join(ROOT, dir))) {
      for (const m of readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'((?:@[^/']+\/)?[^/'.][^/']*)[^']*'/g)) {
        if (dev.has(m[1]!)) out.push([file.slice(ROOT.length), m[1]!]);
      }
    }
  }
  return out;
}

/** The names in `set` (less `ignore`) that no code reads, sorted. */
export function unreadEnv(set: Iterable<string>, ignore: ReadonlySet<string> = new Set()): string[] {
  const read = envNamesReadByCode();
  return [...new Set(set)].filter((n) => !read.has(n) && !ignore.has(n)).sort();
}

/**
 * Every environment variable name the shipped code can read: upper-case string literals of the
 * non-test sources (`'AGENT_IDP_URL'`), `env.NAME` reads, and the brand-derived `envName('X')` names (`WRIT_X`).
 */
export function envNamesReadByCode(): Set<string> {
  const names = new Set<string>();
  for (const dir of ['runtime', 'operator', 'webhook', 'sidecar']) {
    for (const file of sources(join(ROOT, dir))) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/['"`]([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|PORT)['"`]/g)) names.add(m[1]!);
      for (const m of text.matchAll(/\benv\.([A-Z][A-Z0-9_]*)\b/g)) names.add(m[1]!);
      for (const m of text.matchAll(/envName\(\s*'([A-Z0-9_]+)'\s*\)/g)) names.add(`${BRAND_UPPER}_${m[1]}`);
    }
  }
  return names;
}
