/**
 * Renders crds/<plural>.<group>.yaml from definitions.ts. Run after editing the definitions:
 *   npx tsx operator/crd/generate.ts
 * crd.test.ts fails when a rendered file differs from what this prints.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { API_GROUP } from '../../runtime/lib/brand.js';
import { crdObject, KINDS, type CrdKind } from './definitions.js';

export const CRD_DIR = fileURLToPath(new URL('../../crds/', import.meta.url));

export const crdFileName = (k: CrdKind): string => `${k.plural}.${API_GROUP}.yaml`;

export function renderCrd(k: CrdKind): string {
  return `# Generated from operator/crd/definitions.ts by operator/crd/generate.ts: do not edit by hand.\n${stringify(crdObject(k), { lineWidth: 0, aliasDuplicateObjects: false })}`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const k of KINDS) writeFileSync(CRD_DIR + crdFileName(k), renderCrd(k));
}
