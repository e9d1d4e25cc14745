/**
 * The seam of issue 10, measured:
 *
 * 1. `evaluate` alone, in process, on a 10k-service snapshot: decisions per second, interleaved
 *    with the baseline, raw `crypto.hash` of the same audit record each decision produces (what a
 *    decision's audit append must pay anyway). Target >= 1M decisions/s. Rows: an ingress to a
 *    public service, a header-mode egress to an allowed tool, and an egress whose budget answer is
 *    asked and given (two evaluation passes, as `decide` runs them).
 * 2. `apply` of 10k services on PGlite (the npm start store): the first apply, then an unchanged
 *    re-apply (target <= 0.05x of the first, zero writes, zero audit records, no version bump).
 */
import { existsSync } from 'node:fs';
import { hash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import { setLogLevel } from '../runtime/lib/log.js';
import { openAuditChain } from '../runtime/control-plane/audit/index.js';
import type { Gatherer } from '../runtime/control-plane/decision/decide.js';
import { SETTINGS } from '../runtime/control-plane/decision/testkit.js';
import type { Answers, Facts, Step } from '../runtime/control-plane/decision/types.js';
import { createRegistry } from '../runtime/control-plane/registry/registry.js';
import type { Service } from '../runtime/control-plane/types.js';
import { rowsOf } from '../runtime/store/factory.js';
import { openTestPglite } from '../runtime/store/testing.js';

setLogLevel('error');

// Production runs built JavaScript (`npm run build`): the decision figures load it from dist/
// when it is there (BENCH_SOURCE=1 measures the TypeScript under tsx instead).
const DIST = fileURLToPath(new URL('../dist/runtime/control-plane/', import.meta.url));
const built = !process.env.BENCH_SOURCE && existsSync(`${DIST}decision/evaluate.js`);
const from = (m: string) => (built ? `${DIST}${m}.js` : `../runtime/control-plane/${m}.js`);
const { evaluate } = (await import(from('decision/evaluate'))) as typeof import('../runtime/control-plane/decision/evaluate.js');
const { decide } = (await import(from('decision/decide'))) as typeof import('../runtime/control-plane/decision/decide.js');
const { makePolicySnapshot } = (await import(from('decision/policy'))) as typeof import('../runtime/control-plane/decision/policy.js');
const { snapshotOf } = (await import(from('registry/snapshot'))) as typeof import('../runtime/control-plane/registry/snapshot.js');
const isQuestion = (s: Step): s is Extract<Step, { question: unknown }> => 'question' in s;
const N = 10_000;
const NOW = Date.now();

function services(n: number, salt = ''): Service[] {
  const out: Service[] = [];
  for (let i = 0; i < n; i++) {
    const k = i % 4;
    if (k === 0)
      out.push({
        name: `agent-${i}`,
        upstream: `agent-${i}.agents.svc:8080`,
        kind: 'agent',
        allowTools: [`tool-${i + 1}`],
        allowModels: ['gpt'],
        egressAllow: [`svc-${i + 2}`],
        budget: { callsPerHour: 1e9 },
      });
    else if (k === 1) out.push({ name: `tool-${i}`, upstream: `tool-${i}.tools.svc:8080`, kind: 'tool', dataClass: 'internal' });
    else out.push({ name: `svc-${i}`, upstream: `svc-${i}.default.svc:80`, owner: `team${salt}`, public: i % 3 === 0, kind: 'service' });
  }
  out.push({ name: 'gpt', upstream: 'broker.writ.svc:8080', kind: 'model' });
  return out;
}

/** Runs `fn` for ~ms milliseconds; operations per second. */
function rate(fn: () => void, ms = 300): number {
  let n = 0;
  const t0 = performance.now();
  let t = t0;
  while (t - t0 < ms) {
    for (let i = 0; i < 1000; i++) fn();
    n += 1000;
    t = performance.now();
  }
  return (n * 1000) / (t - t0);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function evaluateBench(): void {
  const snap = makePolicySnapshot(snapshotOf(services(N)), undefined, SETTINGS);
  const ingress: Facts = { kind: 'ingress', service: 'svc-6' };
  const egress: Facts = { kind: 'egress', via: 'authz', actor: 'agent-4', target: 'tool-5', onBehalfOf: 'alice', task: 't-1' };
  const usage = { tokensLastHour: 0, callsLastHour: 3, costUsdLastDay: 0 };
  const answered: Answers = { usage };
  const gather: Gatherer = { ask: () => usage as never };
  const budgeted: Facts = { kind: 'egress', via: 'authz', actor: 'agent-4', target: 'tool-5' };
  // The baseline: what the audit append of the same decision hashes.
  const ev = evaluate(egress, snap, answered, NOW);
  if (isQuestion(ev) || !ev.decision.allow) throw new Error('bench fact set does not allow');
  const record = JSON.stringify({ seq: 1, time: new Date(NOW).toISOString(), prevHash: 'x'.repeat(64), ...ev.effects.audit });
  const rows: Record<string, number[]> = { baseline: [], ingress: [], egress: [], decide: [] };
  for (let round = 0; round < 7; round++) {
    rows.baseline!.push(rate(() => hash('sha256', record)));
    rows.ingress!.push(rate(() => evaluate(ingress, snap, {}, NOW)));
    rows.egress!.push(rate(() => evaluate(egress, snap, answered, NOW)));
    rows.decide!.push(
      rate(() =>
        decide(
          budgeted,
          () => snap,
          gather,
          () => NOW,
        ),
      ),
    );
  }
  const base = median(rows.baseline!);
  console.log(
    `evaluate on a ${N + 1}-service snapshot, ${built ? 'built JavaScript (dist/)' : 'TypeScript under tsx (run npm run build for the production figure)'} (median of 7 interleaved rounds; baseline crypto.hash of the decision's audit record: ${(base / 1e6).toFixed(2)} M/s)`,
  );
  for (const k of ['ingress', 'egress', 'decide'] as const) {
    const r = median(rows[k]!);
    const label = k === 'decide' ? 'decide (budget asked + answered)' : `evaluate ${k}`;
    console.log(
      `  ${label.padEnd(34)} ${(r / 1e6).toFixed(2)} M decisions/s  ${(r / base).toFixed(2)}x of crypto.hash  target >= 1 M/s: ${r >= 1e6 ? 'met' : 'MISSED'}`,
    );
  }
}

async function applyBench(): Promise<void> {
  const store = await openTestPglite();
  const audit = await openAuditChain(store);
  const reg = await createRegistry(store, { audit });
  try {
    const desired = services(N);
    const t0 = performance.now();
    const first = await reg.apply(desired, { owner: 'folder:bench' });
    const firstMs = performance.now() - t0;
    const seq = audit.stats().lastSeq;
    const writes = async () =>
      (
        await rowsOf<{ n: number }>(
          store.db,
          sql`select coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::int as n from pg_stat_user_tables where relname = 'registry_services'`,
        )
      )[0]!.n;
    const w0 = await writes();
    const times: number[] = [];
    let again = first;
    for (let i = 0; i < 5; i++) {
      const t1 = performance.now();
      again = await reg.apply(desired, { owner: 'folder:bench' });
      times.push(performance.now() - t1);
    }
    const unchangedMs = median(times);
    const w1 = await writes();
    console.log(`apply of ${desired.length} services (PGlite, owner folder:bench)`);
    console.log(`  first apply                        ${firstMs.toFixed(0)} ms  created ${first.created.length}, version ${first.version}`);
    console.log(
      `  unchanged re-apply (median of 5)   ${unchangedMs.toFixed(1)} ms  ${(unchangedMs / firstMs).toFixed(4)}x of first  target <= 0.05x: ${unchangedMs / firstMs <= 0.05 ? 'met' : 'MISSED'}; ` +
        `writes ${w1 - w0}, audit records ${audit.stats().lastSeq - seq}, version ${again.version} (unchanged: ${again.version === first.version})`,
    );
    const one = desired.map((s) => (s.name === 'svc-6' ? { ...s, public: !s.public } : s));
    const t2 = performance.now();
    const changed = await reg.apply(one, { owner: 'folder:bench' });
    console.log(
      `  one changed among ${desired.length}            ${(performance.now() - t2).toFixed(1)} ms  updated ${changed.updated.join(',')}, version ${changed.version}`,
    );
  } finally {
    await reg.close();
    await audit.close();
    await store.close();
  }
}

evaluateBench();
await applyBench();
