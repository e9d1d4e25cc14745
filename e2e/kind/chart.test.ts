/**
 * The Helm chart without a cluster: every non-template YAML file parses, every `.Values.x.y` a
 * template reads exists in values.yaml, the CRDs are the repository's CRDs byte for byte, the
 * webhook configurations (SPEC 4.8 failure policies, agent-label object selector) exclude
 * kube-system and the release namespace, secrets come only from Secrets, the env a template sets
 * is read by the code, and the SPEC ports are the defaults. Where `helm` is installed the chart is
 * also linted and rendered (and the manifests validated against the Kubernetes schemas when
 * `kubeconform` is there too); elsewhere those checks skip with a message.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { ROOT, unreadEnv } from './deploy-files.js';

const CHART = join(ROOT, 'charts', 'writ');
const TEMPLATES = join(CHART, 'templates');
const values = parseYaml(readFileSync(join(CHART, 'values.yaml'), 'utf8')) as Record<string, unknown>;

function walk(dir: string, acc: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p, acc);
    else acc.push(p);
  }
  return acc;
}

const templates = walk(TEMPLATES).filter((f) => /\.(ya?ml|tpl)$/.test(f));
const template = (name: string) => readFileSync(join(TEMPLATES, name), 'utf8');

/**
 * Structure-only rendering for files whose shape matters here: lines that are only template
 * actions are dropped, `{{ .Release.Namespace }}` becomes RELEASE_NS, any other inline action
 * `tpl<n>` (numbered, so templated map keys stay distinct).
 */
export function roughRender(text: string): unknown[] {
  let n = 0;
  const lines = text
    .split('\n')
    .filter((l) => !/^\s*\{\{-?[^}]*\}\}\s*$/.test(l) && !/^\s*\{\{-?\s*\/\*/.test(l) && !/^\s*[^{]*\*\/\s*\}\}\s*$/.test(l))
    .map((l) => l.replace(/\{\{-?\s*\.Release\.Namespace\s*-?\}\}/g, 'RELEASE_NS').replace(/\{\{-?[^}]*-?\}\}/g, () => `tpl${++n}`));
  return parseAllDocuments(lines.join('\n')).map((d) => {
    if (d.errors.length) throw new Error(d.errors.map((e) => e.message).join('\n'));
    return d.toJS() as unknown;
  });
}

