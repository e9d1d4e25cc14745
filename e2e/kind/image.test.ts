/**
 * The image and the evaluation stack, checked without a container engine: the Dockerfile's
 * shape (multi-stage, non-root, dumb-init -> node, production dependencies only), its
 * entrypoint's components map to real entry points, compose.yaml parses, every service runs a
 * component the image knows, and every variable it sets is one the code reads. `docker build`
 * runs where an engine answers and skips with a message where none does (as on these machines).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { devImportsInShippedCode, entrypointScript, imageComponents, ROOT, unreadEnv } from './deploy-files.js';

const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
const components = imageComponents(dockerfile);

export function dockerEngine(): string | undefined {
  try {
    execFileSync('docker', ['info', '--format', '{{.ServerVersion}}'], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 15_000 });
    return undefined;
  } catch (e) {
    const err = e as { code?: string; stderr?: Buffer };
    return err.code === 'ENOENT'
      ? 'the docker CLI is not installed'
      : `docker cannot reach an engine (${(err.stderr?.toString() ?? '').trim().split('\n')[0] || 'docker info failed'})`;
  }
}

describe('Dockerfile', () => {
  it('is multi-stage, runs as a non-root user, dumb-init as PID 1 and never npm at run time', () => {
    const stages = [...dockerfile.matchAll(/^FROM\s+\S+(?:\s+AS\s+(\S+))?/gim)];
    expect(stages.length).toBeGreaterThanOrEqual(3);
    const final = dockerfile.slice(stages.at(-1)!.index);
    const user = /^USER\s+(\S+)/m.exec(final)?.[1];
    expect(user).toBeDefined();
    expect(user!.split(':')[0]).not.toMatch(/^(0|root)$/);
    const entrypoint = JSON.parse(/^ENTRYPOINT\s+(\[.*\])$/m.exec(final)![1]!) as string[];
    expect(entrypoint.slice(0, 2)).toEqual(['dumb-init', '--']);
    expect(final).not.toMatch(/^(ENTRYPOINT|CMD)\b.*\bnpm\b/m);
    // The final stage takes node_modules from a stage that installed production dependencies only.
    expect(dockerfile).toMatch(/npm ci --omit=dev/);
    expect(final).toMatch(/COPY --from=deps \/app\/node_modules/);
    expect(final).not.toMatch(/COPY\s+(runtime|operator|webhook|sidecar)\b/);
  });

  it('preloads jemalloc from the libjemalloc2 it installs, its background thread on, as npm start does where installed', () => {
    const final = dockerfile.slice([...dockerfile.matchAll(/^FROM\s+/gim)].at(-1)!.index);
    expect(final).toMatch(/apt-get install [^\n]*\blibjemalloc2\b/);
    const link = /ln -s "\$\(dpkg-query -L libjemalloc2 \| grep '[^']+'\)" (\S+)/.exec(final)?.[1];
    expect(link).toBe('/usr/local/lib/libjemalloc.so.2');
    expect(/^\s+LD_PRELOAD=(\S+)/m.exec(final)?.[1]).toBe(link);
    expect(/^\s+MALLOC_CONF=(\S+)/m.exec(final)?.[1]).toBe('background_thread:true');
    const start = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
    expect(start).toMatch(/libjemalloc\.so\.2.*LD_PRELOAD=\$\{LD_PRELOAD-\$jemalloc\} MALLOC_CONF=\$\{MALLOC_CONF:-background_thread:true\}/);
  });

  it('shipped code imports no devDependency (the image has production dependencies only)', () => {
    expect(devImportsInShippedCode()).toEqual([]);
  });

  it('knows every component', () => {
    expect([...components.keys()].sort()).toEqual(['all-in-one', 'broker', 'control-plane', 'egress-gateway', 'identity', 'operator', 'sidecar', 'webhook']);
  });

  for (const [component, source] of components) {
    it(`entrypoint ${component} -> ${source} exists`, () => {
      expect(existsSync(join(ROOT, source)), source).toBe(true);
    });
  }

  it('the entrypoint script execs node on the chosen component with its flags, all-in-one by default, 64 on an unknown one', () => {
    const dir = mkdtempSync(join(tmpdir(), 'writ-entrypoint-'));
    try {
      writeFileSync(join(dir, 'writ'), entrypointScript(dockerfile));
      // A stand-in `node` that prints what it was asked to run.
      writeFileSync(join(dir, 'node'), '#!/bin/sh\necho "node $*"\n');
      chmodSync(join(dir, 'node'), 0o755);
      const run = (...args: string[]) => spawnSync('sh', [join(dir, 'writ'), ...args], { env: { PATH: `${dir}:/usr/bin:/bin` }, encoding: 'utf8' });
      expect(run('webhook', '-addr', ':8443').stdout.trim()).toBe('node --enable-source-maps dist/webhook/main.js -addr :8443');
      expect(run('control-plane').stdout.trim()).toBe('node --enable-source-maps dist/runtime/control-plane/main.js');
      expect(run().stdout.trim()).toBe('node --enable-source-maps dist/runtime/main.js');
      const bad = run('npm');
      expect(bad.status).toBe(64);
      expect(bad.stderr).toMatch(/^usage: writ /);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it(
    'builds with docker where an engine answers',
    (ctx) => {
      const why = dockerEngine();
      if (why) return ctx.skip(`docker build skipped: ${why}`);
      execFileSync('docker', ['build', '-t', 'writ:test', ROOT], { stdio: 'inherit', timeout: 15 * 60_000 });
    },
    16 * 60_000,
  );
});

describe('compose.yaml (SPEC 1 evaluation stack)', () => {
  const compose = parseYaml(readFileSync(join(ROOT, 'compose.yaml'), 'utf8'), { merge: true }) as {
    services: Record<
      string,
      { image?: string; build?: unknown; command?: string[]; environment?: Record<string, string>; depends_on?: Record<string, unknown>; profiles?: string[] }
    >;
  };
  const ours = Object.entries(compose.services).filter(([, s]) => s.build !== undefined);

  it('has PostgreSQL, the control plane, the identity authority and the broker, and no forward proxy published', () => {
    const byDefault = Object.entries(compose.services).filter(([, s]) => !s.profiles);
    expect(byDefault.map(([n]) => n).sort()).toEqual(['broker', 'control-plane', 'identity', 'postgres']);
    expect(
      byDefault
        .filter(([, s]) => s.build !== undefined)
        .map(([, s]) => s.command?.[0])
        .sort(),
    ).toEqual(['broker', 'control-plane', 'identity']);
    // Opt-in: the examples through the operator's folder source, from the CRD examples in the image.
    expect(compose.services.examples).toMatchObject({
      profiles: ['examples'],
      command: ['operator'],
      environment: { WRIT_POLICY_DIR: '/app/dist/crds/examples', WRIT_KUBERNETES: 'false' },
    });
    const published = JSON.stringify(Object.values(compose.services).map((s) => (s as { ports?: unknown }).ports ?? []));
    expect(published).not.toContain('9092');
  });

  it('every service of the image runs a component its entrypoint knows', () => {
    for (const [name, s] of ours) expect(components.has(s.command?.[0] ?? ''), `${name}: ${s.command?.join(' ')}`).toBe(true);
  });

  it('every variable set on a service is one the code reads', () => {
    const set = ours.flatMap(([, s]) => Object.keys(s.environment ?? {}));
    expect(set.length).toBeGreaterThan(10);
    expect(unreadEnv(set)).toEqual([]);
  });

  it('wires the components to each other by service name and port', () => {
    const env = (svc: string) => compose.services[svc]!.environment ?? {};
    expect(env('control-plane').AGENT_IDP_URL).toBe(`http://identity:${env('identity').PORT}`);
    expect(env('broker').BROKER_AUTHZ_URL).toBe(`http://control-plane${env('control-plane').DECISION_ADDR}/authz`);
    expect(env('broker').BROKER_USAGE_URL).toBe(`http://control-plane${env('control-plane').MGMT_ADDR}/v1/usage`);
    for (const svc of ['identity', 'control-plane']) expect(Object.values(env(svc)).join(' ')).toContain('@postgres:5432/');
  });
});
