/**
 * The admission webhook over real HTTPS (a CA and server cert made by the openssl CLI in the
 * test), real AdmissionReview v1 bodies, and a real identity authority in-process: every SPEC 4.8
 * case, idempotent mutate, the unreachable-authority warning, bad bodies, cert reload.
 */
import https from 'node:https';
import net from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../runtime/store/factory.js';
import { startIdentityAuthority } from '../runtime/identity/server.js';
import { AGENT_LABEL, AGENT_NAME_ENV, AGENT_NAME_LABEL, type JsonPatchOp, type Pod } from './admission.js';
import { loadConfig } from '../runtime/lib/settings.js';
import { flagsToEnv, webhookSettings, type WebhookSettings } from './config.js';

const settingsOf = (argv: readonly string[], env: Record<string, string>) => webhookSettings(loadConfig({ ...env, ...flagsToEnv(argv) }));
import { startWebhook, type RunningWebhook } from './server.js';
import { makePki, type TestPki } from './tls-testing.js';

interface Reply {
  status: number;
  body: any;
}

function call(port: number, ca: string, path: string, body: string | Buffer, method = 'POST'): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      { host: '127.0.0.1', port, path, method, ca, servername: 'localhost', agent: false, headers: { 'content-type': 'application/json' } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {}
          resolve({ status: res.statusCode ?? 0, body: parsed });
        });
      },
    );
    req.on('error', reject);
    req.end(method === 'GET' ? undefined : body);
  });
}

let uidSeq = 0;
function reviewOf(pod: Pod, operation = 'CREATE'): string {
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: `uid-${++uidSeq}`,
      kind: { group: '', version: 'v1', kind: 'Pod' },
      resource: { group: '', version: 'v1', resource: 'pods' },
      requestKind: { group: '', version: 'v1', kind: 'Pod' },
      name: pod.metadata?.name,
      namespace: 'apps',
      operation,
      userInfo: { username: 'system:serviceaccount:kube-system:replicaset-controller' },
      object: { apiVersion: 'v1', kind: 'Pod', ...pod },
      oldObject: null,
      dryRun: false,
    },
  });
}

function agentPod(opts: { env?: { name: string; value?: string }[] | null; labels?: Record<string, string>; containers?: number } = {}): Pod {
  const containers = Array.from({ length: opts.containers ?? 1 }, (_, i) => {
    const c: Record<string, unknown> = { name: `c${i}`, image: 'agent:1' };
    if (opts.env !== null) c.env = structuredClone(opts.env ?? []);
    return c;
  });
  return { metadata: { name: 'p', namespace: 'apps', labels: { [AGENT_LABEL]: 'true', ...opts.labels } }, spec: { containers } } as Pod;
}

/** Applies the `add` operations a webhook returns, as the apiserver would. */
function applyPatch(pod: Pod, ops: JsonPatchOp[]): Pod {
  const out = structuredClone(pod) as any;
  for (const op of ops) {
    expect(op.op).toBe('add');
    const parts = op.path.split('/').slice(1);
    const last = parts.pop()!;
    const parent = parts.reduce((o, k) => o[k], out);
    if (last === '-') parent.push(op.value);
    else parent[last] = op.value;
  }
  return out;
}

const patchOf = (r: Reply): JsonPatchOp[] | undefined =>
  r.body.response.patch === undefined ? undefined : (JSON.parse(Buffer.from(r.body.response.patch, 'base64').toString('utf8')) as JsonPatchOp[]);

const PROXY = 'http://writ-proxy.writ-system.svc:80';

