/**
 * `writ validate <dir|file>...`: every resource checked offline against the CRD schemas and CEL
 * rules, plus the checks across resources a cluster would only report later (two resources
 * claiming one name). Prints `file:line: message`; exit 1 when anything is wrong.
 */
import { join, relative } from 'node:path';
import { reconcile } from '../../operator/reconcile.js';
import type { Observed } from '../../operator/resource.js';
import { keyOf } from '../../operator/resource.js';
import { readFolder, type FileProblem } from '../../operator/validate/files.js';
import type { Io } from './main.js';

export interface Checked {
  resources: Observed[];
  problems: FileProblem[];
  files: number;
}

/** Reads every path; problem files are shown relative to the working directory. */
export function checkPaths(paths: string[]): Checked {
  const resources: Observed[] = [];
  const problems: FileProblem[] = [];
  let files = 0;
  for (const p of paths) {
    const read = readFolder(p);
    const show = (f: string) => relative(process.cwd(), f === p ? p : join(p, f)) || f;
    files += read.files.length;
    // Origins become cwd-relative too, so conflict messages point at the files.
    resources.push(...read.resources.map((r) => ({ ...r, origin: `${show(r.origin.replace(/:\d+$/, ''))}:${/:(\d+)$/.exec(r.origin)?.[1] ?? '1'}` })));
    problems.push(...read.problems.map((x) => ({ ...x, file: show(x.file) })));
  }
  // Cross-resource: conflicts (invalid ones are already in problems with their field lines).
  const d = reconcile(resources);
  for (const r of resources) {
    const v = d.verdicts.get(`${keyOf(r)}@${r.origin}`) ?? d.verdicts.get(keyOf(r));
    if (v && !v.accepted && v.reason === 'Conflict') {
      const [file, line] = [r.origin.replace(/:\d+$/, ''), Number(/:(\d+)$/.exec(r.origin)?.[1] ?? 1)];
      problems.push({ file, line, message: `${r.kind} ${r.name}: Conflict: ${v.message}` });
    }
  }
  problems.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : a.line - b.line));
  return { resources, problems, files };
}

export async function run(args: string[], io: Io): Promise<number> {
  if (args.length === 0 || args.some((a) => a.startsWith('-'))) {
    io.err('usage: validate <dir|file>...');
    return 2;
  }
  const { resources, problems, files } = checkPaths(args);
  for (const p of problems) io.err(`${p.file}:${p.line}: ${p.message}`);
  const bad = problems.length;
  io.out(`${resources.length} resource(s) in ${files} file(s): ${bad === 0 ? 'all valid' : `${bad} problem(s)`}`);
  return bad === 0 ? 0 : 1;
}
