/**
 * Tests of the YAML snippets a README shows (Envoy, Istio): the ```yaml blocks of a Markdown text,
 * and every object within parsed documents that a predicate picks, at any depth.
 */
import { parseAllDocuments } from 'yaml';

export type Doc = Record<string, unknown>;

/** The contents of the ```yaml blocks of `markdown`, in order. */
export const yamlBlocks = (markdown: string): string[] => [...markdown.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!);

/** Every document of every block, as plain values. */
export const yamlDocs = (blocks: readonly string[]): unknown[] => blocks.flatMap((b) => parseAllDocuments(b).map((d) => d.toJS() as unknown));

/** Every object in `root` (depth first, parents before their members) that `pred` picks. */
export function findObjects(root: unknown, pred: (v: Doc) => boolean): Doc[] {
  const out: Doc[] = [];
  const walk = (v: unknown) => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') {
      if (pred(v as Doc)) out.push(v as Doc);
      Object.values(v).forEach(walk);
    }
  };
  walk(root);
  return out;
}
