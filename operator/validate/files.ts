/**
 * Reads a folder of YAML (nested folders, multi-document files; dot-folders such as .git are
 * skipped) into checked resources, each with its file and line, so `writ validate` and the folder
 * source report `file:line: path: message`.
 */
import { readdirSync, readFileSync, realpathSync, statSync, type Stats } from 'node:fs';
import { join, relative } from 'node:path';
import { isMap, isSeq, LineCounter, parseAllDocuments, type Document } from 'yaml';
import { checkResource, type Observed } from '../resource.js';
import { formatPath, type FieldError } from './schema.js';

export interface FileProblem {
  file: string;
  line: number;
  message: string;
}

export interface FolderRead {
  resources: Observed[];
  problems: FileProblem[];
  /** Files read (relative paths), sorted. */
  files: string[];
}

const YAML_FILE = /\.ya?ml$/i;

/** What a symbolic link leads to; undefined when it leads nowhere (dangling, or a loop of links). */
function followed(path: string): Stats | undefined {
  try {
    return statSync(path);
  } catch {
    return undefined;
  }
}

/**
 * Every *.yaml / *.yml under dir (recursively, sorted, dot-entries skipped), relative to dir.
 * Symbolic links are followed: a ConfigMap volume's files are links into its `..data` folder
 * (skipped itself, as a dot-entry), and git-sync swaps a link to each checkout. A folder reached
 * twice (a link loop) is read once; a dangling link is no file.
 */
export function listYamlFiles(dir: string): string[] {
  const out: string[] = [];
  const walked = new Set<string>();
  const walk = (d: string) => {
    const real = realpathSync(d);
    if (walked.has(real)) return;
    walked.add(real);
    for (const e of readdirSync(d, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (e.name.startsWith('.')) continue;
      const p = join(d, e.name);
      let isDir = e.isDirectory();
      let isFile = e.isFile();
      if (e.isSymbolicLink()) {
        const target = followed(p);
        isDir = target?.isDirectory() ?? false;
        isFile = target?.isFile() ?? false;
      }
      if (isDir) walk(p);
      else if (isFile && YAML_FILE.test(e.name)) out.push(relative(dir, p));
    }
  };
  if (statSync(dir).isDirectory()) walk(dir);
  else out.push('');
  return out;
}

/** The line (1-based) of the node at `path` in the document, or of the deepest existing parent. */
function lineOf(doc: Document, path: FieldError['path'], lc: LineCounter): number {
  let node: unknown = doc.contents;
  let best = (doc.contents as { range?: [number] } | null)?.range?.[0] ?? 0;
  for (const seg of path) {
    if (isMap(node)) {
      const pair = node.items.find((p) => (p.key as { value?: unknown } | null)?.value === seg);
      if (!pair) break;
      best = (pair.key as { range?: [number] }).range?.[0] ?? best;
      node = pair.value;
    } else if (isSeq(node) && typeof seg === 'number') {
      node = node.items[seg];
      best = (node as { range?: [number] } | undefined)?.range?.[0] ?? best;
    } else break;
  }
  return lc.linePos(best).line;
}

/** Parses one file's text; `file` is the name used in messages. */
export function readYamlText(text: string, file: string): { resources: Observed[]; problems: FileProblem[] } {
  const lc = new LineCounter();
  const docs = parseAllDocuments(text, { lineCounter: lc, prettyErrors: false });
  const resources: Observed[] = [];
  const problems: FileProblem[] = [];
  for (const doc of Array.isArray(docs) ? docs : [docs]) {
    const start = lc.linePos((doc.contents as { range?: [number] } | null)?.range?.[0] ?? 0).line;
    if (doc.errors.length) {
      for (const e of doc.errors) problems.push({ file, line: e.linePos?.[0]?.line ?? start, message: `YAML: ${e.message.split('\n')[0]}` });
      continue;
    }
    let value: unknown;
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch (e) {
      // An alias bomb (and anything else the conversion refuses) is this document's problem only.
      problems.push({ file, line: start, message: `YAML: ${e instanceof Error ? e.message.split('\n')[0] : String(e)}` });
      continue;
    }
    if (value === null || value === undefined) continue; // an empty document (a trailing ---)
    const checked = checkResource(value, `${file}:${start}`);
    for (const e of checked.errors)
      problems.push({
        file,
        line: lineOf(doc, e.path, lc),
        message: `${checked.observed ? `${checked.observed.kind} ${checked.observed.name}: ` : ''}${formatPath(e.path) || '(document)'}: ${e.message}`,
      });
    if (checked.observed) resources.push(checked.observed);
  }
  return { resources, problems };
}

/** Reads and checks every YAML file under dir (or the one file dir names). */
export function readFolder(dir: string): FolderRead {
  const files = listYamlFiles(dir);
  const resources: Observed[] = [];
  const problems: FileProblem[] = [];
  for (const f of files) {
    const path = f === '' ? dir : join(dir, f);
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (e) {
      // Deleted between listing and reading (an editor's save, a git checkout): the next scan sees it.
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw e;
    }
    const r = readYamlText(text, f || path);
    resources.push(...r.resources);
    problems.push(...r.problems);
  }
  return { resources, problems, files };
}
