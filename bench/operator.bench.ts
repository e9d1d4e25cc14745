/**
 * Operator benchmark: the folder source over the control plane in process (PGlite in memory, the
 * real registry, `/authz` over HTTP), with N resources (default 10k: half RegistryService, half
 * AgentPolicy, 100 per multi-document file, in nested folders).
 *
 * Figures:
 * - first: read + validate (schema and CEL) + reconcile + one apply of all N, seconds;
 * - steady-state resync with nothing changed (median of 3): seconds and the ratio to the first
 *   (target <= 0.05), with zero registry writes (version unchanged) and zero audit records;
 * - one changed resource among N reaching `/authz`: file save -> the decision flips, p50 of 5 (ms),
 *   and the ratio to the first.
 * Set BENCH_OPERATOR_N for another size.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createApplier } from '../operator/apply.js';
import { startFolderSource } from '../operator/folder/source.js';
import { inProcessRegistry } from '../operator/ports.js';
import { startControlPlane } from '../runtime/control-plane/server.js';
import { H } from '../runtime/lib/brand.js';
import { setLogLevel } from '../runtime/lib/log.js';
import { openStore } from '../runtime/store/factory.js';

setLogLevel('error');
const N = Math.max(100, Number(process.env.BENCH_OPERATOR_N) || 10_000);
const PER_FILE = 100;

function svc(i: number, isPublic = true): string {
  return `apiVersion: writ.io/v1alpha1\nkind: RegistryService\nmetadata:\n  name: svc-${i}\n  namespace: team-${i % 50}\nspec:\n  upstream: svc-${i}.team-${i % 50}.svc:8080\n  owner: team-${i % 50}\n  public: ${isPublic}\n  kind: service\n  dataClass: internal\n`;
}
function policy(i: number): string {
  return `apiVersion: writ.io/v1alpha1\nkind: AgentPolicy\nmetadata:\n  name: agent-${i}\n  namespace: agents-${i % 50}\nspec:\n  agent: agent-${i}\n  allowModels: [gpt-4o-mini]\n  allowTools: [svc-${i}, svc-${(i + 1) % N}]\n  egressAllow: [svc-${i}]\n  budget:\n    tokensPerHour: 100000\n    callsPerHour: 1000\n`;
}

function fileText(f: number, publicOf: (i: number) => boolean): string {
  const docs: string[] = [];
  for (let i = f * PER_FILE; i < Math.min(N, (f + 1) * PER_FILE); i++) docs.push(i % 2 === 0 ? svc(i, publicOf(i)) : policy(i));
  return docs.join('---\n');
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'writ-bench-operator-'));
  const files = Math.ceil(N / PER_FILE);
  const pathOf = (f: number) => join(dir, `group-${f % 10}`, `file-${f}.yaml`);
  for (let f = 0; f < files; f++) {
    mkdirSync(join(dir, `group-${f % 10}`), { recursive: true });
    writeFileSync(
      pathOf(f),
      fileText(f, () => true),
    );
  }
  const store = await openStore({ backend: 'memory' });
  const cp = await startControlPlane({ store, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0', durableAudit: false });
  const registry = cp.plane.registry;
  const audits = () => cp.plane.audit.stats().lastSeq;
  try {
    const t0 = performance.now();
    const src = startFolderSource({ dir, rescanMs: 0, applier: (owner) => createApplier({ owner, registry: inProcessRegistry(registry) }) });
    await src.ready;
    const firstS = (performance.now() - t0) / 1000;
    if (registry.list().length !== N) throw new Error(`expected ${N} entries, got ${registry.list().length}`);

    const version = registry.version;
    const seq = audits();
    const again: number[] = [];
    const cpuMs: number[] = [];
    for (let r = 0; r < 3; r++) {
      const t = performance.now();
      const cpu0 = process.cpuUsage();
      const pass = await src.resync();
      again.push((performance.now() - t) / 1000);
      const cpu = process.cpuUsage(cpu0);
      cpuMs.push((cpu.user + cpu.system) / 1000);
      if (pass.outcome.apply!.unchanged.length !== N) throw new Error(`resync: ${pass.outcome.apply!.unchanged.length} unchanged of ${N}`);
    }
    const writes = registry.version - version;
    const records = audits() - seq;
    if (writes !== 0 || records !== 0) throw new Error(`steady resync wrote: ${writes} versions, ${records} audit records`);
    const againS = [...again].sort((a, b) => a - b)[1]!;

    // One changed resource among N: svc-0 (file 0) flips public -> the /authz decision flips.
    const decide = async () => (await fetch(`http://127.0.0.1:${cp.decisionPort}/authz`, { headers: { [H.service]: 'svc-0' } })).status;
    if ((await decide()) !== 200) throw new Error('svc-0 should be public at first');
    const lat: number[] = [];
    for (let k = 0; k < 5; k++) {
      const makePublic = k % 2 === 1;
      const t = performance.now();
      writeFileSync(
        pathOf(0),
        fileText(0, (i) => (i === 0 ? makePublic : true)),
      );
      for (;;) {
        const s = await decide();
        if (makePublic ? s === 200 : s !== 200) break;
        if (performance.now() - t > 60_000) throw new Error('the change did not reach /authz within 60 s');
      }
      lat.push(performance.now() - t);
    }
    const p50 = [...lat].sort((a, b) => a - b)[2]!;
    if (!readFileSync(pathOf(0), 'utf8').includes('public: true')) throw new Error('unexpected final file');
    console.log(
      `operator folder source, ${N} resources in ${files} files: first reconcile+apply ${firstS.toFixed(2)} s; ` +
        `steady resync ${againS.toFixed(3)} s (median of ${again.map((s) => s.toFixed(3)).join('/')}), ratio resync/first = ${(againS / firstS).toFixed(4)} (target <= 0.05), ` +
        `(CPU ${cpuMs.map((x) => x.toFixed(0)).join('/')} ms), ${writes} registry writes, ${records} audit records; one changed resource -> /authz p50 ${p50.toFixed(0)} ms ` +
        `(${lat.map((x) => x.toFixed(0)).join('/')}), ratio to first = ${(p50 / 1000 / firstS).toFixed(4)}`,
    );
    await src.close();
  } finally {
    await cp.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
