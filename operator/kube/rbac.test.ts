/**
 * The chart's operator RBAC (charts/writ/templates/operator-rbac.yaml) grants exactly the calls
 * in operator/kube/access.ts, the table every Kubernetes call of the operator is checked against
 * (and that source.test.ts compares with the requests the operator really made). No helm here:
 * the template's few actions are substituted by hand; e2e/kind/chart.test.ts renders the chart
 * with helm where it is installed.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { ACCESS, accessTriples } from './access.js';

const FILE = fileURLToPath(new URL('../../charts/writ/templates/operator-rbac.yaml', import.meta.url));

function render(text: string): any[] {
  const body = text
    .split('\n')
    .filter((l) => !/^\s*\{\{-?\s*(if|end|include "writ\.labels")[^}]*\}\}\s*$/.test(l))
    .map((l) => l.replace(/\{\{ include "writ\.fullname" \. \}\}/g, 'rel-writ').replace(/\{\{ \.Release\.Namespace \}\}/g, 'rel-ns'))
    .join('\n');
  expect(body, 'an unsubstituted template action is left').not.toMatch(/\{\{/);
  return parseAllDocuments(body).map((d) => d.toJS());
}

type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] };
const triples = (rules: Rule[]) =>
  rules.flatMap((r) => r.apiGroups.flatMap((g) => r.resources.flatMap((res) => r.verbs.map((v) => `${g}|${res}|${v}`)))).sort();

describe('operator RBAC in the chart', () => {
  const docs = render(readFileSync(FILE, 'utf8'));
  const byKind = (k: string) => docs.filter((d) => d.kind === k);

  it('ClusterRole and Role together grant exactly the operator access table', () => {
    const cluster = byKind('ClusterRole').flatMap((d) => d.rules as Rule[]);
    const ns = byKind('Role').flatMap((d) => d.rules as Rule[]);
    expect([...triples(cluster), ...triples(ns)].sort()).toEqual(accessTriples());
    expect(triples(cluster)).toEqual(accessTriples(ACCESS.filter((a) => a.scope === 'cluster')));
    expect(triples(ns)).toEqual(accessTriples(ACCESS.filter((a) => a.scope === 'namespace')));
    expect(byKind('Role')[0].metadata.namespace).toBe('rel-ns');
  });

  it('both are bound to the operator ServiceAccount of the release', () => {
    const subject = { kind: 'ServiceAccount', name: 'rel-writ-operator', namespace: 'rel-ns' };
    expect(byKind('ClusterRoleBinding')[0]).toMatchObject({ roleRef: { kind: 'ClusterRole', name: 'rel-writ-operator' }, subjects: [subject] });
    expect(byKind('RoleBinding')[0]).toMatchObject({ roleRef: { kind: 'Role', name: 'rel-writ-operator-leader-election' }, subjects: [subject] });
    const sa = readFileSync(fileURLToPath(new URL('../../charts/writ/templates/operator.yaml', import.meta.url)), 'utf8');
    expect(sa).toContain('serviceAccountName: {{ include "writ.fullname" . }}-operator');
  });
});
