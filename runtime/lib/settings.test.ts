/**
 * One configuration: the declared settings, the README's configuration tables and the code
 * agree. Every variable the README documents is declared (and the other way round); every
 * variable the code reads is declared; loadConfig refuses bad values naming each variable.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BRAND_UPPER } from './brand.js';
import { loadConfig, SETTINGS } from './settings.js';

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

  it('loadConfig: empty is unset; every bad value is refused naming its variable', () => {
    expect(loadConfig({ DECISION_ADDR: '', OPA_TIMEOUT_MS: '' }).size).toBe(0);
    expect(loadConfig({ DECISION_ADDR: '127.0.0.1:0', AGENT_IDENTITY_MODE: 'vc' }).get('AGENT_IDENTITY_MODE')).toBe('vc');
    const bad = {
      DECISION_ADDR: 'nope:port',
      AGENT_IDENTITY_MODE: 'magic',
      OPA_TIMEOUT_MS: '-5',
      BROKER_ENABLED: 'perhaps',
      EGRESS_CONNECT_PORTS: '443,99999',
      IDP_ISSUER_MAP: '{',
      AGENT_IDP_URL: 'not a url',
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
