/**
 * Writ on a real Kubernetes cluster (kind, `kind-config.yaml`): build the image, create the
 * cluster, load the image, `helm install` charts/writ, seed the example directory, apply
 * `crds/examples/`, then check what only a cluster shows:
 *
 *   - an agent pod labelled writ.io/agent=true gets HTTPS_PROXY / HTTP_PROXY / NO_PROXY (mutate);
 *   - a pod of an unprovisioned agent, and one of an unknown agent, are refused (validate);
 *   - from the agent pod, an allowed egress goes through the forward proxy (Service port 80) to
 *     the in-cluster `search` tool, and a call to a service outside its allowlist is a 403 with
 *     the deny reason;
 *   - a gateway-style ext_authz call decides, over HTTP /authz and over Envoy's gRPC
 *     Authorization/Check (allow with the stamped headers, deny), with gRPC health SERVING.
 *
 * Needs docker with a reachable engine, kind, kubectl and helm; skips with the list of what is
 * missing otherwise (as on the development machines). KEEP_KIND_CLUSTER=1 keeps the cluster.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H, VP_AUDIENCE } from '../../runtime/lib/brand.js';
import { presentationFor, type AgentIdentity } from '../../runtime/identity/client.js';
import { asHttp, checkClient, checkRequest } from '../../runtime/control-plane/grpc/testing.js';
import { cluster, eventually, missingTools, sh, type Cluster } from './cluster.js';
import { ROOT } from './deploy-files.js';

const IMAGE = 'writ:e2e';
const NS = 'writ-system';
const RELEASE = 'writ';
/** The chart's fullname: the release name, as it already contains the chart name. */
const FULL = RELEASE;
const why = await missingTools();

const agentPod = (name: string, agent: string) => `
apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: agents
  labels: { writ.io/agent: "true", writ.io/agent-name: ${agent} }
spec:
  containers:
    - name: agent
      image: ${IMAGE}
      imagePullPolicy: Never
      command: [node, -e, "setInterval(() => {}, 1 << 30)"]
`;

/** The in-cluster `search` tool of crds/examples (upstream search.tools.svc:8080): an echo server. */
const SEARCH_TOOL = `
apiVersion: apps/v1
kind: Deployment
metadata: { name: search, namespace: tools }
spec:
  replicas: 1
  selector: { matchLabels: { app: search } }
  template:
    metadata: { labels: { app: search } }
    spec:
      containers:
        - name: echo
          image: ${IMAGE}
          imagePullPolicy: Never
          command: [node, -e, "require('http').createServer((q, s) => s.end('search says ' + q.url)).listen(8080)"]
          ports: [{ containerPort: 8080 }]
          readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 2 }
---
apiVersion: v1
kind: Service
metadata: { name: search, namespace: tools }
spec:
  selector: { app: search }
  ports: [{ port: 8080, targetPort: 8080 }]
`;

/** Run inside the agent pod: one GET through $HTTP_PROXY (the injected env) with the VP. */
const PROXY_CALL = `
const [vp, target, denyHeader] = process.argv.slice(1);
const p = new URL(process.env.HTTP_PROXY);
const req = require('http').request({ host: p.hostname, port: Number(p.port || 80), method: 'GET', path: target,
  headers: { host: new URL(target).host, 'proxy-authorization': 'Bearer ' + vp } }, (res) => {
  let body = '';
  res.on('data', (c) => (body += c));
  res.on('end', () => console.log(JSON.stringify({ status: res.statusCode, deny: res.headers[denyHeader] ?? null, body })));
});
req.on('error', (e) => console.log(JSON.stringify({ error: e.message })));
req.end();
`;

