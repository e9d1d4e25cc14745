/**
 * The decision's boundaries, read from its source: the pure core imports no edge (the forward
 * proxy, the identity authority's code, a budget meter or store; the budget's pure policy and its
 * types are allowed), and no module of decision/ reaches itself again through value imports
 * (type-only imports are erased and do not count). Test support (testkit, *-testing) is left out.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const DIR = import.meta.dirname;
const IMPORT = /^(?:import|export)\s+(type\s+)?(?:([^;]*?)\s+from\s+)?'([^']+)';/gm;
const HERE = 'runtime/control-plane/decision';

interface Edge {
  from: string;
  to: string;
  typeOnly: boolean;
}

/** Every import and re-export of a source, with whether it is erased (type only). */
function importsOf(source: string): { spec: string; typeOnly: boolean }[] {
  const out: { spec: string; typeOnly: boolean }[] = [];
  for (const m of source.matchAll(IMPORT)) {
    const names = m[2]?.trim() ?? '';
    const braced = /^\{([\s\S]*)\}$/.exec(names);
    const allTypes = braced !== null && braced[1]!.split(',').every((n) => !n.trim() || n.trim().startsWith('type '));
    out.push({ spec: m[3]!, typeOnly: m[1] !== undefined || allTypes });
  }
  return out;
}

const production = readdirSync(DIR).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && !f.endsWith('-testing.ts') && f !== 'testkit.ts');
const edges: Edge[] = production.flatMap((f) =>
  importsOf(readFileSync(join(DIR, f), 'utf8')).map((i) => ({
    from: f,
    to: i.spec.startsWith('.') ? normalize(join(HERE, i.spec)) : i.spec,
    typeOnly: i.typeOnly,
  })),
);

describe('decision/ imports', () => {
  it('reads every import form it relies on', () => {
    expect(
      importsOf("import type { A } from './a.js';\nimport { type B, type C } from './b.js';\nimport { d, type E } from './c.js';\nexport * from './e.js';"),
    ).toEqual([
      { spec: './a.js', typeOnly: true },
      { spec: './b.js', typeOnly: true },
      { spec: './c.js', typeOnly: false },
      { spec: './e.js', typeOnly: false },
    ]);
    expect(production).toContain('driver.ts');
    expect(edges.length).toBeGreaterThan(40);
  });

  it('imports no edge: the proxy, the identity authority, a budget meter or store', () => {
    const edge = /^runtime\/(identity|control-plane\/proxy|control-plane\/budget(?!\/(policy|ports)\.js$))\//;
    expect(edges.filter((e) => edge.test(e.to))).toEqual([]);
    // What it does import from outside: the budget's pure policy, among others.
    expect(edges.some((e) => e.to === 'runtime/control-plane/budget/policy.js')).toBe(true);
  });

  it('has no value-level import cycle', () => {
    const next = new Map<string, string[]>();
    for (const e of edges) {
      if (e.typeOnly || !e.to.startsWith(`${HERE}/`)) continue;
      next.set(e.from, [...(next.get(e.from) ?? []), e.to.slice(HERE.length + 1).replace(/\.js$/, '.ts')]);
    }
    const cycles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const visit = (f: string, path: string[]) => {
      if (state.get(f) === 'done') return;
      if (state.get(f) === 'open') return void cycles.push([...path.slice(path.indexOf(f)), f].join(' -> '));
      state.set(f, 'open');
      for (const t of next.get(f) ?? []) visit(t, [...path, f]);
      state.set(f, 'done');
    };
    for (const f of production) visit(f, []);
    expect(cycles).toEqual([]);
  });
});
