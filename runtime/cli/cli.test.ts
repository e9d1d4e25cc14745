import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type RunningControlPlane } from '../control-plane/server.js';
import { openTestPglite } from '../store/testing.js';
import type { Store } from '../store/factory.js';
import { main, type Io } from './main.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const EXAMPLES = join(ROOT, 'crds/examples');
const INVALID = join(ROOT, 'operator/crd/testdata/invalid.yaml');

function capture(): Io & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return { stdout, stderr, out: (l) => stdout.push(l), err: (l) => stderr.push(l) };
}

describe('writ validate', () => {
  it('the examples are valid (exit 0)', async () => {
    const io = capture();
    expect(await main(['validate', EXAMPLES], io)).toBe(0);
    expect(io.stdout).toEqual(['12 resource(s) in 4 file(s): all valid']);
  });

  it('invalid resources: exit 1 and file:line: message for each', async () => {
    const io = capture();
    expect(await main(['validate', INVALID], io)).toBe(1);
    const rel = relative(process.cwd(), INVALID);
    expect(io.stderr.length).toBe(34);
    expect(io.stderr.every((l) => l.startsWith(`${rel}:`))).toBe(true);
    expect(io.stderr).toContain(`${rel}:13: RegistryService no-upstream: spec.upstream: required field is missing`);
    expect(io.stderr.find((l) => l.includes('selfish'))).toMatch(
      new RegExp(`^${rel}:\\d+: AgentPolicy selfish: spec.allowAgents: an agent cannot list itself in allowAgents$`),
    );
  });

  it('two files claiming one registry name: a Conflict pointing at the losing document', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'writ-cli-'));
    try {
      const doc = (ns: string) =>
        `apiVersion: writ.io/v1alpha1\nkind: RegistryService\nmetadata:\n  name: web\n  namespace: ${ns}\nspec:\n  upstream: web.svc:80\n`;
      writeFileSync(join(dir, 'a.yaml'), doc('a'));
      writeFileSync(join(dir, 'b.yaml'), `# second\n${doc('b')}`);
      const io = capture();
      expect(await main(['validate', dir], io)).toBe(1);
      expect(io.stderr).toEqual([
        `${relative(process.cwd(), join(dir, 'b.yaml'))}:2: RegistryService web: Conflict: registry name web is already claimed by RegistryService/a/web`,
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('usage errors exit 2; unknown commands list the commands', async () => {
    const io = capture();
    expect(await main(['validate'], io)).toBe(2);
    expect(await main(['nope'], io)).toBe(2);
    expect(io.stderr.join('\n')).toContain('diff <dir> --server');
  });

  it('runs as `npx writ` (the package.json bin)', async () => {
    const r = await promisify(execFile)('npx', ['--no-install', 'writ', 'validate', 'crds/examples'], { cwd: ROOT, timeout: 60_000 }).catch(
      (e: { stdout: string; stderr: string; code: number }) => e,
    );
    expect(r.stdout.trim()).toBe('12 resource(s) in 4 file(s): all valid');
  });
});

describe('writ diff (the apply route dry run)', () => {
  let store: Store;
  let cp: RunningControlPlane;
  let server: string;
  let dir: string;

  beforeAll(async () => {
    store = await openTestPglite();
    cp = await startControlPlane({ store, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
    server = `http://127.0.0.1:${cp.mgmtPort}`;
    dir = mkdtempSync(join(tmpdir(), 'writ-diff-'));
    cpSync(EXAMPLES, dir, { recursive: true });
  });
  afterAll(async () => {
    await cp?.close();
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('an empty registry: every entry is a create (exit 1), and nothing is written', async () => {
    const io = capture();
    expect(await main(['diff', dir, '--server', server], io)).toBe(1);
    expect(io.stdout).toContain('+ research-agent');
    expect(io.stdout.filter((l) => l.startsWith('+ '))).toHaveLength(10);
    expect(io.stdout.at(-1)).toBe('10 change(s), 0 unchanged, 0 conflict(s), 0 rejected');
    expect(cp.plane.registry.version).toBe(0);
  });

  it('after an apply: no change (exit 0); an edit shows the changed field; an api-owned name is a conflict (exit 2)', async () => {
    const { reconcile } = await import('../../operator/reconcile.js');
    const { readFolder } = await import('../../operator/validate/files.js');
    const { folderOwner } = await import('../../operator/folder/source.js');
    await cp.plane.registry.apply(reconcile(readFolder(dir).resources).services, { owner: folderOwner(dir) });
    let io = capture();
    expect(await main(['diff', dir, '--server', server], io)).toBe(0);
    expect(io.stdout.at(-1)).toBe('0 change(s), 10 unchanged, 0 conflict(s), 0 rejected');

    writeFileSync(join(dir, 'extra.yaml'), 'apiVersion: writ.io/v1alpha1\nkind: RegistryService\nmetadata: {name: taken}\nspec: {upstream: t.svc:1}\n');
    await cp.plane.registry.upsert({ name: 'taken', upstream: 'mine.svc:2' });
    const f = join(dir, 'services.yaml');
    writeFileSync(f, (await import('node:fs')).readFileSync(f, 'utf8').replace('upstream: web.default.svc:80', 'upstream: web.default.svc:81'));
    io = capture();
    // A resource another owner holds would not be written: the gate fails (2), changes or not.
    expect(await main(['diff', dir, '--server', server], io)).toBe(2);
    expect(io.stdout).toEqual(
      expect.arrayContaining(['~ web', '    upstream: "web.default.svc:80" -> "web.default.svc:81"', '! taken (owned by api: not written)']),
    );
    expect(cp.plane.registry.get('web')!.upstream).toBe('web.default.svc:80');
    rmSync(join(dir, 'extra.yaml'));
    expect(await main(['diff', dir, '--server', server], capture())).toBe(1);
  });

  it('a bad server URL is a usage error', async () => {
    const io = capture();
    expect(await main(['diff', dir, '--server', 'nope'], io)).toBe(2);
    expect(io.stderr).toEqual(['--server must be a URL, got "nope"']);
  });
});
