/**
 * The folder source as `npm start` runs it: in process, over the all-in-one registry and identity
 * authority. `WRIT_POLICY_DIR` names the folder; unset, it is `crds/examples/` (unless
 * `WRIT_EXAMPLES=false`), whose governed agents need the example directory: `seed/directory.json`
 * is synced first, only while tenant `example` has no employees (a real directory of that tenant
 * is never overwritten).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { envName } from '../../runtime/lib/brand.js';
import type { AllInOneConfig, AuthConfig } from '../../runtime/lib/config.js';
import { logger } from '../../runtime/lib/log.js';
import { createApplier } from '../apply.js';
import { inProcessIdentity, inProcessRegistry, type IdentityRequest } from '../ports.js';
import { startFolderSource, type FolderSource } from './source.js';

const log = logger('policy-folder');

export const EXAMPLES_DIR = fileURLToPath(new URL('../../crds/examples/', import.meta.url));
export const EXAMPLE_SEED = fileURLToPath(new URL('../../crds/examples/seed/directory.json', import.meta.url));

export interface PolicyFolderConfig {
  dir: string;
  /** True for the bundled examples (the example directory is seeded). */
  examples: boolean;
  /** WRIT_API_KEY: presented to the identity authority (its WRIT_API_AUTH=keys). */
  apiKey?: string;
}

/** The folder of WRIT_POLICY_DIR, else the examples unless WRIT_EXAMPLES=false; throws on a folder that does not exist. */
export function policyFolderConfig(p: Pick<AllInOneConfig, 'policyDir' | 'examples'>, auth: Pick<AuthConfig, 'apiKey'>): PolicyFolderConfig | undefined {
  const dir = p.policyDir;
  if (dir !== undefined) {
    if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new Error(`${envName('POLICY_DIR')} must name a folder, got ${JSON.stringify(dir)}`);
    return { dir, examples: false, apiKey: auth.apiKey };
  }
  return p.examples ? { dir: EXAMPLES_DIR, examples: true, apiKey: auth.apiKey } : undefined;
}

/** Syncs the example SCIM snapshot when its tenant has no employees yet; true when it did. */
export async function seedExampleDirectory(identity: IdentityRequest, file = EXAMPLE_SEED): Promise<boolean> {
  const body = readFileSync(file, 'utf8');
  const tenant = (JSON.parse(body) as { tenantId: string }).tenantId;
  const existing = await identity(`/v1/directory/employees?tenant=${encodeURIComponent(tenant)}`);
  if (existing.status !== 200) throw new Error(`example directory: GET employees ${existing.status}`);
  if (((await existing.json()) as unknown[]).length > 0) return false;
  const res = await identity('/v1/directory/sync', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  if (res.status !== 200) throw new Error(`example directory sync: ${res.status} ${await res.text()}`);
  return true;
}

interface InProcess {
  registry: Parameters<typeof inProcessRegistry>[0];
  authority: { app: Parameters<typeof inProcessIdentity>[0]; whenReady(): Promise<void> };
}

/** Starts the folder source in process; resolves after its first pass. */
export async function startPolicyFolder(cfg: PolicyFolderConfig, parts: InProcess, o: { rescanMs?: number } = {}): Promise<FolderSource> {
  await parts.authority.whenReady();
  const identity = inProcessIdentity(parts.authority.app, cfg.apiKey);
  if (cfg.examples && (await seedExampleDirectory(identity))) log.info('example directory seeded', { file: EXAMPLE_SEED });
  const registry = inProcessRegistry(parts.registry);
  const src = startFolderSource({ dir: cfg.dir, rescanMs: o.rescanMs, applier: (owner) => createApplier({ owner, registry, identity }) });
  try {
    await src.ready;
  } catch (e) {
    await src.close();
    throw e;
  }
  return src;
}
