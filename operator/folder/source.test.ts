import { cpSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createApplier } from '../apply.js';
import { EXAMPLES_DIR, openTestStack, type TestStack } from '../testing/stack.js';
import { startFolderSource, type FolderSource } from './source.js';

async function until(check: () => boolean, what: string, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function untilAsync(check: () => Promise<boolean>, what: string, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const svcDoc = (name: string, upstream: string) =>
  `apiVersion: writ.io/v1alpha1\nkind: RegistryService\nmetadata:\n  name: ${name}\nspec:\n  upstream: ${upstream}\n`;

describe('folder source', () => {
  let t: TestStack;
  let dir: string;
  let src: FolderSource | undefined;

  beforeEach(async () => {
    t = await openTestStack();
    dir = mkdtempSync(join(tmpdir(), 'writ-folder-'));
    cpSync(EXAMPLES_DIR, dir, { recursive: true });
  });
  afterEach(async () => {
    await src?.close();
    await t?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const start = (rescanMs = 0) => {
    src = startFolderSource({ dir, rescanMs, applier: (owner) => createApplier({ owner, registry: t.registryPort, identity: t.identity }) });
    return src;
  };

  it('loads a nested, multi-document folder and follows edits, new files and deletions without a restart (fs.watch)', async () => {
    const s = start();
    await s.ready;
    expect(t.registry.ownerOf('research-agent')).toBe(s.owner);
    expect(s.owner).toBe(`folder:${dir}`);
    expect([...s.statuses().values()].every((st) => st.conditions.find((c) => c.type === 'Ready')!.status === 'True')).toBe(true);

    // Edit: the research agent loses the ledger tool.
    const file = join(dir, 'agents/research-agent.yaml');
    const text = (await import('node:fs')).readFileSync(file, 'utf8');
    writeFileSync(file, text.replace('allowTools: [search, ledger]', 'allowTools: [search]'));
    await until(() => JSON.stringify(t.registry.get('research-agent')?.allowTools) === '["search"]', 'the edit');

    // New file in a new nested folder.
    mkdirSync(join(dir, 'team-b/deeper'), { recursive: true });
    writeFileSync(join(dir, 'team-b/deeper/extra.yaml'), `${svcDoc('extra-a', 'a.svc:1')}---\n${svcDoc('extra-b', 'b.svc:2')}`);
    await until(() => t.registry.get('extra-a') !== undefined && t.registry.get('extra-b') !== undefined, 'the new file');

    // Deleted file: its grants are withdrawn.
    rmSync(join(dir, 'agents/research-agent.yaml'));
    await until(() => t.registry.get('research-agent') === undefined, 'the deletion');
    expect(t.registry.get('extra-a')).toBeDefined();
  });

  it('an edited GovernedAgent reaches the identity authority and reports Ready; a removed one is retired (history kept)', async () => {
    const s = start();
    await s.ready;
    const governed = async (name: string) => (await t.identity(`/v1/governance/agents/${name}`)).json() as Promise<Record<string, any>>;
    const file = join(dir, 'agents/research-agent.yaml');
    const text = readFileSync(file, 'utf8');
    writeFileSync(file, text.replace('riskTier: medium', 'riskTier: high').replace('approvedRuntime: doks_prod', 'approvedRuntime: github_actions'));
    await untilAsync(async () => (await governed('research-agent')).risk_tier === 'high', 'the edit at the identity authority');
    const g = await governed('research-agent');
    expect(g).toMatchObject({ status: 'active', risk_tier: 'high', approved_runtime: 'github_actions' });
    expect(g.history.slice(4).map((h: { action: string; by: string; detail: string }) => [h.action, h.by, h.detail])).toEqual([
      ['updated', s.owner, 'risk_tier: "medium" -> "high"'],
      ['updated', s.owner, 'approved_runtime: "doks_prod" -> "github_actions"'],
    ]);
    const st = s.statuses().get('GovernedAgent/agents/research-agent')!;
    expect(st.conditions.find((c) => c.type === 'Ready')).toMatchObject({ status: 'True', reason: 'Ready', message: 'governed agent is active' });
    expect(st).toMatchObject({ lifecycle: 'active', activationBlockers: [] });

    // The summarizer's GovernedAgent document is removed (its AgentPolicy stays): it is retired.
    const sfile = join(dir, 'agents/summarizer.yaml');
    writeFileSync(sfile, readFileSync(sfile, 'utf8').split('\n---\n')[0]!);
    await untilAsync(async () => (await governed('summarizer')).status === 'retired', 'the removal');
    expect((await governed('summarizer')).history.map((h: { detail: string }) => h.detail).slice(1)).toEqual([
      'draft -> pending_approval',
      'pending_approval -> approved',
      'approved -> retired',
    ]);
    expect(t.registry.get('summarizer')).toBeDefined();
  });

  it('an invalid document is reported with file:line and never blocks the rest of its file or the folder', async () => {
    writeFileSync(join(dir, 'broken.yaml'), `${svcDoc('ok-one', 'ok.svc:1')}---\n${svcDoc('bad-one', 'no port')}`);
    const s = start();
    await s.ready;
    expect(t.registry.get('ok-one')).toBeDefined();
    expect(t.registry.get('bad-one')).toBeUndefined();
    expect(t.registry.get('web')).toBeDefined();
    expect(s.problems()).toEqual([{ file: 'broken.yaml', line: 13, message: expect.stringContaining('RegistryService bad-one: spec.upstream') }]);
    const st = s.statuses().get('RegistryService/default/bad-one')!;
    expect(st.conditions.find((c) => c.type === 'Accepted')).toMatchObject({ status: 'False', reason: 'Invalid' });
  });

  it('an alias bomb is the problem of its own document only: the rest applies, edits meanwhile apply, and so does its removal', async () => {
    // 101 aliases of a 1,000-item list: what `toJS` refuses (maxAliasCount 100) rather than expand.
    const bomb = `a: &a [${Array.from({ length: 1000 }, () => 'x').join(',')}]\nb: [${Array.from({ length: 101 }, () => '*a').join(',')}]\n`;
    writeFileSync(join(dir, 'bomb.yaml'), `${svcDoc('beside-bomb', 'b.svc:1')}---\n${bomb}`);
    const s = start();
    await s.ready;
    expect(t.registry.get('beside-bomb')).toBeDefined();
    expect(t.registry.get('web')).toBeDefined();
    expect(s.problems()).toEqual([{ file: 'bomb.yaml', line: expect.any(Number), message: expect.stringContaining('alias') }]);
    // While it is there, another file's deletion still withdraws its grants.
    rmSync(join(dir, 'agents/research-agent.yaml'));
    await until(() => t.registry.get('research-agent') === undefined, 'the deletion beside the bomb');
    rmSync(join(dir, 'bomb.yaml'));
    await until(() => t.registry.get('beside-bomb') === undefined && s.problems().length === 0, 'the bomb file gone');
    expect(t.registry.get('web')).toBeDefined();
  });

  it('a ConfigMap volume (files are links into ..data, swapped on update) is read and followed; link loops are read once', async () => {
    // The kubelet's layout: ..<timestamp>/ holds the files, ..data links to it, each key links into ..data.
    const cm = mkdtempSync(join(tmpdir(), 'writ-configmap-'));
    try {
      mkdirSync(join(cm, '..2026_11_27_1'));
      writeFileSync(join(cm, '..2026_11_27_1', 'svc.yaml'), svcDoc('from-configmap', 'cm.svc:1'));
      symlinkSync('..2026_11_27_1', join(cm, '..data'));
      symlinkSync('..data/svc.yaml', join(cm, 'svc.yaml'));
      mkdirSync(join(cm, 'loop'));
      symlinkSync('..', join(cm, 'loop', 'up'));
      symlinkSync('nowhere.yaml', join(cm, 'dangling.yaml'));
      const s = startFolderSource({ dir: cm, rescanMs: 50, applier: (owner) => createApplier({ owner, registry: t.registryPort, identity: t.identity }) });
      src = s;
      await s.ready;
      expect(t.registry.get('from-configmap')?.upstream).toBe('cm.svc:1');
      expect(s.problems()).toEqual([]);
      // An update: a new timestamped folder, then ..data swapped to it (atomically, by rename).
      mkdirSync(join(cm, '..2026_11_27_2'));
      writeFileSync(join(cm, '..2026_11_27_2', 'svc.yaml'), svcDoc('from-configmap', 'cm.svc:2'));
      symlinkSync('..2026_11_27_2', join(cm, '..data_tmp'));
      renameSync(join(cm, '..data_tmp'), join(cm, '..data'));
      await until(() => t.registry.get('from-configmap')?.upstream === 'cm.svc:2', 'the swapped ConfigMap');
    } finally {
      rmSync(cm, { recursive: true, force: true });
    }
  });

  it('the periodic rescan alone (no watch events) picks up a change, and a resync with nothing changed writes nothing', async () => {
    const s = start(0);
    await s.ready;
    const version = t.registry.version;
    const audits = t.audits.length;
    await s.resync();
    expect(t.registry.version).toBe(version);
    expect(t.audits.length).toBe(audits);
    writeFileSync(join(dir, 'services.yaml'), svcDoc('web', 'web.default.svc:81'));
    await s.resync();
    expect(t.registry.get('web')!.upstream).toBe('web.default.svc:81');
    expect(t.registry.get('orders')).toBeUndefined();
  });
});
