/**
 * One configuration: the declared settings, the README's configuration tables and the code
 * agree. Every variable the README documents is declared (and the other way round), with the
 * declared default; every variable the code reads is declared; nothing below the entry points
 * reads the environment; loadConfig refuses bad values naming each variable.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BRAND_UPPER } from './brand.js';
import { loadConfig, SETTINGS, shownDefault } from './settings.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Variables of the README's "## Configuration" tables (first column, backticked, upper case). */
function readmeVariables(): Set<string> {
  const text = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const start = text.indexOf('## Configuration');
  const end = text.indexOf('\n## ', start + 1);
  const section = text.slice(start, end === -1 ? undefined : end);
  const out = new Set<string>();
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    // A variable row names it first; a flag row (webhook) names the flag first, its variable second.
    const cell = cells[1]?.startsWith('`-') ? cells[2] : cells[1];
    if (!cell || !/^`[A-Z]/.test(cell)) continue;
    for (const v of cell.matchAll(/`([A-Z][A-Z0-9_]*)`/g)) out.add(v[1]!);
  }
  return out;
}

interface Row {
  /** The table's bold heading, e.g. `All-in-one`. */
  table: string;
  /** The row's variables, in order. */
  vars: string[];
  /** The backticked values of its Default cell, in order. */
  defaults: string[];
}

/** The rows of the README's configuration tables. */
function readmeRows(): Row[] {
  const text = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const start = text.indexOf('## Configuration');
  const end = text.indexOf('\n## ', start + 1);
  const rows: Row[] = [];
  let table = '';
  for (const line of text.slice(start, end === -1 ? undefined : end).split('\n')) {
    const heading = /^\*\*([^*]+)\*\*/.exec(line);
    if (heading) table = heading[1]!;
    const cells = line.split('|').map((c) => c.trim());
    const flagRow = cells[1]?.startsWith('`-');
    const vars = flagRow ? cells[2] : cells[1];
    if (!vars || !/^`[A-Z]/.test(vars)) continue;
    const def = (flagRow ? cells[3] : cells[2]) ?? '';
    rows.push({ table, vars: [...vars.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]!), defaults: [...def.matchAll(/`([^`]*)`/g)].map((m) => m[1]!) });
  }
  return rows;
}

/** Source files of the processes (not tests, benches or fixtures). */
function sources(dir: string, out: string[] = []): string[] {
  for (const f of readdirSync(dir)) {
    const p = join(dir, f);
    if (f === 'node_modules' || f === 'testing' || f === 'testdata') continue;
    if (statSync(p).isDirectory()) sources(p, out);
    else if (f.endsWith('.ts') && !/\.test\.ts$|testkit\.ts$|testing\.ts$|-testing\.ts$/.test(f)) out.push(p);
  }
  return out;
}

