/**
 * The admission webhook's pure core (SPEC 4.8): reading an AdmissionReview v1, the mutate patch
 * (egress proxy env for agent containers) and the validate verdict (is the named agent
 * provisioned?). No I/O here: the server fetches the agent record and hands the answer in.
 */
import { envName, label } from '../runtime/lib/brand.js';

export const AGENT_LABEL = label('agent');
export const AGENT_NAME_LABEL = label('agent-name');
export const AGENT_NAME_ENV = envName('AGENT_NAME');
export const PROXY_VARS = ['HTTPS_PROXY', 'HTTP_PROXY', 'NO_PROXY'] as const;
/** The identity authority's agent-name rule (runtime/identity/schemas.ts NAME_RE, 253 chars). */
const AGENT_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._@:-]{0,252}$/;

export interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: unknown;
}
export interface Container {
  name?: string;
  env?: EnvVar[];
}
export interface Pod {
  metadata?: { name?: string; generateName?: string; namespace?: string; labels?: Record<string, string> };
  spec?: { containers?: Container[]; initContainers?: Container[]; ephemeralContainers?: Container[] };
}

/** The container lists of a pod spec: every one of them runs the agent's code. */
const CONTAINER_LISTS = ['containers', 'initContainers', 'ephemeralContainers'] as const;

/** Each container with the JSON Pointer of its list (`/spec/initContainers`) and its index. */
function eachContainer(pod: Pod): { c: Container; at: string }[] {
  return CONTAINER_LISTS.flatMap((list) => (pod.spec?.[list] ?? []).map((c, i) => ({ c, at: `/spec/${list}/${i}` })));
}

export interface AdmissionRequest {
  uid: string;
  kind?: { group?: string; version?: string; kind?: string };
  operation?: string;
  namespace?: string;
  object?: unknown;
}

export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: { code: number; message: string };
  patchType?: 'JSONPatch';
  patch?: string;
  warnings?: string[];
}

export interface AdmissionReviewOut {
  apiVersion: 'admission.k8s.io/v1';
  kind: 'AdmissionReview';
  response: AdmissionResponse;
}

export type JsonPatchOp = { op: 'add'; path: string; value: unknown };

