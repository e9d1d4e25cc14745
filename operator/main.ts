/**
 * The operator process (`docker run writ operator`, or `tsx operator/main.ts`): the Kubernetes
 * source (in-cluster config, or KUBECONFIG / ~/.kube/config) and, when WRIT_POLICY_DIR is set,
 * the folder source too; both apply through the control plane's management API and program
 * identity and governed agents at the identity authority.
 *
 *   WRIT_MGMT_URL       required: the control plane's management API (POST /v1/registry/apply)
 *   AGENT_IDP_URL       the identity authority; unset: identity and governed agents stay Pending
 *   WRIT_CLUSTER_NAME   registry owner `kubernetes:<name>` (default `default`)
 *   WRIT_KUBERNETES     false: no Kubernetes source (folder only)
 *   WRIT_POLICY_DIR     a folder of resources (owner `folder:<path>`)
 *   POD_NAME            Lease holder identity (default the host name, which is the pod name)
 *   POD_NAMESPACE       namespace of the leader-election Lease (default: the service account's)
 *   OPERATOR_HEALTH_ADDR  plain-HTTP /healthz (liveness) and /readyz (default `:8081`): ready once
 *                       the informers listed, leader election told leader or standby, and the
 *                       folder source's first apply is done
 *   WRIT_API_KEY        its credential when the management API has WRIT_API_AUTH=keys: a scoped key
 *                       needs registry:write and registry:owner:<each owner it applies as>, plus
 *                       identity:write, governance:write and identity:owner:<owner>,
 *                       governance:owner:<owner> for each (the chart passes the bootstrap key)
 */
import { existsSync, readFileSync } from 'node:fs';
import { KubeConfig } from '@kubernetes/client-node';
import { envName } from '../runtime/lib/brand.js';
import type { Config } from '../runtime/lib/config.js';
import { close as closeServer, listen } from '../runtime/lib/http.js';
import { isMain, runUntilSignal, type Closable } from '../runtime/lib/process.js';
import { createHealthServer, createReadiness } from '../runtime/lib/readiness.js';
import { createApplier } from './apply.js';
import { policyFolderConfig } from './folder/embedded.js';
import { startFolderSource, type FolderSource } from './folder/source.js';
import { startKubernetesSource, type KubernetesSource } from './kube/source.js';
import { httpIdentity, httpRegistry } from './ports.js';

const SA_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';

export interface OperatorConfig {
  mgmtUrl: string;
  idpUrl?: string;
  /** WRIT_API_KEY, presented to both listeners. */
  apiKey?: string;
  cluster: string;
  kubernetes: boolean;
  policyDir?: string;
  podName: string;
  podNamespace: string;
  /** OPERATOR_HEALTH_ADDR: /healthz and /readyz. */
  healthAddr: string;
}

/** The slices the operator reads: its own and the credential it presents. */
export type OperatorSlices = Pick<Config, 'operator' | 'auth'>;

/** Checks its settings (URLs are checked by loadConfig) before anything starts. */
export function operatorConfig(config: OperatorSlices): OperatorConfig {
  const o = config.operator;
  const mgmtUrl = o.mgmtUrl;
  if (!mgmtUrl) throw new Error(`${envName('MGMT_URL')} is required (the control plane's management API, e.g. http://writ-control-plane:8181)`);
  const cluster = o.cluster;
  if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(cluster)) throw new Error(`${envName('CLUSTER_NAME')} must be a DNS label, got ${JSON.stringify(cluster)}`);
  const folder = o.policyDir !== undefined ? policyFolderConfig({ policyDir: o.policyDir, examples: false }, config.auth) : undefined;
  const ns = o.podNamespace ?? (existsSync(SA_NAMESPACE) ? readFileSync(SA_NAMESPACE, 'utf8').trim() : 'default');
  return {
    mgmtUrl,
    idpUrl: o.idpUrl,
    apiKey: config.auth.apiKey,
    cluster,
    kubernetes: o.kubernetes,
    policyDir: folder?.dir,
    podName: o.podName,
    podNamespace: ns,
    healthAddr: o.healthAddr,
  };
}

export async function startOperator(
  config: OperatorSlices,
  kubeConfig?: KubeConfig,
): Promise<Closable & { kubernetes?: KubernetesSource; folder?: FolderSource }> {
  const cfg = operatorConfig(config);
  const registry = httpRegistry(cfg.mgmtUrl, fetch, cfg.apiKey);
  const identity = cfg.idpUrl ? httpIdentity(cfg.idpUrl, fetch, cfg.apiKey) : undefined;
  const applier = (owner: string) => createApplier({ owner, registry, identity });
  let kubernetes: KubernetesSource | undefined;
  let folder: FolderSource | undefined;
  // Liveness answers from the start; readiness once every source has done its first work.
  const readiness = createReadiness();
  const started = readiness.gate('starting: the folder source has not applied yet');
  const health = createHealthServer(readiness);
  const healthPort = await listen(health, cfg.healthAddr);
  try {
    if (cfg.kubernetes) {
      let kc = kubeConfig;
      if (!kc) {
        kc = new KubeConfig();
        kc.loadFromDefault();
      }
      const k = startKubernetesSource({ kubeConfig: kc, applier, cluster: cfg.cluster, identity: cfg.podName, leaseNamespace: cfg.podNamespace });
      kubernetes = k;
      const listed = readiness.gate('informers not synced yet');
      k.synced.then(listed, () => {});
      readiness.watch(() => (k.roleKnown() ? undefined : 'leader election: neither leader nor standby known yet'));
    }
    if (cfg.policyDir) {
      folder = startFolderSource({ dir: cfg.policyDir, applier });
      await folder.ready;
    }
  } catch (e) {
    await folder?.close();
    await kubernetes?.close();
    await closeServer(health);
    throw e;
  }
  started();
  return {
    kubernetes,
    folder,
    ports: { health: healthPort },
    async close() {
      readiness.gate('closing');
      await folder?.close();
      await kubernetes?.close();
      await closeServer(health);
    },
  };
}

if (isMain(import.meta.url)) void runUntilSignal('operator', (config) => startOperator(config));
