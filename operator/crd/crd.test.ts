import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { checkResource } from '../resource.js';
import { readFolder, readYamlText } from '../validate/files.js';
import { crdFileName, CRD_DIR, renderCrd } from './generate.js';
import { API_VERSION, KINDS, openApiSchema, type Schema } from './definitions.js';

const EXAMPLES = fileURLToPath(new URL('../../crds/examples/', import.meta.url));
const INVALID = fileURLToPath(new URL('./testdata/invalid.yaml', import.meta.url));

describe('CRD files', () => {
  it.each(KINDS.map((k) => [k.kind, k] as const))('crds/%s yaml is what definitions.ts renders', (_n, k) => {
    expect(readFileSync(CRD_DIR + crdFileName(k), 'utf8'), 'run: npx tsx operator/crd/generate.ts').toBe(renderCrd(k));
  });

  it('each CRD has a status subresource, the writ category, short names and READY/REASON/AGE columns', () => {
    for (const k of KINDS) {
      const crd = parseYaml(readFileSync(CRD_DIR + crdFileName(k), 'utf8'));
      const v = crd.spec.versions[0];
      expect(v.subresources).toEqual({ status: {} });
      expect(crd.spec.names.categories).toEqual(['writ']);
      expect(crd.spec.names.shortNames.length).toBeGreaterThan(0);
      expect(v.additionalPrinterColumns.map((c: { name: string }) => c.name)).toEqual(expect.arrayContaining(['Ready', 'Reason', 'Age']));
      const conds = v.schema.openAPIV3Schema.properties.status.properties;
      expect(Object.keys(conds)).toEqual(expect.arrayContaining(['observedGeneration', 'policyVersion', 'conditions']));
      expect(conds.conditions.items.properties.observedGeneration.type).toBe('integer');
    }
  });
});

describe('crds/examples', () => {
  const read = readFolder(EXAMPLES);

  it('every example validates against its CRD schema and CEL rules', () => {
    expect(read.problems).toEqual([]);
    expect(read.resources.every((r) => r.errors.length === 0 && r.spec)).toBe(true);
    expect(new Set(read.resources.map((r) => r.kind))).toEqual(new Set(KINDS.map((k) => k.kind)));
  });

  it('the examples cover every spec field of every kind', () => {
    const paths = (s: Schema, pre: string): string[] =>
      Object.entries(s.properties ?? {}).flatMap(([k, v]) => [
        pre + k,
        ...(v.type === 'object' ? paths(v, `${pre}${k}.`) : v.items?.type === 'object' ? paths(v.items, `${pre}${k}[].`) : []),
      ]);
    const has = (v: unknown, path: string[]): boolean => {
      if (path.length === 0) return v !== undefined;
      const [head, ...rest] = path as [string, ...string[]];
      if (head.endsWith('[]')) {
        const arr = (v as Record<string, unknown> | undefined)?.[head.slice(0, -2)];
        return Array.isArray(arr) && arr.some((x) => has(x, rest));
      }
      return v !== null && typeof v === 'object' && has((v as Record<string, unknown>)[head], rest);
    };
    for (const k of KINDS) {
      const raw = readFolder(EXAMPLES).resources.filter((r) => r.kind === k.kind);
      const docs = rawSpecs(k.kind);
      for (const p of paths(k.spec, '')) {
        const segs = p.replace(/\[\]\./g, '[].').split('.');
        expect(
          docs.some((d) => has(d, segs)),
          `${k.kind}: no example sets spec.${p}`,
        ).toBe(true);
      }
      expect(raw.length).toBeGreaterThan(0);
    }
  });
});

/** The specs as written in the example files (before defaulting). */
function rawSpecs(kind: string): unknown[] {
  const out: unknown[] = [];
  for (const f of ['services.yaml', 'agents/research-agent.yaml', 'agents/summarizer.yaml', 'agents/tool-agent.yaml']) {
    for (const line of readFileSync(EXAMPLES + f, 'utf8').split(/^---$/m)) {
      const d = parseYaml(line);
      if (d?.kind === kind) out.push(d.spec);
    }
  }
  return out;
}

describe('invalid resources', () => {
  const text = readFileSync(INVALID, 'utf8');
  const docs = text.split(/^---$/m);
  let offset = 0;
  const cases = docs.map((d) => {
    const expectText = /# expect: (.*)/.exec(d)![1]!;
    const first = offset + 1;
    offset += d.split('\n').length - 1;
    return { expectText, first, last: offset + 1, body: d };
  });

  it.each(cases.map((c) => [c.expectText, c] as const))('rejected: %s', (_t, c) => {
    const { problems } = readYamlText(text, 'invalid.yaml');
    const mine = problems.filter((p) => p.line >= c.first && p.line <= c.last);
    expect(mine.map((p) => p.message).join('\n')).toContain(c.expectText);
    // The line points into the document, at the field when it exists.
    expect(mine.every((p) => p.file === 'invalid.yaml')).toBe(true);
  });

  it('points at the line of the offending field', () => {
    const { problems } = readYamlText(
      `apiVersion: ${API_VERSION}\nkind: AgentPolicy\nmetadata:\n  name: a\nspec:\n  agent: a\n  budget:\n    tokensPerHour: -5\n`,
      'p.yaml',
    );
    expect(problems).toEqual([{ file: 'p.yaml', line: 8, message: 'AgentPolicy a: spec.budget.tokensPerHour: must be >= 0, got -5' }]);
  });

  it('documents of other groups are not ours and are skipped; a YAML syntax error is reported with its line', () => {
    const r = readYamlText('apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n---\nkey: [unclosed\n', 'mixed.yaml');
    expect(r.resources).toEqual([]);
    expect(r.problems).toHaveLength(1);
    expect(r.problems[0]!.line).toBe(5);
    expect(r.problems[0]!.message).toMatch(/^YAML: /);
  });
});

describe('transition rules (oldSelf)', () => {
  const ga = (spec: Record<string, unknown>) => ({
    apiVersion: API_VERSION,
    kind: 'GovernedAgent',
    metadata: { name: 'g' },
    spec: { tenant: 't', ownerType: 'employee', ownerRef: 'idp_a:t:1', ...spec },
  });

  it('tenant is immutable and retired is terminal, on update only', () => {
    expect(checkResource(ga({ tenant: 'u' }), 'x').errors).toEqual([]);
    expect(checkResource(ga({ tenant: 'u' }), 'x', ga({})).observed!.errors).toEqual(['spec.tenant: tenant is immutable']);
    expect(checkResource(ga({ state: 'draft' }), 'x', ga({ state: 'retired' })).observed!.errors).toEqual(['spec: retired is terminal']);
    expect(checkResource(ga({ state: 'retired' }), 'x', ga({ state: 'retired' })).errors).toEqual([]);
  });

  it('defaults are applied before validation (state draft, public false, kind service)', () => {
    expect(checkResource(ga({}), 'x').observed!.spec!.state).toBe('draft');
    const svc = checkResource({ apiVersion: API_VERSION, kind: 'RegistryService', metadata: { name: 's' }, spec: { upstream: 'a:1' } }, 'x').observed!;
    expect(svc.spec).toEqual({ upstream: 'a:1', public: false, kind: 'service' });
  });

  it('the openAPIV3Schema of each kind is structural: every node has a type', () => {
    const typed = (s: Schema): boolean => s.type !== undefined && Object.values(s.properties ?? {}).every(typed) && (!s.items || typed(s.items));
    for (const k of KINDS) expect(typed(openApiSchema(k))).toBe(true);
  });
});