/** Parses an AdmissionReview v1 body; a string error says what is wrong (answered 400). */
export function parseReview(raw: string): AdmissionRequest | string {
  let body: unknown;
  try {
    body = JSON.parse(raw);
  } catch {
    return 'body is not valid JSON';
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'body must be an AdmissionReview object';
  const b = body as Record<string, unknown>;
  if (b.apiVersion !== 'admission.k8s.io/v1' || b.kind !== 'AdmissionReview') {
    return 'body must be an AdmissionReview with apiVersion admission.k8s.io/v1';
  }
  const req = b.request;
  if (typeof req !== 'object' || req === null || Array.isArray(req)) return 'AdmissionReview.request is missing';
  const uid = (req as Record<string, unknown>).uid;
  if (typeof uid !== 'string' || uid === '' || uid.length > 256) return 'AdmissionReview.request.uid must be a non-empty string';
  return req as AdmissionRequest;
}

export function review(response: AdmissionResponse): AdmissionReviewOut {
  return { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response };
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The pod in the request, or a reason it is not one this webhook can read. */
export function podOf(req: AdmissionRequest): Pod | string {
  if (req.kind && req.kind.kind !== undefined && (req.kind.kind !== 'Pod' || (req.kind.group ?? '') !== '')) {
    return `expected a core/v1 Pod, got ${req.kind.group ? `${req.kind.group}/` : ''}${req.kind.kind}`;
  }
  const o = req.object;
  if (!isObj(o)) return 'request.object is not a Pod';
  if (o.metadata !== undefined && !isObj(o.metadata)) return 'metadata is not an object';
  const labels = (o.metadata as Record<string, unknown> | undefined)?.labels;
  if (labels !== undefined && !isObj(labels)) return 'metadata.labels is not an object';
  // The API server sends strings only: anything else is a request this webhook cannot trust to read.
  for (const [k, v] of Object.entries(labels ?? {})) if (typeof v !== 'string') return `metadata.labels[${JSON.stringify(k)}] is not a string`;
  if (!isObj(o.spec) || !Array.isArray(o.spec.containers)) return 'spec.containers is not a list';
  for (const list of CONTAINER_LISTS) {
    const cs = o.spec[list];
    if (cs === undefined || cs === null) continue;
    if (!Array.isArray(cs)) return `spec.${list} is not a list`;
    for (const [i, c] of (cs as unknown[]).entries()) {
      if (!isObj(c)) return `spec.${list}[${i}] is not an object`;
      if (c.env !== undefined && c.env !== null && !Array.isArray(c.env)) return `spec.${list}[${i}].env is not a list`;
      for (const e of (c.env as unknown[] | undefined | null) ?? [])
        if (!isObj(e) || typeof e.name !== 'string') return `spec.${list}[${i}].env has an entry without a name`;
    }
  }
  return o as Pod;
}

/** True when the pod carries `writ.io/agent=true` (the webhook configuration selects on it too). */
export const isAgentPod = (pod: Pod): boolean => pod.metadata?.labels?.[AGENT_LABEL] === 'true';

/**
 * The patch that puts every container lacking HTTPS_PROXY behind the egress proxy: the proxy
 * variables it does not set yet are appended. A pod already patched needs nothing (idempotent).
 */
export function mutatePatch(pod: Pod, proxyEnv: Record<(typeof PROXY_VARS)[number], string>): JsonPatchOp[] {
  const ops: JsonPatchOp[] = [];
  for (const { c, at } of eachContainer(pod)) {
    const env = c.env ?? [];
    const names = new Set(env.map((e) => e.name));
    if (names.has('HTTPS_PROXY')) continue;
    const add = PROXY_VARS.filter((n) => !names.has(n)).map((n) => ({ name: n, value: proxyEnv[n] }));
    if (c.env === undefined || c.env === null) ops.push({ op: 'add', path: `${at}/env`, value: add });
    else for (const v of add) ops.push({ op: 'add', path: `${at}/env/-`, value: v });
  }
  return ops;
}

/** The agent name from env WRIT_AGENT_NAME (a literal value) or the label; a string error when absent or ambiguous. */
export function agentNameOf(pod: Pod): { name: string } | { error: string } {
  const fromEnv = new Set<string>();
  let indirect = false;
  for (const { c } of eachContainer(pod)) {
    // A name listed twice takes its last entry, as the kubelet does.
    const e = (c.env ?? []).findLast((x) => x.name === AGENT_NAME_ENV);
    if (!e) continue;
    if (typeof e.value === 'string' && e.value !== '') fromEnv.add(e.value);
    else indirect = true;
  }
  const fromLabel = pod.metadata?.labels?.[AGENT_NAME_LABEL];
  if (fromEnv.size > 1) return { error: `containers name different agents in ${AGENT_NAME_ENV}: ${[...fromEnv].sort().join(', ')}` };
  const envValue = [...fromEnv][0];
  if (envValue !== undefined && fromLabel !== undefined && fromLabel !== envValue) {
    return { error: `${AGENT_NAME_ENV}=${JSON.stringify(envValue)} and label ${AGENT_NAME_LABEL}=${JSON.stringify(fromLabel)} disagree` };
  }
  const name = envValue ?? fromLabel;
  if (name === undefined || name === '') {
    return {
      error: indirect
        ? `${AGENT_NAME_ENV} is set from a reference the webhook cannot read; set label ${AGENT_NAME_LABEL} too`
        : `no agent name: set env ${AGENT_NAME_ENV} or label ${AGENT_NAME_LABEL}`,
    };
  }
  if (!AGENT_NAME_RE.test(name)) return { error: `agent name ${JSON.stringify(name)} is not a valid agent name` };
  return { name };
}

/** What the identity authority said about the agent. */
export type AgentLookup =
  | { kind: 'found'; provisioned: boolean }
  | { kind: 'not-found' }
  /** Could not be asked (network error, timeout, 502/503/504): the one documented fail-open. */
  | { kind: 'unreachable'; why: string }
  /** It answered something else (another status, a body without a boolean `provisioned`): deny. */
  | { kind: 'bad-answer'; why: string };

/** The validate verdict for a named agent. */
export function validateVerdict(name: string, lookup: AgentLookup, requireProvisioned: boolean): Omit<AdmissionResponse, 'uid'> {
  const deny = (message: string) => ({ allowed: false, status: { code: 403, message } });
  switch (lookup.kind) {
    case 'not-found':
      return deny(`agent ${JSON.stringify(name)} is not registered with the identity authority`);
    case 'bad-answer':
      return deny(`identity authority answer for agent ${JSON.stringify(name)} unusable: ${lookup.why}`);
    case 'unreachable':
      return {
        allowed: true,
        warnings: [`identity authority unreachable (${lookup.why}); agent ${JSON.stringify(name)} admitted without the provisioning check`],
      };
    case 'found':
      if (lookup.provisioned) return { allowed: true };
      if (!requireProvisioned) return { allowed: true, warnings: [`agent ${JSON.stringify(name)} is not provisioned (admitted: require-provisioned is off)`] };
      return deny(`agent ${JSON.stringify(name)} is not provisioned (POST /v1/agents/${name}/provision first)`);
  }
}
