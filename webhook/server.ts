/**
 * The admission webhook's listeners (SPEC 4.8): `/mutate` and `/validate` over HTTPS on `addr`
 * (cert and key read from mounted files and re-read when they change, so a rotated Secret is
 * served without a restart), `/healthz` and `/readyz` in plain HTTP on `healthAddr`.
 *
 * Mutate never blocks a pod (its failure policy is Ignore): anything it cannot read is admitted
 * unpatched. Validate denies what it cannot read (failure policy Fail), except the one
 * documented fail-open: the identity authority unreachable admits with a warning.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import tls from 'node:tls';
import { BodyTooLarge, close as closeServer, listen, readBody, sendJson } from '../runtime/lib/http.js';
import { errMsg, logger } from '../runtime/lib/log.js';
import { createHealthServer, createReadiness } from '../runtime/lib/readiness.js';
import {
  agentNameOf,
  isAgentPod,
  mutatePatch,
  parseReview,
  podOf,
  review,
  validateVerdict,
  type AdmissionRequest,
  type AdmissionResponse,
  type AgentLookup,
} from './admission.js';
import type { WebhookSettings } from './config.js';

const log = logger('webhook');

/** Kubernetes caps an object at ~1.5 MiB in etcd; a review carries it (and maybe oldObject). */
export const MAX_BODY_BYTES = 4 * 1024 * 1024;

export interface RunningWebhook {
  port: number;
  healthPort: number;
  /** Re-reads the cert and key now (the poller does this every certReloadMs). */
  reloadCert(): boolean;
  close(): Promise<void>;
}

/** GET {idp}/v1/agents/{name}: found (with `provisioned`), not found, unreachable or unusable. */
export async function lookupAgent(idpUrl: string, name: string, timeoutMs: number, apiKey?: string): Promise<AgentLookup> {
  let res: Response;
  const headers: Record<string, string> = { accept: 'application/json', ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) };
  try {
    res = await fetch(`${idpUrl}/v1/agents/${encodeURIComponent(name)}`, { signal: AbortSignal.timeout(timeoutMs), headers });
  } catch (e) {
    const why = (e as Error).name === 'TimeoutError' ? `no answer in ${timeoutMs} ms` : errMsg((e as { cause?: unknown }).cause ?? e);
    return { kind: 'unreachable', why };
  }
  let body: unknown;
  try {
    body = await res.json();
  } catch {
    body = undefined;
  }
  if (res.status === 404) return { kind: 'not-found' };
  if (res.status === 502 || res.status === 503 || res.status === 504) return { kind: 'unreachable', why: `identity authority answered ${res.status}` };
  if (res.status !== 200) return { kind: 'bad-answer', why: `status ${res.status}` };
  const provisioned = (body as { provisioned?: unknown } | undefined)?.provisioned;
  if (typeof provisioned !== 'boolean') return { kind: 'bad-answer', why: 'no boolean `provisioned` in the agent record' };
  return { kind: 'found', provisioned };
}

function mutate(req: AdmissionRequest, s: WebhookSettings): AdmissionResponse {
  const pod = podOf(req);
  if (typeof pod === 'string') return { uid: req.uid, allowed: true, warnings: [`not mutated: ${pod}`] };
  if (!isAgentPod(pod)) return { uid: req.uid, allowed: true };
  const ops = mutatePatch(pod, s.proxyEnv);
  if (ops.length === 0) return { uid: req.uid, allowed: true };
  return { uid: req.uid, allowed: true, patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(ops)).toString('base64') };
}

async function validate(req: AdmissionRequest, s: WebhookSettings): Promise<AdmissionResponse> {
  if (req.operation === 'DELETE' || req.operation === 'CONNECT') return { uid: req.uid, allowed: true };
  const pod = podOf(req);
  if (typeof pod === 'string') return { uid: req.uid, allowed: false, status: { code: 400, message: pod } };
  if (!isAgentPod(pod)) return { uid: req.uid, allowed: true };
  const named = agentNameOf(pod);
  if ('error' in named) return { uid: req.uid, allowed: false, status: { code: 403, message: named.error } };
  const lookup = await lookupAgent(s.idpUrl, named.name, s.idpTimeoutMs, s.apiKey);
  const verdict = validateVerdict(named.name, lookup, s.requireProvisioned);
  const where = { agent: named.name, namespace: req.namespace, pod: pod.metadata?.name ?? pod.metadata?.generateName };
  if (!verdict.allowed) log.info('pod refused', { ...where, reason: verdict.status?.message });
  else if (verdict.warnings) log.warn('pod admitted with a warning', { ...where, warning: verdict.warnings[0] });
  return { uid: req.uid, ...verdict };
}