/** Variable names the code reads: `(env, 'X'`, `envName('X')`, `env.X`, `process.env.X`, `env['X']`. */
function codeVariables(): Map<string, string> {
  const found = new Map<string, string>();
  const patterns = [/\(\s*env\s*,\s*'([A-Z][A-Z0-9_]+)'/g, /envName\('([A-Z][A-Z0-9_]+)'\)/g, /\benv\.([A-Z][A-Z0-9_]+)\b/g, /\benv\['([A-Z][A-Z0-9_]+)'\]/g];
  for (const dir of ['runtime', 'sidecar', 'webhook', 'operator']) {
    for (const file of sources(join(ROOT, dir))) {
      const text = readFileSync(file, 'utf8');
      for (const re of patterns) {
        for (const m of text.matchAll(re)) {
          const raw = m[1]!;
          const name = re.source.startsWith('envName') ? `${BRAND_UPPER}_${raw}` : raw;
          if (!found.has(name)) found.set(name, file.slice(ROOT.length));
        }
      }
    }
  }
  return found;
}

describe('one configuration', () => {
  const declared = new Set(SETTINGS.map((s) => s.name));

  it('every variable is declared once', () => {
    expect(declared.size).toBe(SETTINGS.length);
  });

  it('the README documents exactly the declared variables', () => {
    const documented = readmeVariables();
    expect([...declared].filter((n) => !documented.has(n)).sort(), 'declared but not in the README tables').toEqual([]);
    expect([...documented].filter((n) => !declared.has(n)).sort(), 'in the README tables but not declared').toEqual([]);
  });

  it('the code reads no undeclared variable', () => {
    // Platform variables the code reads for defaults, not settings of its own.
    const platform = new Set(['PATH', 'HOME', `${BRAND_UPPER}_POD_NAME`, 'HOSTNAME', 'KUBERNETES_SERVICE_HOST', 'KUBERNETES_SERVICE_PORT', 'NODE_ENV']);
    // Read from an admitted pod's spec by the webhook, not from its own environment.
    platform.add(`${BRAND_UPPER}_AGENT_NAME`);
    const undeclared = [...codeVariables()].filter(([n]) => !declared.has(n) && !platform.has(n)).map(([n, f]) => `${n} (${f})`);
    expect(undeclared.sort()).toEqual([]);
  });

  it('the README states every declared default', () => {
    const byName = new Map(SETTINGS.map((s) => [s.name, s]));
    const wrong: string[] = [];
    for (const row of readmeRows()) {
      row.vars.forEach((name, i) => {
        const d = byName.get(name);
        const want = d && shownDefault(d);
        // The all-in-one table says what that process sets in place of another component's default.
        if (want === undefined || (row.table === 'All-in-one' && d!.component !== 'all-in-one' && d!.component !== 'logging')) return;
        if (row.defaults[i] !== want) wrong.push(`${name} (${row.table}): README ${JSON.stringify(row.defaults[i])}, declared ${JSON.stringify(want)}`);
      });
    }
    expect(wrong).toEqual([]);
    // A literal check of the comparison itself: a few defaults as the README writes them.
    expect(['DECISION_ADDR', 'EGRESS_APPROVAL_TIMEOUT', 'EGRESS_CONNECT_PORTS', 'BROKER_ENABLED'].map((n) => shownDefault(byName.get(n)!))).toEqual([
      ':9191',
      '120',
      '443',
      'true',
    ]);
  });

  it('nothing below the entry points reads the environment', () => {
    // Entry points (`*/main.ts`, the CLI's) load the configuration; settings.ts and config.ts declare and parse it.
    const allowed = new Set(['runtime/lib/settings.ts', 'runtime/lib/config.ts']);
    const reads = [/\bprocess\.env\b/, /(?<![\w.$])env\.[A-Z_]/, /(?<![\w.$])env\[/, /\(\s*env\s*,/];
    const found: string[] = [];
    for (const dir of ['runtime', 'sidecar', 'webhook', 'operator']) {
      for (const file of sources(join(ROOT, dir))) {
        const rel = file.slice(ROOT.length).replace(/\\/g, '/');
        if (allowed.has(rel) || /(^|\/)main\.ts$/.test(rel)) continue;
        readFileSync(file, 'utf8')
          .split('\n')
          .forEach((line, i) => {
            if (reads.some((re) => re.test(line))) found.push(`${rel}:${i + 1}: ${line.trim()}`);
          });
      }
    }
    expect(found).toEqual([]);
  });

  it('loadConfig: a frozen, typed configuration with one slice per component', () => {
    const c = loadConfig({ AGENT_IDP_TIMEOUT_MS: '750', EGRESS_CONNECT_PORTS: '443, 8443', OTEL_SDK_DISABLED: 'true', WRIT_POD_NAME: 'pod-7' });
    expect(Object.keys(c).sort()).toEqual([
      'allInOne',
      'audit',
      'auth',
      'broker',
      'controlPlane',
      'identity',
      'operator',
      'process',
      'proxy',
      'sidecar',
      'tracing',
      'webhook',
    ]);
    expect(c.controlPlane.idpTimeoutMs).toBe(750);
    expect(c.controlPlane.opaTimeoutMs).toBe(500);
    expect(c.proxy.connectPorts).toEqual([443, 8443]);
    expect(c.proxy.replicaId).toBe('pod-7');
    expect(c.audit.chainBase).toBe('pod-7');
    expect(c.tracing).toEqual({ mode: 'off' });
    expect(Object.isFrozen(c) && Object.isFrozen(c.controlPlane) && Object.isFrozen(c.proxy.connectPorts)).toBe(true);
    expect(() => {
      (c.controlPlane as { idpTimeoutMs: number }).idpTimeoutMs = 1;
    }).toThrow(TypeError);
  });

  it('loadConfig: empty is unset; every bad value is refused naming its variable', () => {
    expect(loadConfig({ DECISION_ADDR: '', OPA_TIMEOUT_MS: '' }).controlPlane).toMatchObject({ decisionAddr: ':9191', opaTimeoutMs: 500 });
    expect(loadConfig({ DECISION_ADDR: '127.0.0.1:0', AGENT_IDENTITY_MODE: 'vc' }).controlPlane.identityMode).toBe('vc');
    const bad = {
      DECISION_ADDR: 'nope:port',
      AGENT_IDENTITY_MODE: 'magic',
      OPA_TIMEOUT_MS: '-5',
      BROKER_ENABLED: 'perhaps',
      EGRESS_CONNECT_PORTS: '443,99999',
      IDP_ISSUER_MAP: '{',
      AGENT_IDP_URL: 'not a url',
      EGRESS_APPROVAL_TIMEOUT: '48h',
      OTEL_TRACES_SAMPLER: 'traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '2',
    };
    let msg = '';
    try {
      loadConfig(bad);
    } catch (e) {
      msg = (e as Error).message;
    }
    for (const k of Object.keys(bad)) expect(msg).toContain(k);
  });
});