describe('admission webhook over HTTPS', () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-webhook-'));
  let pki: TestPki;
  let store: Store;
  let idp: Awaited<ReturnType<typeof startIdentityAuthority>>;
  let idpUrl: string;
  const hooks: RunningWebhook[] = [];

  async function hook(
    extra: string[] = [],
    files = { cert: join(dir, 'tls.crt'), key: join(dir, 'tls.key') },
  ): Promise<{ wh: RunningWebhook; s: WebhookSettings }> {
    const s = settingsOf(
      [
        '-addr',
        '127.0.0.1:0',
        '-health-addr',
        '127.0.0.1:0',
        '-idp-url',
        idpUrl,
        '-proxy-url',
        PROXY,
        '-tls-cert-file',
        files.cert,
        '-tls-key-file',
        files.key,
        ...extra,
      ],
      {},
    );
    const wh = await startWebhook(s);
    hooks.push(wh);
    return { wh, s };
  }

  let main: RunningWebhook;
  let settings: WebhookSettings;

  beforeAll(async () => {
    pki = makePki(dir, 'a');
    writeFileSync(join(dir, 'tls.crt'), pki.cert);
    writeFileSync(join(dir, 'tls.key'), pki.key);
    store = await openStore({ backend: 'memory' });
    idp = await startIdentityAuthority({ store, config: loadConfig({ IDP_ISSUER_HOST: 'idp.webhook.test' }), addr: '127.0.0.1:0' });
    idpUrl = `http://127.0.0.1:${idp.port}`;
    await idp.authority.whenReady();
    for (const name of ['ready-agent', 'fresh-agent']) {
      const r = await fetch(`${idpUrl}/v1/agents`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name, role: 'worker', capabilities: [] }),
      });
      expect(r.status).toBe(201);
    }
    expect((await fetch(`${idpUrl}/v1/agents/ready-agent/provision`, { method: 'POST' })).status).toBe(200);
    ({ wh: main, s: settings } = await hook());
  });

  afterAll(async () => {
    for (const h of hooks) await h.close();
    await idp?.close();
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  describe('/mutate', () => {
    it('injects HTTPS_PROXY, HTTP_PROXY and NO_PROXY into an agent container without env, as a JSONPatch', async () => {
      const pod = agentPod({ env: null });
      const r = await call(main.port, pki.ca, '/mutate', reviewOf(pod));
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({
        apiVersion: 'admission.k8s.io/v1',
        kind: 'AdmissionReview',
        response: { uid: `uid-${uidSeq}`, allowed: true, patchType: 'JSONPatch' },
      });
      const patched = applyPatch(pod, patchOf(r)!);
      expect(patched.spec!.containers![0]!.env).toEqual([
        { name: 'HTTPS_PROXY', value: PROXY },
        { name: 'HTTP_PROXY', value: PROXY },
        { name: 'NO_PROXY', value: settings.proxyEnv.NO_PROXY },
      ]);
      expect(settings.proxyEnv.NO_PROXY.split(',')).toEqual(expect.arrayContaining(['127.0.0.1', 'kubernetes.default.svc', 'kube-dns.kube-system.svc']));
    });

    it('is idempotent: the patched pod gets no second patch', async () => {
      const pod = agentPod({ env: [{ name: 'OPENAI_BASE_URL', value: 'http://127.0.0.1:8788/v1' }], containers: 2 });
      const first = await call(main.port, pki.ca, '/mutate', reviewOf(pod));
      const patched = applyPatch(pod, patchOf(first)!);
      for (const c of patched.spec!.containers!) expect(c.env!.map((e) => e.name)).toEqual(['OPENAI_BASE_URL', 'HTTPS_PROXY', 'HTTP_PROXY', 'NO_PROXY']);
      const second = await call(main.port, pki.ca, '/mutate', reviewOf(patched));
      expect(second.body.response).toEqual({ uid: `uid-${uidSeq}`, allowed: true });
    });

    it('leaves a container that sets HTTPS_PROXY alone and adds only the missing variables elsewhere', async () => {
      const pod = agentPod({ containers: 2 });
      pod.spec!.containers![0]!.env = [{ name: 'HTTPS_PROXY', value: 'http://mine:3128' }];
      pod.spec!.containers![1]!.env = [{ name: 'NO_PROXY', value: 'internal.example' }];
      const r = await call(main.port, pki.ca, '/mutate', reviewOf(pod));
      const ops = patchOf(r)!;
      expect(ops.every((o) => o.path.startsWith('/spec/containers/1/env/'))).toBe(true);
      const patched = applyPatch(pod, ops);
      expect(patched.spec!.containers![0]!.env).toEqual([{ name: 'HTTPS_PROXY', value: 'http://mine:3128' }]);
      expect(patched.spec!.containers![1]!.env).toEqual([
        { name: 'NO_PROXY', value: 'internal.example' },
        { name: 'HTTPS_PROXY', value: PROXY },
        { name: 'HTTP_PROXY', value: PROXY },
      ]);
    });

    it('puts init containers behind the proxy too: they run the code of the agent before the main ones', async () => {
      const pod = agentPod({ env: null });
      pod.spec!.initContainers = [{ name: 'fetch', env: [{ name: 'X', value: '1' }] }, { name: 'setup' }];
      const patched = applyPatch(pod, patchOf(await call(main.port, pki.ca, '/mutate', reviewOf(pod)))!);
      expect(patched.spec!.initContainers![0]!.env!.map((e) => e.name)).toEqual(['X', 'HTTPS_PROXY', 'HTTP_PROXY', 'NO_PROXY']);
      expect(patched.spec!.initContainers![1]!.env).toEqual([
        { name: 'HTTPS_PROXY', value: PROXY },
        { name: 'HTTP_PROXY', value: PROXY },
        { name: 'NO_PROXY', value: settings.proxyEnv.NO_PROXY },
      ]);
      expect((await call(main.port, pki.ca, '/mutate', reviewOf(patched))).body.response).toEqual({ uid: `uid-${uidSeq}`, allowed: true });
    });

    it('does not patch a pod without writ.io/agent=true', async () => {
      const pod = agentPod({ env: null, labels: { [AGENT_LABEL]: 'false' } });
      const r = await call(main.port, pki.ca, '/mutate', reviewOf(pod));
      expect(r.body.response).toEqual({ uid: `uid-${uidSeq}`, allowed: true });
    });

    it('admits an unreadable pod unpatched with a warning (failure policy Ignore)', async () => {
      const r = await call(
        main.port,
        pki.ca,
        '/mutate',
        reviewOf({ metadata: { labels: { [AGENT_LABEL]: 'true' } }, spec: { containers: 'nope' } } as unknown as Pod),
      );
      expect(r.status).toBe(200);
      expect(r.body.response).toMatchObject({ allowed: true, warnings: ['not mutated: spec.containers is not a list'] });
      expect(r.body.response.patch).toBeUndefined();
    });
  });

  describe('/validate', () => {
    it('admits a provisioned agent named by env WRIT_AGENT_NAME', async () => {
      const r = await call(main.port, pki.ca, '/validate', reviewOf(agentPod({ env: [{ name: AGENT_NAME_ENV, value: 'ready-agent' }] })));
      expect(r.body.response).toEqual({ uid: `uid-${uidSeq}`, allowed: true });
    });

    it('admits a provisioned agent named by label writ.io/agent-name', async () => {
      const r = await call(main.port, pki.ca, '/validate', reviewOf(agentPod({ labels: { [AGENT_NAME_LABEL]: 'ready-agent' } })));
      expect(r.body.response).toEqual({ uid: `uid-${uidSeq}`, allowed: true });
    });

    it('refuses an agent that is registered but not provisioned', async () => {
      const r = await call(main.port, pki.ca, '/validate', reviewOf(agentPod({ labels: { [AGENT_NAME_LABEL]: 'fresh-agent' } })));
      expect(r.body.response).toMatchObject({ allowed: false, status: { code: 403 } });
      expect(r.body.response.status.message).toContain('"fresh-agent" is not provisioned');
    });

    it('refuses an agent the identity authority does not know (404)', async () => {
      const r = await call(main.port, pki.ca, '/validate', reviewOf(agentPod({ env: [{ name: AGENT_NAME_ENV, value: 'ghost' }] })));
      expect(r.body.response).toMatchObject({ allowed: false, status: { code: 403 } });
      expect(r.body.response.status.message).toContain('"ghost" is not registered');
    });

    it('refuses an agent pod with no name, with a name set by reference only, or with disagreeing names', async () => {
      const none = await call(main.port, pki.ca, '/validate', reviewOf(agentPod()));
      expect(none.body.response.allowed).toBe(false);
      expect(none.body.response.status.message).toContain(`set env ${AGENT_NAME_ENV} or label ${AGENT_NAME_LABEL}`);
      const indirect = agentPod();
      indirect.spec!.containers![0]!.env = [{ name: AGENT_NAME_ENV, valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }];
      expect((await call(main.port, pki.ca, '/validate', reviewOf(indirect))).body.response.allowed).toBe(false);
      const clash = agentPod({ env: [{ name: AGENT_NAME_ENV, value: 'ready-agent' }], labels: { [AGENT_NAME_LABEL]: 'fresh-agent' } });
      const r = await call(main.port, pki.ca, '/validate', reviewOf(clash));
      expect(r.body.response.allowed).toBe(false);
      expect(r.body.response.status.message).toContain('disagree');
      const bad = await call(main.port, pki.ca, '/validate', reviewOf(agentPod({ labels: { [AGENT_NAME_LABEL]: '../admin' } })));
      expect(bad.body.response).toMatchObject({ allowed: false, status: { code: 403 } });
      // An init container names its agent like any other container.
      const init = agentPod({ env: [{ name: AGENT_NAME_ENV, value: 'ready-agent' }] });
      init.spec!.initContainers = [{ name: 'i', env: [{ name: AGENT_NAME_ENV, value: 'ghost' }] }];
      const r2 = await call(main.port, pki.ca, '/validate', reviewOf(init));
      expect(r2.body.response.allowed).toBe(false);
      expect(r2.body.response.status.message).toContain('containers name different agents');
      // A name listed twice runs with its last entry (the kubelet's rule): here a reference.
      const twice = agentPod({ env: [{ name: AGENT_NAME_ENV, value: 'ready-agent' }] });
      twice.spec!.containers![0]!.env!.push({ name: AGENT_NAME_ENV, valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } } as never);
      const r3 = await call(main.port, pki.ca, '/validate', reviewOf(twice));
      expect(r3.body.response.allowed).toBe(false);
      expect(r3.body.response.status.message).toContain('set from a reference');
    });

    it('admits pods that are not agents without asking, and DELETE reviews', async () => {
      const r = await call(main.port, pki.ca, '/validate', reviewOf(agentPod({ labels: { [AGENT_LABEL]: 'no' } })));
      expect(r.body.response).toEqual({ uid: `uid-${uidSeq}`, allowed: true });
      const del = JSON.parse(reviewOf(agentPod())) as { request: Record<string, unknown> };
      del.request.operation = 'DELETE';
      del.request.object = null;
      expect((await call(main.port, pki.ca, '/validate', JSON.stringify(del))).body.response.allowed).toBe(true);
    });

    it('denies an unreadable pod (failure policy Fail)', async () => {
      const r = await call(main.port, pki.ca, '/validate', reviewOf({ metadata: { labels: { [AGENT_LABEL]: 'true' } } } as Pod));
      expect(r.body.response).toMatchObject({ allowed: false, status: { code: 400, message: 'spec.containers is not a list' } });
      // A label value that is no string is read as no value at all, never coerced (true is not 'true').
      const odd = agentPod({ env: [{ name: AGENT_NAME_ENV, value: 'ready-agent' }] }) as unknown as { metadata: { labels: Record<string, unknown> } };
      odd.metadata.labels[AGENT_LABEL] = true;
      const coerced = await call(main.port, pki.ca, '/validate', reviewOf(odd as unknown as Pod));
      expect(coerced.body.response).toMatchObject({ allowed: false, status: { code: 400, message: `metadata.labels["${AGENT_LABEL}"] is not a string` } });
    });

    it('with -require-provisioned=false admits an unprovisioned agent with a warning, still refuses an unknown one', async () => {
      const { wh } = await hook(['-require-provisioned=false']);
      const fresh = await call(wh.port, pki.ca, '/validate', reviewOf(agentPod({ labels: { [AGENT_NAME_LABEL]: 'fresh-agent' } })));
      expect(fresh.body.response).toMatchObject({ allowed: true, warnings: [expect.stringContaining('not provisioned')] });
      const ghost = await call(wh.port, pki.ca, '/validate', reviewOf(agentPod({ labels: { [AGENT_NAME_LABEL]: 'ghost' } })));
      expect(ghost.body.response.allowed).toBe(false);
    });

    it('admits with a warning when the identity authority is unreachable (the documented fail-open)', async () => {
      // A port that was just free: nothing listens there.
      const free = await new Promise<number>((resolve) => {
        const s = net.createServer().listen(0, '127.0.0.1', () => {
          const p = (s.address() as net.AddressInfo).port;
          s.close(() => resolve(p));
        });
      });
      const s = settingsOf(['-idp-url', `http://127.0.0.1:${free}`], {
        WEBHOOK_ADDR: '127.0.0.1:0',
        WEBHOOK_HEALTH_ADDR: '127.0.0.1:0',
        WEBHOOK_PROXY_URL: PROXY,
        WEBHOOK_TLS_CERT_FILE: join(dir, 'tls.crt'),
        WEBHOOK_TLS_KEY_FILE: join(dir, 'tls.key'),
      });
      const wh = await startWebhook(s);
      hooks.push(wh);
      const r = await call(wh.port, pki.ca, '/validate', reviewOf(agentPod({ labels: { [AGENT_NAME_LABEL]: 'ready-agent' } })));
      expect(r.body.response).toMatchObject({ allowed: true, warnings: [expect.stringContaining('identity authority unreachable')] });
    });
  });

  describe('bad requests get a clear error, never a crash', () => {
    const cases: [string, string, number, string | RegExp][] = [
      ['not JSON', '{"apiVersion":', 400, 'body is not valid JSON'],
      ['a JSON array', '[]', 400, 'body must be an AdmissionReview object'],
      [
        'AdmissionReview v1beta1',
        JSON.stringify({ apiVersion: 'admission.k8s.io/v1beta1', kind: 'AdmissionReview', request: { uid: 'x' } }),
        400,
        /admission\.k8s\.io\/v1/,
      ],
      ['no request', JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview' }), 400, 'AdmissionReview.request is missing'],
      ['no uid', JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { object: {} } }), 400, /uid/],
    ];
    for (const [what, body, status, msg] of cases) {
      it(`${what} -> ${status}`, async () => {
        for (const path of ['/mutate', '/validate']) {
          const r = await call(main.port, pki.ca, path, body);
          expect(r.status).toBe(status);
          if (typeof msg === 'string') expect(r.body.error).toBe(msg);
          else expect(r.body.error).toMatch(msg);
        }
      });
    }

    it('wrong method, unknown path, oversize body', async () => {
      expect((await call(main.port, pki.ca, '/mutate', '', 'GET')).status).toBe(405);
      expect((await call(main.port, pki.ca, '/nope', '{}')).status).toBe(404);
      const big = await call(main.port, pki.ca, '/validate', Buffer.alloc(5 * 1024 * 1024, 0x20)).catch((e: Error) => ({ status: -1, body: e.message }));
      // 413, or the server closed the connection mid-upload after answering it.
      expect([413, -1]).toContain(big.status);
      // Still serving.
      const ok = await call(main.port, pki.ca, '/validate', reviewOf(agentPod({ labels: { [AGENT_NAME_LABEL]: 'ready-agent' } })));
      expect(ok.body.response.allowed).toBe(true);
    });

    it('a non-Pod review is not mutated and is refused by validate', async () => {
      const cm = JSON.parse(reviewOf(agentPod())) as { request: Record<string, unknown> };
      cm.request.kind = { group: '', version: 'v1', kind: 'ConfigMap' };
      const m = await call(main.port, pki.ca, '/mutate', JSON.stringify(cm));
      expect(m.body.response).toMatchObject({ allowed: true, warnings: ['not mutated: expected a core/v1 Pod, got ConfigMap'] });
      const v = await call(main.port, pki.ca, '/validate', JSON.stringify(cm));
      expect(v.body.response).toMatchObject({ allowed: false, status: { code: 400 } });
    });
  });

  it('serves /healthz and /readyz on the health address', async () => {
    const h = await fetch(`http://127.0.0.1:${main.healthPort}/healthz`);
    expect(h.status).toBe(200);
    expect(await h.json()).toEqual({ ok: true });
    expect((await fetch(`http://127.0.0.1:${main.healthPort}/readyz`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${main.healthPort}/other`)).status).toBe(404);
  });

  it('reloads the certificate when the mounted files change', async () => {
    const files = { cert: join(dir, 'rot.crt'), key: join(dir, 'rot.key') };
    writeFileSync(files.cert, pki.cert);
    writeFileSync(files.key, pki.key);
    const { wh } = await hook(['-cert-reload-ms', '50'], files);
    const body = reviewOf(agentPod({ labels: { [AGENT_LABEL]: 'no' } }));
    expect((await call(wh.port, pki.ca, '/validate', body)).status).toBe(200);

    const next = makePki(dir, 'b');
    // A half-written pair (new cert, old key) is not taken.
    writeFileSync(files.cert, next.cert);
    expect(wh.reloadCert()).toBe(false);
    expect((await call(wh.port, pki.ca, '/validate', body)).status).toBe(200);
    writeFileSync(files.key, next.key);
    // The poller picks it up: the new CA works, the old one no longer does.
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = await call(wh.port, next.ca, '/validate', body).catch(() => undefined);
      if (r?.status === 200) break;
      if (Date.now() > deadline) throw new Error('certificate was not reloaded');
      await new Promise((res) => setTimeout(res, 50));
    }
    await expect(call(wh.port, pki.ca, '/validate', body)).rejects.toThrow(/self[- ]signed|unable to verify|certificate/i);
  });

  it('refuses to start without a readable cert, and on bad settings', async () => {
    const base = ['-addr', '127.0.0.1:0', '-health-addr', '127.0.0.1:0', '-idp-url', idpUrl, '-proxy-url', PROXY];
    await expect(startWebhook(settingsOf([...base, '-tls-cert-file', join(dir, 'missing.crt'), '-tls-key-file', join(dir, 'tls.key')], {}))).rejects.toThrow(
      /cannot load TLS cert/,
    );
    expect(() => settingsOf(['-addr', ':8443'], { WEBHOOK_PROXY_URL: PROXY })).toThrow(/-idp-url \/ AGENT_IDP_URL is required/);
    expect(() => settingsOf([...base, '-bogus', 'x'], {})).toThrow(/unknown flag -bogus/);
    expect(() => settingsOf([...base, '-require-provisioned=maybe'], {})).toThrow(/REQUIRE_PROVISIONED must be a boolean/);
    expect(() => settingsOf(['-idp-url', idpUrl, '-proxy-url', 'https://proxy:443'], {})).toThrow(/http:\/\/ URL/);
    expect(settingsOf(['-idp-url', idpUrl, '-proxy-url', PROXY, '-require-provisioned'], { REQUIRE_PROVISIONED: 'false' }).requireProvisioned).toBe(true);
    expect(settingsOf(['--idp-url=' + idpUrl], { WEBHOOK_PROXY_URL: PROXY, REQUIRE_PROVISIONED: 'false' })).toMatchObject({
      addr: ':8443',
      healthAddr: ':8080',
      requireProvisioned: false,
    });
  });
});
