/**
 * Governance benchmark: what the revocation cascade costs inside a directory sync. One tenant of
 * N users (synthetic SCIM snapshot), A governed agents owned by employees and D live authority
 * delegations. Baseline: an unchanged re-sync WITHOUT the cascade. Figures, as ratios against it:
 *   - unchanged re-sync WITH the cascade (nothing moves: the cost of loading facts and planning);
 *   - a re-sync that deactivates 10% of the owners (the cascade suspends their agents and revokes
 *     their delegations in the sync's transaction);
 *   - GET-equivalent summary (all agents enriched and bucketed) against listing the same agents.
 * PGlite always; PostgreSQL too when reachable (TEST_DATABASE_URL, else the local default).
 * Knobs: BENCH_GOV_USERS (default 5000), BENCH_GOV_AGENTS (1000), BENCH_GOV_DELEGATIONS (2000).
 */
import { onPostgresSchema } from './lib.js';
import { openStore, type Store } from '../runtime/store/factory.js';
import { authorityDelegations, governedAgents } from '../runtime/store/schema/governance.js';
import { syntheticSnapshot } from '../runtime/identity/enterprise/directory/fixtures.js';
import { syncDirectory } from '../runtime/identity/enterprise/directory/sync.js';
import { runCascade } from '../runtime/identity/enterprise/governance/cascade.js';
import { listAgents } from '../runtime/identity/enterprise/governance/agents.js';
import { summary } from '../runtime/identity/enterprise/governance/reports.js';
import { setLogLevel } from '../runtime/lib/log.js';

setLogLevel('warn');
const N = Number(process.env.BENCH_GOV_USERS) || 5000;
const A = Number(process.env.BENCH_GOV_AGENTS) || 1000;
const D = Number(process.env.BENCH_GOV_DELEGATIONS) || 2000;

const time = async <T>(f: () => Promise<T>): Promise<[number, T]> => {
  const t0 = performance.now();
  const r = await f();
  return [(performance.now() - t0) / 1000, r];
};

async function run(label: string, store: Store): Promise<void> {
  const tenantId = 'govbench';
  const snap = syntheticSnapshot(N, 'g');
  const now = () => Date.now();
  const plain = { db: store.db, now };
  const wired = { db: store.db, now, cascade: runCascade };
  const req = { tenantId, idp: 'idp_a' as const, mode: 'snapshot' as const, ...snap };
  await syncDirectory(plain, req);
  const subject = (i: number) => `idp_a:${tenantId}:${snap.users[i]!.externalId as string}`;
  const at = new Date().toISOString();
  const ownerOf = (a: number) => (a * 5) % N;
  const agents = Array.from({ length: A }, (_, a) => ({
    agentName: `bench-agent-${a}`,
    tenantId,
    ownerType: 'employee' as const,
    ownerRef: subject(ownerOf(a)),
    businessSponsor: subject(0),
    riskTier: 'low' as const,
    approvedRuntime: 'kubernetes_job',
    status: 'active' as const,
    createdAt: at,
    updatedAt: at,
    history: [],
  }));
  for (let i = 0; i < agents.length; i += 500) await store.db.insert(governedAgents).values(agents.slice(i, i + 500));
  const exp = Math.floor(Date.now() / 1000) + 86400;
  const dels = Array.from({ length: D }, (_, d) => ({
    delegationId: `bench-del-${d}`,
    tenantId,
    agentId: `bench-agent-${d % A}`,
    grantedBy: subject(ownerOf(d % A)),
    action: 'read',
    resource: `res/${d}/*`,
    status: 'active' as const,
    vcStatus: 'valid' as const,
    breakGlass: false,
    authorityBasis: 'agent_owner',
    authorityEvidence: {},
    policyDecision: {},
    expiresAt: exp,
    createdAt: at,
    approvedAt: at,
    history: [],
  }));
  for (let i = 0; i < dels.length; i += 500) await store.db.insert(authorityDelegations).values(dels.slice(i, i + 500));

  const [base] = await time(() => syncDirectory(plain, req));
  const [withCascade, r1] = await time(() => syncDirectory(wired, req));
  if (r1.cascade?.agents_suspended !== 0) throw new Error(`unexpected cascade ${JSON.stringify(r1.cascade)}`);
  // Deactivate 10% of the owners (every 10th agent's owner).
  const gone = new Set(Array.from({ length: Math.ceil(A / 10) }, (_, k) => snap.users[ownerOf(k * 10 + 1)]!.externalId as string));
  const users = snap.users.map((u) => (gone.has(u.externalId as string) ? { ...u, active: false } : u));
  const [moving, r2] = await time(() => syncDirectory(wired, { ...req, users }));
  const c = r2.cascade!;
  const [list] = await time(() => listAgents(plain, { tenant: tenantId }));
  const [sum] = await time(() => summary(plain, tenantId));
  console.log(
    `${label.padEnd(8)} ${N} users, ${A} agents, ${D} delegations: re-sync without cascade ${base.toFixed(2)} s (baseline); ` +
      `with cascade (nothing moves) ${withCascade.toFixed(2)} s = ${(withCascade / base).toFixed(2)}x; ` +
      `deactivating ${gone.size} owners ${moving.toFixed(2)} s = ${(moving / base).toFixed(2)}x ` +
      `(suspended ${c.agents_suspended}, revoked ${c.delegations_revoked}, invalidated ${c.delegations_invalidated})`,
  );
  console.log(
    `${label.padEnd(8)} summary of ${A} agents ${(sum * 1000).toFixed(0)} ms = ${(sum / list).toFixed(2)}x the enriched list (${(list * 1000).toFixed(0)} ms)`,
  );
}

async function main(): Promise<void> {
  const lite = await openStore({ backend: 'memory' });
  try {
    await run('pglite', lite);
  } finally {
    await lite.close();
  }
  await onPostgresSchema(
    'bench_gov',
    (url, schema) => openStore({ url, schema }),
    (pg) => run('postgres', pg),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
