/**
 * `writ diff <dir> --server <mgmt url> [--owner <owner>]`: what applying the folder would change,
 * from the management API's own dry run (`POST /v1/registry/apply` with `dryRun: true`), so the
 * answer is the server's plan, not a guess. The owner defaults to `folder:<absolute dir>` (what
 * the folder source applies as); a cluster's operator applies as `kubernetes:<cluster>`.
 *
 * Prints `+ name` (created), `~ name` with the changed fields, `- name` (pruned), `! name` (held
 * by another owner), `x name` (rejected), and file:line problems. Exit codes follow `kubectl
 * diff`: 0 no changes, 1 changes, 2 invalid resources, resources another owner holds (they would
 * not be written: a CI gate must not pass them) or an error.
 */
import { resolve } from 'node:path';
import { folderOwner } from '../../operator/folder/source.js';
import { httpRegistry, withCredential } from '../../operator/ports.js';
import { reconcile } from '../../operator/reconcile.js';
import type { Service } from '../control-plane/types.js';
import type { Io } from './main.js';
import { checkPaths } from './validate.js';

interface Args {
  dir: string;
  server: string;
  owner?: string;
}

function parseArgs(args: string[]): Args | string {
  const out: Partial<Args> = {};
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const flag = /^--(server|owner)(?:=(.*))?$/.exec(a);
    if (flag) {
      const v = flag[2] ?? args[++i];
      if (!v) return `--${flag[1]} needs a value`;
      out[flag[1] as 'server' | 'owner'] = v;
    } else if (a.startsWith('-')) return `unknown flag ${a}`;
    else if (out.dir) return 'one folder only';
    else out.dir = a;
  }
  if (!out.dir || !out.server) return 'usage: diff <dir> --server <mgmt url> [--owner <owner>]';
  try {
    new URL(out.server);
  } catch {
    return `--server must be a URL, got ${JSON.stringify(out.server)}`;
  }
  return out as Args;
}

const FIELDS = [
  'upstream',
  'owner',
  'requireScope',
  'public',
  'kind',
  'allowModels',
  'allowTools',
  'allowAgents',
  'egressAllow',
  'budget',
  'dataClass',
] as const;
/** The registry's stored defaults, so an absent field and its default compare equal. */
const DEFAULTS: Record<string, unknown> = { owner: '', requireScope: '', public: false };

function fieldChanges(cur: Service | undefined, want: Service): string[] {
  if (!cur) return [];
  const norm = (s: Service, k: string) => JSON.stringify((s as Record<string, unknown>)[k] ?? DEFAULTS[k] ?? null);
  return FIELDS.filter((k) => norm(cur, k) !== norm(want, k)).map((k) => `    ${k}: ${norm(cur, k)} -> ${norm(want, k)}`);
}

export async function run(args: string[], io: Io): Promise<number> {
  const a = parseArgs(args);
  if (typeof a === 'string') {
    io.err(a);
    return 2;
  }
  const { resources, problems } = checkPaths([a.dir]);
  for (const p of problems) io.err(`${p.file}:${p.line}: ${p.message}`);
  const desired = reconcile(resources);
  const owner = a.owner ?? folderOwner(resolve(a.dir));
  // WRIT_API_KEY for a management API with WRIT_API_AUTH=keys (scope registry:write for the dry-run).
  const apiKey = io.apiKey;
  const result = await httpRegistry(a.server, fetch, apiKey).apply(desired.services, { owner, dryRun: true });
  const want = new Map(desired.services.map((s) => [s.name, s]));
  const current = async (name: string): Promise<Service | undefined> => {
    const res = await fetch(
      new URL(`/v1/registry/services/${encodeURIComponent(name)}`, a.server),
      withCredential({ signal: AbortSignal.timeout(15_000) }, apiKey),
    );
    return res.status === 200 ? ((await res.json()) as Service) : undefined;
  };
  io.out(`owner ${owner}, registry version ${result.version}`);
  for (const n of result.created) io.out(`+ ${n}`);
  for (const n of result.updated) {
    io.out(`~ ${n}`);
    for (const line of fieldChanges(await current(n), want.get(n)!)) io.out(line);
  }
  for (const n of result.deleted) io.out(`- ${n}`);
  for (const n of result.conflicts) io.out(`! ${n} (owned by ${result.conflictOwners[n] ?? 'another owner'}: not written)`);
  for (const i of result.invalid) io.out(`x ${i.name}: ${i.error}`);
  if (desired.governed.length || desired.identities.length) {
    io.out(
      `(${desired.governed.length} governed agent(s) and ${desired.identities.length} identity agent(s) declared: the identity authority has no dry run, not diffed)`,
    );
  }
  const changes = result.created.length + result.updated.length + result.deleted.length;
  io.out(`${changes} change(s), ${result.unchanged.length} unchanged, ${result.conflicts.length} conflict(s), ${result.invalid.length} rejected`);
  if (problems.length || result.invalid.length || result.conflicts.length) return 2;
  return changes > 0 ? 1 : 0;
}
