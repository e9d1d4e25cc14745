import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type RunningControlPlane } from '../runtime/control-plane/server.js';
import { openTestPglite } from '../runtime/store/testing.js';
import type { Store } from '../runtime/store/factory.js';
import { loadConfig } from '../runtime/lib/settings.js';
import { operatorConfig, startOperator } from './main.js';

const operatorConfigOf = (env: Record<string, string>) => operatorConfig(loadConfig(env));
import { startFakeApiServer, type FakeApiServer } from './testing/fake-apiserver.js';

const svc = (name: string, upstream: string, ns = 'default') => ({
  apiVersion: 'writ.io/v1alpha1',
  kind: 'RegistryService',
  metadata: { name, namespace: ns },
  spec: { upstream },
});

describe('operator process', () => {
  it('checks its settings before starting', () => {
    expect(() => operatorConfigOf({})).toThrow(/WRIT_MGMT_URL is required/);
    expect(() => operatorConfigOf({ WRIT_MGMT_URL: 'nope' })).toThrow(/WRIT_MGMT_URL must be a URL/);
    expect(() => operatorConfigOf({ WRIT_MGMT_URL: 'http://m:8181', WRIT_CLUSTER_NAME: 'Bad Name' })).toThrow(/DNS label/);
    expect(() => operatorConfigOf({ WRIT_MGMT_URL: 'http://m:8181', WRIT_POLICY_DIR: '/does/not/exist' })).toThrow(/WRIT_POLICY_DIR must name a folder/);
    expect(operatorConfigOf({ WRIT_MGMT_URL: 'http://m:8181', POD_NAME: 'op-0', POD_NAMESPACE: 'writ' })).toMatchObject({
      cluster: 'default',
      kubernetes: true,
      podName: 'op-0',
      podNamespace: 'writ',
    });
  });

  describe('Kubernetes and folder sources over the management API', () => {
    let store: Store;
    let cp: RunningControlPlane;
    let api: FakeApiServer;
    let dir: string;

    beforeAll(async () => {
      store = await openTestPglite();
      cp = await startControlPlane({ store, decisionAddr: '127.0.0.1:0', mgmtAddr: '127.0.0.1:0' });
      api = await startFakeApiServer();
      dir = mkdtempSync(join(tmpdir(), 'writ-operator-'));
    });
    afterAll(async () => {
      await api?.close();
      await cp?.close();
      await store?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it('both sources apply under their own owners through POST /v1/registry/apply', async () => {
      api.apply(svc('from-cluster', 'c.svc:1'));
      writeFileSync(join(dir, 'a.yaml'), `apiVersion: writ.io/v1alpha1\nkind: RegistryService\nmetadata: {name: from-folder}\nspec: {upstream: f.svc:1}\n`);
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [{ name: 't', server: api.url, skipTLSVerify: true }],
        users: [{ name: 'u', token: api.token }],
        contexts: [{ name: 'c', cluster: 't', user: 'u' }],
        currentContext: 'c',
      });
      const op = await startOperator(
        loadConfig({
          WRIT_MGMT_URL: `http://127.0.0.1:${cp.mgmtPort}`,
          WRIT_POLICY_DIR: dir,
          WRIT_CLUSTER_NAME: 'test',
          POD_NAME: 'op-0',
          POD_NAMESPACE: 'writ',
          OPERATOR_HEALTH_ADDR: '127.0.0.1:0',
        }),
        kc,
      );
      try {
        // Ready once the informers listed and the election told leader or standby.
        const health = `http://127.0.0.1:${op.ports!.health}`;
        expect((await fetch(`${health}/healthz`)).status).toBe(200);
        const until = Date.now() + 20_000;
        while ((await fetch(`${health}/readyz`)).status !== 200 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
        expect(await (await fetch(`${health}/readyz`)).json()).toEqual({ ready: true });
        const reg = cp.plane.registry;
        const end = Date.now() + 20_000;
        while (!(reg.get('from-cluster') && reg.get('from-folder')) && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
        expect(reg.ownerOf('from-cluster')).toBe('kubernetes:test');
        expect(reg.ownerOf('from-folder')).toBe(`folder:${dir}`);
        // The cluster CR carries the operator finalizer (deleting it withdraws the entry).
        const st = api.get('registryservices', 'default', 'from-cluster');
        expect(st?.metadata.finalizers).toEqual(['writ.io/withdraw']);
      } finally {
        await op.close();
      }
      // Closing released the Lease: a successor need not wait for it to expire.
      expect(api.get('leases', 'writ', 'writ-io-operator')!.spec.holderIdentity).toBe('');
    });

    it('an API server it cannot reach: alive, not ready, saying why', async () => {
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [{ name: 't', server: 'https://127.0.0.1:1', skipTLSVerify: true }],
        users: [{ name: 'u', token: 'x' }],
        contexts: [{ name: 'c', cluster: 't', user: 'u' }],
        currentContext: 'c',
      });
      const op = await startOperator(
        loadConfig({ WRIT_MGMT_URL: `http://127.0.0.1:${cp.mgmtPort}`, POD_NAME: 'op-1', POD_NAMESPACE: 'writ', OPERATOR_HEALTH_ADDR: '127.0.0.1:0' }),
        kc,
      );
      try {
        const health = `http://127.0.0.1:${op.ports!.health}`;
        expect((await fetch(`${health}/healthz`)).status).toBe(200);
        const r = await fetch(`${health}/readyz`);
        expect(r.status).toBe(503);
        expect(await r.json()).toEqual({
          ready: false,
          error: 'not ready',
          reasons: ['informers not synced yet', 'leader election: neither leader nor standby known yet'],
        });
      } finally {
        await op.close();
      }
    });
  });
});
