/**
 * The production build: `tsc -p tsconfig.build.json` plus the asset copy, into a temp folder,
 * then the built control plane and all-in-one started with plain `node` (no tsx): each finds its
 * assets (SQL migrations, the CRD examples, the model table, the portal files) next to the built JavaScript.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from './brand.js';
import { copyAssets, isAsset } from './build-assets.js';
import { addPublicService, startEntry } from './entry-testing.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const ANY = '127.0.0.1:0';

describe('isAsset', () => {
  it('keeps migrations, YAML, JSON and portal files; drops TypeScript, READMEs and test data', () => {
    for (const f of [
      'runtime/store/migrations/0000_base.sql',
      'runtime/broker/models.yaml',
      'crds/examples/seed/directory.json',
      'runtime/portal/assets/style.css',
      'runtime/control-plane/grpc/proto/grpc/health/v1/health.proto',
    ])
      expect(isAsset(f, false)).toBe(true);
    for (const f of ['runtime/main.ts', 'webhook/webhook.test.ts', 'runtime/README.md', 'operator/crd/testdata/x.yaml', 'operator/testing/stack.yaml'])
      expect(isAsset(f, false)).toBe(false);
  });
});

describe('npm run build output', { timeout: 480_000 }, () => {
  const out = mkdtempSync(join(tmpdir(), 'writ-build-'));
  const dist = join(out, 'dist');

  beforeAll(async () => {
    // The emit of `npm run build` without its type check (`npm run typecheck` does that): half the CPU.
    await promisify(execFile)(join(ROOT, 'node_modules', '.bin', 'tsc'), ['-p', join(ROOT, 'tsconfig.build.json'), '--outDir', dist, '--noCheck'], {
      cwd: ROOT,
    });
    copyAssets(ROOT, dist);
    // What the image has beside dist/: the package's module type and its dependencies.
    writeFileSync(join(out, 'package.json'), JSON.stringify({ type: 'module' }));
    symlinkSync(join(ROOT, 'node_modules'), join(out, 'node_modules'));
  }, 480_000);
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it('emits every entry point and copies the assets', () => {
    for (const f of [
      'runtime/main.js',
      'runtime/control-plane/main.js',
      'runtime/identity/main.js',
      'runtime/broker/main.js',
      'operator/main.js',
      'webhook/main.js',
      'sidecar/main.js',
    ]) {
      expect(existsSync(join(dist, f)), f).toBe(true);
    }
    for (const f of [
      'runtime/store/migrations/0000_base.sql',
      'runtime/control-plane/grpc/proto/envoy/service/auth/v3/external_auth.proto',
      'crds/examples/services.yaml',
    ])
      expect(existsSync(join(dist, f)), f).toBe(true);
    expect(existsSync(join(dist, 'runtime/lib/process.test.js'))).toBe(false);
  });

  it('node dist/runtime/control-plane/main.js starts (migrations from dist) and stops on SIGTERM', async () => {
    const c = await startEntry(
      [process.execPath, join(dist, 'runtime/control-plane/main.js')],
      { REGISTRY_BACKEND: 'memory', DECISION_ADDR: ANY, MGMT_ADDR: ANY },
      out,
    );
    await addPublicService(c.ports.mgmt!);
    expect((await fetch(`http://127.0.0.1:${c.ports.decision}/authz`, { headers: { [H.service]: 'web' } })).status).toBe(200);
    c.signal('SIGTERM');
    expect(await c.exited).toBe(0);
  });

  it('node dist/runtime/main.js loads crds/examples, the model table and the portal files from dist', async () => {
    const c = await startEntry(
      [process.execPath, join(dist, 'runtime/main.js')],
      { WRIT_DATA_DIR: join(out, 'data'), PORT: '0', DECISION_ADDR: ANY, MGMT_ADDR: ANY, EGRESS_PROXY_ADDR: ANY, BROKER_ADDR: ANY },
      out,
    );
    const services = (await (await fetch(`http://127.0.0.1:${c.ports.mgmt}/v1/registry/services`)).json()) as { name: string }[];
    expect(services.length).toBeGreaterThan(0);
    const models = (await (await fetch(`http://127.0.0.1:${c.ports.broker}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data.length).toBeGreaterThan(0);
    // The portal's static files (HTML and browser JavaScript) come from dist too.
    for (const path of ['/portal/', '/portal/app.js']) expect((await fetch(`http://127.0.0.1:${c.ports.mgmt}${path}`)).status, path).toBe(200);
    c.signal('SIGTERM');
    expect(await c.exited).toBe(0);
  });
});
