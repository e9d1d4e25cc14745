/**
 * Control-plane metrics: the four SPEC 6 series exactly (names, types, labels), sub-millisecond
 * decision buckets, the operator gauges read from real sources (budget meter, approval queue on
 * a store), identity-call series; and the shipped Grafana dashboard and Prometheus rules only
 * query series a real all-in-one /metrics exports.
 */
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { H, metric } from '../lib/brand.js';
import { openStore } from '../store/factory.js';
import { startWrit } from '../main.js';
import { openAuditChain } from './audit/index.js';
import { createApprovalQueue } from './approvals/index.js';
import { createBudgetMeter } from './budget/testkit.js';
import { DECISION_BUCKETS, createMetrics } from './metrics.js';

const OBS = fileURLToPath(new URL('../../charts/writ/files/observability/', import.meta.url));

/** `# TYPE name type` lines of a Prometheus text exposition. */
function families(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) out.set(m[1]!, m[2]!);
  return out;
}

/** Sample lines `name{labels} value` -> [{name, labels, value}]. */
function samples(text: string): { name: string; labels: Record<string, string>; value: number }[] {
  const out: { name: string; labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

describe('control-plane metrics', () => {
  it('keeps the four SPEC series exactly and resolves sub-millisecond decisions', async () => {
    const m = createMetrics();
    m.observeDecision('web', true, 'registry', 0.00003);
    m.observeDecision('web', false, 'inline', 0.0004);
    m.recordUsage('bot', 'gpt', 120, 0.25);
    const text = await m.text();
    const f = families(text);
    expect(f.get(metric('authz_decisions_total'))).toBe('counter');
    expect(f.get(metric('authz_duration_seconds'))).toBe('histogram');
    expect(f.get(metric('token_usage_total'))).toBe('counter');
    expect(f.get(metric('agent_cost_usd_total'))).toBe('counter');
    const s = samples(text);
    expect(s.filter((x) => x.name === metric('authz_decisions_total')).map((x) => x.labels)).toEqual([
      { service: 'web', decision: 'allow', rule: 'registry' },
      { service: 'web', decision: 'deny', rule: 'inline' },
    ]);
    const bucket = (le: string) => s.find((x) => x.name === metric('authz_duration_seconds_bucket') && x.labels.le === le)!.value;
    expect(DECISION_BUCKETS[0]).toBeLessThanOrEqual(0.00001);
    // 30 µs lands between the 25 µs and 50 µs bounds; 400 µs between 250 µs and 500 µs.
    expect([bucket('0.000025'), bucket('0.00005'), bucket('0.00025'), bucket('0.0005')]).toEqual([0, 1, 1, 2]);
    expect(s.find((x) => x.name === metric('token_usage_total'))).toMatchObject({ labels: { agent: 'bot', model: 'gpt' }, value: 120 });
    expect(s.find((x) => x.name === metric('agent_cost_usd_total'))).toMatchObject({ labels: { agent: 'bot' }, value: 0.25 });
  });

  it('budget utilisation per agent and dimension, and the policy version, read at scrape time', async () => {
    let t = 1_700_000_000_000;
    const budget = createBudgetMeter();
    const services = [
      { name: 'bot', kind: 'agent', budget: { tokensPerHour: 1000, callsPerHour: 10, costUsdPerDay: 0 } },
      { name: 'free', kind: 'agent' },
      { name: 'web', kind: 'service' },
    ];
    const m = createMetrics({ registry: { list: () => services, version: 7 }, budget, now: () => t });
    budget.recordUsage('bot', 250, 1.5, t);
    budget.reserveCall('bot', t);
    budget.reserveCall('bot', t);
    let s = samples(await m.text()).filter((x) => x.name === metric('agent_budget_utilisation_ratio'));
    // No ceiling (0) on cost: no series; agents without a budget: none.
    expect(s.map((x) => [x.labels.agent, x.labels.dimension, x.value])).toEqual([
      ['bot', 'tokens_per_hour', 0.25],
      ['bot', 'calls_per_hour', 0.2],
    ]);
    t += 2 * 3_600_000;
    s = samples(await m.text()).filter((x) => x.name === metric('agent_budget_utilisation_ratio'));
    expect(s.map((x) => x.value)).toEqual([0, 0]);
    expect(samples(await m.text()).find((x) => x.name === metric('policy_version'))?.value).toBe(7);
  });

  it('approval queue depth, oldest wait and decided waits from a real queue', async () => {
    const store = await openStore({ backend: 'memory' });
    const audit = await openAuditChain(undefined);
    let t = Date.parse('2026-01-01T10:00:00Z');
    const queue = await createApprovalQueue({ store, audit, now: () => t, replicaId: 'metrics-test', timeoutMs: 3_600_000 });
    try {
      const m = createMetrics({ now: () => t });
      m.attach({ approvals: queue });
      const a = await queue.create({ actor: 'bot', target: 'api.example.com:443', service: 'external' });
      t += 30_000;
      await queue.create({ actor: 'bot', target: 'other.example.com:443', service: 'external' });
      t += 15_000;
      let s = samples(await m.text());
      const value = (name: string, labels: Record<string, string> = {}) =>
        s.find((x) => x.name === metric(name) && Object.entries(labels).every(([k, v]) => x.labels[k] === v))?.value;
      expect(value('egress_approvals_pending')).toBe(2);
      expect(value('egress_approval_oldest_pending_seconds')).toBe(45);
      await queue.approve(a.id, 'alice');
      t += 10_000; // past the 5 s read cache
      s = samples(await m.text());
      expect(value('egress_approvals_pending')).toBe(1);
      expect(value('egress_approval_wait_seconds_count', { outcome: 'approved' })).toBe(1);
      expect(value('egress_approval_wait_seconds_sum', { outcome: 'approved' })).toBe(45);
      // A decision is observed once, however many scrapes see it.
      t += 10_000;
      s = samples(await m.text());
      expect(value('egress_approval_wait_seconds_count', { outcome: 'approved' })).toBe(1);
      // A restarted process (or another replica) on the same store never counts it again.
      const again = await createApprovalQueue({ store, audit, now: () => t, replicaId: 'metrics-test-2', timeoutMs: 3_600_000 });
      try {
        const m2 = createMetrics({ now: () => t });
        m2.attach({ approvals: again });
        s = samples(await m2.text());
        expect(value('egress_approval_wait_seconds_count', { outcome: 'approved' }) ?? 0).toBe(0);
        expect(value('egress_approvals_pending')).toBe(1);
      } finally {
        await again.close();
      }
    } finally {
      await queue.close();
      await audit.close();
      await store.close();
    }
  });

  it('identity-authority call latency by operation and outcome; errors counted', async () => {
    const m = createMetrics();
    m.observeIdentityCall('verify_presentation', 0.002, 'ok');
    m.observeIdentityCall('delegation_check', 2.01, 'timeout');
    const s = samples(await m.text());
    expect(s.find((x) => x.name === metric('identity_authority_request_duration_seconds_count') && x.labels.operation === 'verify_presentation')).toMatchObject(
      {
        labels: { outcome: 'ok' },
        value: 1,
      },
    );
    expect(s.filter((x) => x.name === metric('identity_authority_errors_total'))).toEqual([
      { name: metric('identity_authority_errors_total'), labels: { operation: 'delegation_check', kind: 'timeout' }, value: 1 },
    ]);
  });
});

describe('shipped dashboard and alert rules', () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-metrics-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** Every `<brand>_...` series an expression names, and every label it groups or matches by. */
  function referenced(expr: string): { names: string[]; labels: string[] } {
    const names = [...expr.matchAll(new RegExp(`\\b${metric('')}[a-zA-Z0-9_:]+`, 'g'))].map((m) => m[0]);
    const labels: string[] = [];
    for (const m of expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g))
      labels.push(
        ...m[1]!
          .split(',')
          .map((l) => l.trim())
          .filter(Boolean),
      );
    for (const m of expr.matchAll(/\{([^}]*)\}/g)) for (const l of m[1]!.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)/g)) labels.push(l[1]!);
    return { names, labels };
  }

  it('every metric and label they query is exported by a real /metrics', async () => {
    const writ = await startWrit({
      WRIT_DATA_DIR: join(dir, 'data'),
      WRIT_EXAMPLES: 'true',
      BROKER_ENABLED: 'false',
      PORT: '0',
      DECISION_ADDR: '127.0.0.1:0',
      MGMT_ADDR: '127.0.0.1:0',
      EGRESS_PROXY_ADDR: '127.0.0.1:0',
      LOG_LEVEL: 'error',
    });
    let text: string;
    try {
      // Some traffic, so labelled series carry samples.
      await fetch(`http://127.0.0.1:${writ.ports.decision}/authz`, { headers: { [H.service]: 'web' } });
      await fetch(`http://127.0.0.1:${writ.ports.decision}/authz`, { headers: { [H.service]: 'nope' } });
      await fetch(`http://127.0.0.1:${writ.ports.mgmt}/v1/usage`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ agent: 'research-agent', model: 'gpt-4o-mini', tokens: 10, costUsd: 0.01 }),
      });
      text = await (await fetch(`http://127.0.0.1:${writ.ports.mgmt}/metrics`)).text();
    } finally {
      await writ.close();
    }
    const f = families(text);
    const exported = new Set<string>();
    for (const [name, type] of f) {
      exported.add(name);
      if (type === 'histogram') for (const sfx of ['_bucket', '_sum', '_count']) exported.add(name + sfx);
    }
    const labelsOf = new Map<string, Set<string>>();
    for (const s of samples(text)) for (const l of Object.keys(s.labels)) (labelsOf.get(s.name) ?? labelsOf.set(s.name, new Set()).get(s.name)!).add(l);

    const dashboard = JSON.parse(readFileSync(join(OBS, 'grafana-dashboard.json'), 'utf8')) as { panels: { title: string; targets: { expr: string }[] }[] };
    const rules = parseYaml(readFileSync(join(OBS, 'prometheus-rules.yaml'), 'utf8')) as { groups: { rules: { alert: string; expr: string }[] }[] };
    const exprs = [
      ...dashboard.panels.flatMap((p) => p.targets.map((t) => ({ where: `panel ${p.title}`, expr: t.expr }))),
      ...rules.groups.flatMap((g) => g.rules.map((r) => ({ where: `alert ${r.alert}`, expr: r.expr }))),
    ];
    expect(exprs.length).toBeGreaterThan(20);
    const alerts = rules.groups.flatMap((g) => g.rules.map((r) => r.alert));
    for (const a of ['WritAuditChainBroken', 'WritAuditShippingBacklogGrowing', 'WritDenySpike', 'WritAgentBudgetNearExhaustion']) expect(alerts).toContain(a);

    const generic = new Set(['le', 'instance', 'job']);
    for (const { where, expr } of exprs) {
      const { names, labels } = referenced(expr);
      expect(names.length, `${where}: names no series`).toBeGreaterThan(0);
      for (const n of names) expect(exported.has(n), `${where}: ${n} is not exported`).toBe(true);
      // Labels: known where the series has samples in this scrape.
      const known = new Set<string>(generic);
      let sampled = false;
      for (const n of names) {
        const base = n.replace(/_(bucket|sum|count)$/, '');
        for (const k of [n, `${base}_bucket`, `${base}_count`]) {
          for (const l of labelsOf.get(k) ?? []) {
            known.add(l);
            sampled = true;
          }
        }
      }
      if (sampled) for (const l of labels) expect(known.has(l), `${where}: label ${l} on ${names.join(', ')}`).toBe(true);
    }
  });
});