function createHandler(s: WebhookSettings): http.RequestListener {
  return (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/mutate' && path !== '/validate') {
      req.resume();
      return sendJson(res, 404, { error: `no route ${path}: POST /mutate or /validate` });
    }
    if (req.method !== 'POST') {
      req.resume();
      return sendJson(res, 405, { error: `${path} takes POST` }, { allow: 'POST' });
    }
    readBody(req, MAX_BODY_BYTES)
      .then(async (raw) => {
        const ar = parseReview(raw.toString('utf8'));
        if (typeof ar === 'string') return sendJson(res, 400, { error: ar });
        const out = path === '/mutate' ? mutate(ar, s) : await validate(ar, s);
        sendJson(res, 200, review(out));
      })
      .catch((e: unknown) => {
        if (res.headersSent) return res.destroy();
        if (e instanceof BodyTooLarge) return sendJson(res, 413, { error: e.message }, { connection: 'close' });
        log.error('admission request failed', { path, err: errMsg(e) });
        sendJson(res, 500, { error: 'internal error' });
      });
  };
}

/** Reads the pair; throws when either file is unreadable or they do not form a usable context. */
function readPair(s: WebhookSettings): { cert: Buffer; key: Buffer; digest: string } {
  const cert = readFileSync(s.certFile);
  const key = readFileSync(s.keyFile);
  tls.createSecureContext({ cert, key });
  return { cert, key, digest: createHash('sha256').update(cert).update('\0').update(key).digest('hex') };
}

export async function startWebhook(s: WebhookSettings): Promise<RunningWebhook> {
  let pair: ReturnType<typeof readPair>;
  try {
    pair = readPair(s);
  } catch (e) {
    throw new Error(`cannot load TLS cert ${s.certFile} / key ${s.keyFile}: ${errMsg(e)}`, { cause: e });
  }
  const server = https.createServer({ cert: pair.cert, key: pair.key, minVersion: 'TLSv1.2' }, createHandler(s));
  server.requestTimeout = 30_000;
  server.headersTimeout = 10_000;
  let current = pair.digest;
  const reloadCert = (): boolean => {
    let next: ReturnType<typeof readPair>;
    try {
      next = readPair(s);
    } catch (e) {
      // A Secret update swaps both files; a half-written pair keeps the old one until the next poll.
      log.warn('TLS cert reload skipped: keeping the current pair', { err: errMsg(e) });
      return false;
    }
    if (next.digest === current) return false;
    server.setSecureContext({ cert: next.cert, key: next.key, minVersion: 'TLSv1.2' });
    current = next.digest;
    log.info('TLS cert reloaded', { certFile: s.certFile });
    return true;
  };

  const readiness = createReadiness();
  const started = readiness.gate('webhook listener not open yet');
  const health = createHealthServer(readiness);

  let port: number;
  let healthPort: number;
  try {
    port = await listen(server, s.addr);
    healthPort = await listen(health, s.healthAddr);
  } catch (e) {
    if (server.listening) await closeServer(server);
    throw e;
  }
  const poll = setInterval(reloadCert, s.certReloadMs);
  poll.unref();
  started();
  log.info('webhook listening', { port, healthPort, idpUrl: s.idpUrl, requireProvisioned: s.requireProvisioned, proxy: s.proxyEnv.HTTPS_PROXY });
  return {
    port,
    healthPort,
    reloadCert,
    async close() {
      readiness.gate('webhook closing');
      clearInterval(poll);
      await Promise.all([closeServer(server as unknown as http.Server), closeServer(health)]);
    },
  };
}