function helmOnPath(): boolean {
  try {
    execFileSync('helm', ['version', '--short'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('charts/writ without a cluster', () => {
  it('every non-template YAML file parses', () => {
    const files = walk(CHART).filter((f) => /\.ya?ml$/.test(f) && !f.startsWith(TEMPLATES + '/'));
    expect(files.map((f) => relative(CHART, f))).toEqual(expect.arrayContaining(['Chart.yaml', 'values.yaml']));
    for (const f of files) {
      for (const doc of parseAllDocuments(readFileSync(f, 'utf8'))) expect(doc.errors, relative(CHART, f)).toEqual([]);
    }
    expect(parseYaml(readFileSync(join(CHART, 'Chart.yaml'), 'utf8'))).toMatchObject({ apiVersion: 'v2', name: 'writ' });
  });

  it('every template is, structurally, a stream of Kubernetes objects', () => {
    const kinds: string[] = [];
    for (const f of templates.filter((t) => t.endsWith('.yaml'))) {
      for (const doc of roughRender(readFileSync(f, 'utf8')) as { apiVersion?: unknown; kind?: unknown; metadata?: { name?: unknown } }[]) {
        if (doc === null) continue;
        expect(typeof doc.apiVersion, relative(CHART, f)).toBe('string');
        expect(typeof doc.kind, relative(CHART, f)).toBe('string');
        expect(doc.metadata?.name, relative(CHART, f)).toBeTruthy();
        kinds.push(doc.kind as string);
      }
    }
    for (const k of ['Deployment', 'StatefulSet', 'Service', 'Secret', 'ServiceAccount', 'MutatingWebhookConfiguration', 'ValidatingWebhookConfiguration'])
      expect(kinds).toContain(k);
    // control plane, identity, broker, operator, webhook, egress gateway (optional)
    expect(kinds.filter((k) => k === 'Deployment')).toHaveLength(6);
  });

  it('every .Values path a template reads exists in values.yaml', () => {
    const missing: string[] = [];
    let seen = 0;
    for (const f of templates) {
      for (const m of readFileSync(f, 'utf8').matchAll(/\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)) {
        seen++;
        let node: unknown = values;
        for (const key of m[1]!.slice(1).split('.')) {
          if (node === null || typeof node !== 'object' || !(key in (node as object))) {
            missing.push(`${relative(CHART, f)}: .Values${m[1]}`);
            break;
          }
          node = (node as Record<string, unknown>)[key];
        }
      }
    }
    expect(seen).toBeGreaterThan(50);
    expect(missing).toEqual([]);
  });

  it('ships the repository CRDs byte for byte', () => {
    const repo = readdirSync(join(ROOT, 'crds'))
      .filter((f) => f.endsWith('.yaml'))
      .sort();
    expect(repo.length).toBeGreaterThan(0);
    expect(readdirSync(join(CHART, 'crds')).sort()).toEqual(repo);
    for (const f of repo)
      expect(
        readFileSync(join(CHART, 'crds', f)).equals(readFileSync(join(ROOT, 'crds', f))),
        `charts/writ/crds/${f} differs from crds/${f}: cp crds/*.yaml charts/writ/crds/`,
      ).toBe(true);
  });

  it('webhook configurations: mutate Ignore, validate Fail, agent pods of the labelled application namespaces only, never kube-system or the release namespace', () => {
    const docs = roughRender(template('webhook.yaml')) as { kind?: string; webhooks?: any[] }[];
    // Both configurations take their namespaceSelector from the one helper, rendered here.
    const helper = /define "writ\.webhookNamespaceSelector" -\}\}\n([\s\S]*?)\{\{- end \}\}\n$/.exec(template('_helpers.tpl'))![1]!;
    const selector = roughRender(helper)[0] as { matchLabels: Record<string, string>; matchExpressions: { key: string; operator: string; values: string[] }[] };
    expect((values as any).webhook.namespaceLabel).toEqual({ key: 'writ.io/agents', value: 'enabled' });
    expect(Object.keys(selector.matchLabels)).toHaveLength(1);
    expect(template('_helpers.tpl')).toMatch(/matchLabels:\n\s+\{\{ \$c\.namespaceLabel\.key \}\}: \{\{ \$c\.namespaceLabel\.value \| quote \}\}/);
    expect(selector.matchExpressions).toEqual([
      { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: expect.arrayContaining(['kube-system', 'RELEASE_NS']) },
    ]);
    const configs = docs.filter((d) => d?.kind === 'MutatingWebhookConfiguration' || d?.kind === 'ValidatingWebhookConfiguration');
    expect(configs.map((d) => d.kind).sort()).toEqual(['MutatingWebhookConfiguration', 'ValidatingWebhookConfiguration']);
    expect(template('webhook.yaml').match(/namespaceSelector:\n\s+\{\{- include "writ\.webhookNamespaceSelector" \. \| nindent 6 \}\}/g)).toHaveLength(2);
    for (const cfg of configs) {
      expect(cfg.webhooks!.length).toBeGreaterThan(0);
      for (const w of cfg.webhooks!) {
        const mutate = cfg.kind === 'MutatingWebhookConfiguration';
        expect(w.failurePolicy).toBe(mutate ? 'Ignore' : 'Fail');
        expect(w.clientConfig.service.path).toBe(mutate ? '/mutate' : '/validate');
        expect(w.admissionReviewVersions).toEqual(['v1']);
        expect(w.sideEffects).toBe('None');
        expect(w.objectSelector).toEqual({ matchLabels: { 'writ.io/agent': 'true' } });
        expect(w.rules).toEqual([expect.objectContaining({ operations: ['CREATE'], resources: ['pods'], apiGroups: [''] })]);
        expect(w.namespaceSelector).toBeNull(); // filled by the helper's include (its own line)
      }
    }
  });

  it('the forward proxy Service maps port 80 to the proxy container port 9092, and the SPEC ports are the defaults', () => {
    const v = values as any;
    expect(v.controlPlane.proxyService.port).toBe(80);
    expect(v.controlPlane.ports).toEqual({ decision: 9191, grpc: 9192, mgmt: 8181, proxy: 9092, mcp: 8080 });
    expect([v.identity.port, v.broker.port, v.webhook.port, v.webhook.healthPort]).toEqual([8090, 8080, 8443, 8080]);
    const docs = roughRender(template('control-plane.yaml')) as any[];
    const proxy = docs.find((d) => d?.kind === 'Service' && d.spec.ports.some((p: any) => p.name === 'http-proxy'));
    expect(proxy.spec.ports).toEqual([{ name: 'http-proxy', port: expect.stringMatching(/^tpl\d+$/), targetPort: 'proxy' }]);
    expect(template('control-plane.yaml')).toMatch(/port: \{\{ \$c\.proxyService\.port \}\}\n\s+targetPort: proxy/);
    const deploy = docs.find((d) => d?.kind === 'Deployment');
    expect(deploy.spec.template.spec.containers[0].ports.map((p: any) => p.name)).toEqual(['decision', 'grpc', 'mgmt', 'proxy', 'mcp']);
  });

  it('the MCP gateway: on by default, served by the control plane on :8080 (MCP_GATEWAY_ADDR) behind its Service', () => {
    expect((values as any).controlPlane.mcpGateway).toEqual({ enabled: true });
    const text = template('control-plane.yaml');
    expect(text).toMatch(/\{\{- if \$c\.mcpGateway\.enabled \}\}\n\s+- name: MCP_GATEWAY_ADDR\n\s+value: ":\{\{ \$c\.ports\.mcp \}\}"/);
    const docs = roughRender(text) as any[];
    const service = docs.find((d) => d?.kind === 'Service' && d.spec.ports.some((p: any) => p.name === 'http-authz'));
    expect(service.spec.ports.find((p: any) => p.name === 'http-mcp')).toEqual({
      name: 'http-mcp',
      port: expect.stringMatching(/^tpl\d+$/),
      targetPort: 'mcp',
    });
  });

  it('secrets reach pods only through secretKeyRef, and values.yaml holds none', () => {
    const all = templates.map((f) => readFileSync(f, 'utf8')).join('\n');
    for (const name of ['IDP_KEY_ENCRYPTION_KEY', 'IDP_API_KEY_PEPPER', 'BROKER_PROVIDER_KEY', 'WRIT_BOOTSTRAP_ADMIN_KEY', 'WRIT_API_KEY']) {
      const uses = [...all.matchAll(new RegExp(`- name: ${name}\\n(\\s+)(\\S+)`, 'g'))];
      expect(uses.length, name).toBeGreaterThan(0);
      for (const u of uses) expect(u[2], `${name} must come from a Secret`).toBe('valueFrom:');
    }
    expect(all).not.toMatch(/- name: (IDP_KEY_ENCRYPTION_KEY|IDP_API_KEY_PEPPER|BROKER_PROVIDER_KEY|WRIT_BOOTSTRAP_ADMIN_KEY|WRIT_API_KEY)\n\s+value:/);
    expect((values as any).secrets.keys).toEqual({
      keyEncryptionKey: 'IDP_KEY_ENCRYPTION_KEY',
      apiKeyPepper: 'IDP_API_KEY_PEPPER',
      providerKey: 'BROKER_PROVIDER_KEY',
      bootstrapAdminKey: 'WRIT_BOOTSTRAP_ADMIN_KEY',
    });
    // Management API authentication is on in the chart (issue 15 item 8).
    expect((values as any).apiAuth).toBe('keys');
  });

  it('upstream Secrets: mounted read-only at UPSTREAM_SECRETS_DIR/<name>, their volumes named by index (a Secret name may hold dots, a volume name may not)', () => {
    const cp = template('control-plane.yaml');
    expect(cp).toContain('- name: UPSTREAM_SECRETS_DIR');
    expect(cp.match(/\{\{- range \$i, \$name := \$c\.upstreamSecrets \}\}/g)).toHaveLength(2);
    expect(cp).toContain('- name: upstream-secret-{{ $i }}\n              mountPath: /var/run/writ/upstream-secrets/{{ $name }}\n              readOnly: true');
    expect(cp).toContain('- name: upstream-secret-{{ $i }}\n          secret:\n            secretName: {{ $name }}');
    expect(cp).not.toMatch(/name: upstream-\{\{ \. \}\}/);
  });

  it('every component runs from the image with probes, resources and a PodDisruptionBudget', () => {
    for (const [file, component] of [
      ['control-plane.yaml', 'control-plane'],
      ['identity.yaml', 'identity'],
      ['broker.yaml', 'broker'],
      ['webhook.yaml', 'webhook'],
      ['operator.yaml', 'operator'],
    ] as const) {
      const text = template(file);
      expect(text, file).toMatch(new RegExp(`args: \\["${component}"\\]|- ${component}\\n`));
      expect(text, file).toMatch(/readinessProbe:/);
      expect(text, file).toMatch(/livenessProbe:/);
      expect(text, file).toMatch(/resources:\n\s+\{\{- toYaml \$c\.resources/);
      expect(text, file).toMatch(new RegExp(`include "writ.pdb" \\(dict "ctx" \\$ "component" "${component}" "c" \\$c\\)`));
    }
    expect(template('operator.yaml')).toMatch(/serviceAccountName: \{\{ include "writ\.fullname" \. \}\}-operator/);
    expect(template('_helpers.tpl')).toMatch(/define "writ\.fullname"/);
  });

  it("every component's probes point at its real health and readiness endpoints, operator included", () => {
    // What each component serves, by container port name (the routes its process answers).
    const served: Record<string, Record<string, { live: string; ready: string }>> = {
      'control-plane.yaml': { mgmt: { live: '/healthz', ready: '/readyz' } },
      'identity.yaml': { http: { live: '/healthz', ready: '/readyz' } },
      'broker.yaml': { http: { live: '/health/liveliness', ready: '/health/readiness' } },
      'webhook.yaml': { health: { live: '/healthz', ready: '/readyz' } },
      'operator.yaml': { health: { live: '/healthz', ready: '/readyz' } },
      'egress-gateway.yaml': { proxy: { live: '/healthz', ready: '/readyz' } },
    };
    for (const [file, ports] of Object.entries(served)) {
      const deploy = (roughRender(template(file)) as any[]).find((d) => d?.kind === 'Deployment');
      const container = deploy.spec.template.spec.containers[0];
      const names = (container.ports as { name: string }[]).map((p) => p.name);
      const ready = container.readinessProbe?.httpGet;
      expect(ready, `${file} readinessProbe`).toBeDefined();
      expect(names, file).toContain(ready.port);
      expect(ready.path, `${file} readiness`).toBe(ports[ready.port]!.ready);
      for (const probe of ['livenessProbe', 'startupProbe'] as const) {
        const get = container[probe]?.httpGet;
        if (!get) continue;
        expect(names, `${file} ${probe}`).toContain(get.port);
        expect(get.path, `${file} ${probe}`).toBe(ports[get.port]!.live);
      }
      expect(container.livenessProbe, `${file} livenessProbe`).toBeDefined();
    }
    // The operator's health listener is the port its probes name.
    expect(template('operator.yaml')).toMatch(/- name: OPERATOR_HEALTH_ADDR\n\s+value: ":\{\{ \$c\.healthPort \}\}"/);
    expect(template('operator.yaml')).toMatch(/- name: health\n\s+containerPort: \{\{ \$c\.healthPort \}\}/);
    expect((values as any).operator.healthPort).toBe(8081);
  });

  it('the optional egress gateway: off by default, on :3128 asking the decision Service, and the webhook proxies agents to it when on', () => {
    const v = values as any;
    expect(v.egressGateway).toMatchObject({ enabled: false, port: 3128, authzTimeoutMs: 2000 });
    const text = template('egress-gateway.yaml');
    expect(text.split('\n')[0]).toBe('{{- if .Values.egressGateway.enabled }}');
    const docs = roughRender(text) as any[];
    const deploy = docs.find((d) => d?.kind === 'Deployment');
    const container = deploy.spec.template.spec.containers[0];
    expect(container.args).toEqual(['egress-gateway']);
    expect(text).toMatch(/- name: EGRESS_GATEWAY_ADDR\n\s+value: ":\{\{ \$c\.port \}\}"/);
    expect(text).toMatch(/- name: EGRESS_GATEWAY_AUTHZ_URL\n\s+value: "\{\{ include "writ\.decisionUrl" \. \}\}\/authz"/);
    const svc = docs.find((d) => d?.kind === 'Service');
    expect(svc.spec.ports).toEqual([{ name: 'http-proxy', port: expect.stringMatching(/^tpl\d+$/), targetPort: 'proxy' }]);
    expect(text).toMatch(/include "writ\.pdb" \(dict "ctx" \$ "component" "egress-gateway" "c" \$c\)/);
    // The webhook's injected proxy: the gateway's Service when enabled, else the control plane's forward proxy.
    const helper = /define "writ\.proxyUrl" -\}\}\n([\s\S]*?)\{\{- end -\}\}\n\{\{- end -\}\}/.exec(template('_helpers.tpl'))![1]!;
    expect(helper).toMatch(
      /^\{\{- if \.Values\.egressGateway\.enabled -\}\}\nhttp:\/\/\{\{ include "writ\.fullname" \. \}\}-egress-gateway\.\{\{ \.Release\.Namespace \}\}\.svc:\{\{ \.Values\.egressGateway\.port \}\}\n\{\{- else -\}\}\nhttp:\/\/\{\{ include "writ\.fullname" \. \}\}-proxy\./,
    );
    expect(template('webhook.yaml')).toMatch(/- -proxy-url=\{\{ include "writ\.proxyUrl" \. \}\}/);
  });

  it('every env variable a template sets is one the code reads', () => {
    const set: string[] = [];
    for (const f of templates) for (const m of readFileSync(f, 'utf8').matchAll(/- name: ([A-Z][A-Z0-9_]+)\n/g)) set.push(m[1]!);
    expect(set.length).toBeGreaterThan(10);
    expect(unreadEnv(set, new Set(['POSTGRES_USER', 'POSTGRES_DB', 'POSTGRES_PASSWORD', 'PGDATA']))).toEqual([]);
  });
});

describe('charts/writ rendered by helm', () => {
  const helm = helmOnPath();

  it('helm lint and helm template render every component', (ctx) => {
    if (!helm) return ctx.skip('helm is not installed here: lint and render skipped');
    execFileSync('helm', ['lint', '--strict', CHART], { stdio: 'pipe' });
    const out = execFileSync('helm', ['template', 'writ', CHART, '--namespace', 'writ-system', '--set', 'controlPlane.upstreamSecrets={api.keys,search}'], {
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    // Every volume name is a DNS-1123 label, a dotted Secret's included.
    for (const v of out.matchAll(/^\s+volumes:\n((?:\s+- name: .*\n(?:\s{10,}.*\n)*)+)/gm))
      for (const n of v[1]!.matchAll(/- name: (\S+)/g)) expect(n[1]).toMatch(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/);
    const kinds = parseAllDocuments(out)
      .map((d) => (d.toJS() as { kind?: string } | null)?.kind)
      .filter(Boolean);
    for (const k of ['Deployment', 'Service', 'Secret', 'StatefulSet', 'PodDisruptionBudget', 'MutatingWebhookConfiguration', 'ValidatingWebhookConfiguration'])
      expect(kinds).toContain(k);
  });

  it('rendered manifests validate against the Kubernetes schemas (kubeconform)', (ctx) => {
    if (!helm) return ctx.skip('helm is not installed here: schema validation skipped');
    try {
      execFileSync('kubeconform', ['-v'], { stdio: 'ignore' });
    } catch {
      return ctx.skip('kubeconform is not installed here: schema validation skipped');
    }
    const out = execFileSync('helm', ['template', 'writ', CHART, '--namespace', 'writ-system', '--include-crds'], { encoding: 'utf8', maxBuffer: 64 << 20 });
    execFileSync('kubeconform', ['-strict', '-summary', '-ignore-missing-schemas', '-'], { input: out, stdio: ['pipe', 'inherit', 'inherit'] });
  });
});