describe.skipIf(why !== undefined)(`kind e2e${why ? ` (skipped: ${why})` : ''}`, { timeout: 10 * 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-kind-'));
  const name = `writ-e2e-${process.pid}`;
  let k: Cluster;
  let identityUrl = '';
  const closers: (() => void)[] = [];

  beforeAll(async () => {
    await sh('docker', ['build', '-t', IMAGE, ROOT], { timeoutMs: 20 * 60_000 });
    const kubeconfig = join(dir, 'kubeconfig');
    await sh('kind', ['create', 'cluster', '--name', name, '--config', join(ROOT, 'kind-config.yaml'), '--kubeconfig', kubeconfig, '--wait', '180s']);
    k = cluster(name, kubeconfig);
    await sh('kind', ['load', 'docker-image', IMAGE, '--name', name]);
    await k.helm([
      'install',
      RELEASE,
      join(ROOT, 'charts', 'writ'),
      '--namespace',
      NS,
      '--create-namespace',
      '--wait',
      '--timeout',
      '10m',
      '--set',
      'image.repository=writ',
      '--set',
      'image.tag=e2e',
      '--set',
      'image.pullPolicy=Never',
      '--set',
      'controlPlane.replicas=1',
      '--set',
      'identity.replicas=1',
      '--set',
      'webhook.replicas=1',
    ]);
    for (const ns of ['agents', 'tools', 'models']) await k.kubectl(['create', 'namespace', ns]);
    // The application namespace the webhooks see (webhook.namespaceLabel).
    await k.kubectl(['label', 'namespace', 'agents', 'writ.io/agents=enabled']);
    const idp = await k.portForward(NS, `svc/${FULL}-identity`, 8090);
    closers.push(idp.close);
    identityUrl = `http://127.0.0.1:${idp.port}`;
    // The example governed agents are owned by employees of the example directory.
    const seed = await fetch(`${identityUrl}/v1/directory/sync`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: readFileSync(join(ROOT, 'crds/examples/seed/directory.json')),
    });
    expect(seed.status).toBe(200);
    const applied = await k.kubectl(['apply', '-R', '-f', join(ROOT, 'crds/examples')], { allowFail: true });
    expect(applied.code, applied.stderr).toBe(0);
    expect((await k.apply(SEARCH_TOOL)).code).toBe(0);
    await k.kubectl(['-n', 'tools', 'rollout', 'status', 'deploy/search', '--timeout=180s']);
    // The operator projects the AgentPolicies into identity-authority agents.
    await eventually('the operator to register research-agent', async () =>
      (await fetch(`${identityUrl}/v1/agents/research-agent`)).status === 200 ? true : undefined,
    );
  }, 40 * 60_000);

  afterAll(async () => {
    for (const c of closers) c();
    if (k && process.env.KEEP_KIND_CLUSTER !== '1') await sh('kind', ['delete', 'cluster', '--name', name], { allowFail: true });
    rmSync(dir, { recursive: true, force: true });
  });

  let vp = '';

  it('a provisioned agent pod is admitted and gets the proxy env', async () => {
    const prov = await fetch(`${identityUrl}/v1/agents/research-agent/provision`, { method: 'POST' });
    expect(prov.status).toBe(200);
    const identity = (await prov.json()) as AgentIdentity;
    vp = await presentationFor(identity, { audience: VP_AUDIENCE, ttlSeconds: 1800 });

    const r = await k.apply(agentPod('research-agent', 'research-agent'));
    expect(r.code, r.stderr).toBe(0);
    await k.kubectl(['-n', 'agents', 'wait', '--for=condition=Ready', 'pod/research-agent', '--timeout=180s']);
    const pod = JSON.parse((await k.kubectl(['-n', 'agents', 'get', 'pod', 'research-agent', '-o', 'json'])).stdout) as {
      spec: { containers: { env?: { name: string; value?: string }[] }[] };
    };
    const env = Object.fromEntries((pod.spec.containers[0]!.env ?? []).map((e) => [e.name, e.value]));
    expect(env.HTTPS_PROXY).toBe(`http://${FULL}-proxy.${NS}.svc:80`);
    expect(env.HTTP_PROXY).toBe(env.HTTPS_PROXY);
    expect(env.NO_PROXY).toContain('kubernetes.default.svc');
  });

  it('a pod of an unprovisioned agent, and of an unknown one, is refused', async () => {
    const fresh = await k.apply(agentPod('summarizer', 'summarizer'));
    expect(fresh.code).not.toBe(0);
    expect(fresh.stderr).toMatch(/denied the request[\s\S]*"summarizer" is not provisioned/);
    const ghost = await k.apply(agentPod('ghost', 'ghost-agent'));
    expect(ghost.code).not.toBe(0);
    expect(ghost.stderr).toMatch(/"ghost-agent" is not registered/);
  });

  it('from the agent pod, an allowed egress goes through the proxy and a denied one is 403', async () => {
    const call = async (target: string) => {
      const r = await k.kubectl(['-n', 'agents', 'exec', 'research-agent', '--', 'node', '-e', PROXY_CALL, vp, target, H.denyReason]);
      return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { status?: number; deny?: string | null; body?: string; error?: string };
    };
    const allowed = await eventually('the search tool through the proxy', async () => {
      const r = await call('http://search.tools.svc:8080/q?x=1');
      return r.status === 200 ? r : undefined;
    });
    expect(allowed.body).toBe('search says /q?x=1');
    const denied = await call('http://orders.default.svc:8080/orders');
    expect(denied.status).toBe(403);
    expect(denied.deny).toBeTruthy();
  });

  it('a gateway ext_authz call to /authz decides', async () => {
    const pf = await k.portForward(NS, `svc/${FULL}-control-plane`, 9191);
    closers.push(pf.close);
    const authz = (headers: Record<string, string>) => fetch(`http://127.0.0.1:${pf.port}/authz`, { headers });
    const ingress = await authz({ [H.service]: 'web' });
    expect(ingress.status).toBe(200);
    const egress = {
      [H.actor]: 'research-agent',
      [H.onBehalfOf]: 'alice@example.com',
      [H.task]: 't-1',
      [H.targetKind]: 'tool',
      [H.action]: 'search:query',
      [H.resource]: 'q',
    };
    const allow = await authz({ ...egress, [H.service]: 'search' });
    expect(allow.status).toBe(200);
    expect(allow.headers.get(H.upstream)).toBe('search.tools.svc:8080');
    expect(allow.headers.get(H.actor)).toBe('research-agent');
    const deny = await authz({ ...egress, [H.service]: 'orders' });
    expect(deny.status).toBe(403);
    expect((await authz({ [H.service]: 'no-such-service' })).status).toBe(403);
  });

  it('a gateway gRPC ext_authz Check decides the same, and gRPC health is SERVING', async () => {
    const pf = await k.portForward(NS, `svc/${FULL}-control-plane`, 9192);
    closers.push(pf.close);
    const client = checkClient(pf.port);
    closers.push(() => client.close());
    expect(await client.health()).toBe(1);
    const egress = {
      [H.actor]: 'research-agent',
      [H.onBehalfOf]: 'alice@example.com',
      [H.task]: 't-1',
      [H.targetKind]: 'tool',
      [H.action]: 'search:query',
      [H.resource]: 'q',
    };
    const allow = asHttp(
      await client.check(checkRequest({ method: 'GET', path: '/q', host: 'search.tools.svc:8080', headers: { ...egress, [H.service]: 'search' } })),
    );
    expect(allow.status).toBe(200);
    expect(allow.headers[H.upstream]).toBe('search.tools.svc:8080');
    const deny = asHttp(
      await client.check(checkRequest({ method: 'GET', path: '/orders', host: 'orders.default.svc:8080', headers: { ...egress, [H.service]: 'orders' } })),
    );
    expect(deny.status).toBe(403);
  });
});

it.skipIf(why === undefined)('kind e2e prerequisites', (ctx) => {
  ctx.skip(`kind e2e skipped: ${why}`);
});
