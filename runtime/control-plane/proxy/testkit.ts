/**
 * Test and bench helpers for the forward proxy: an in-process IdentityPort backed by a real
 * identity authority (its HTTP routes, called in-process), agent provisioning, a self-signed
 * certificate from the openssl CLI, and a curl runner.
 */
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IdentityPort, PresentationAnswer } from '../identity-port.js';
import type { IdentityAuthority } from '../../identity/server.js';
import { presentationFor, type AgentIdentity } from '../../identity/client.js';

async function call(a: IdentityAuthority, path: string, init?: RequestInit): Promise<unknown> {
  const res = await a.app.request(path, init);
  return res.json();
}

/** IdentityPort over the authority's own routes (no HTTP socket, no cache); `cache` adds a VP cache. */
export function inProcessIdentity(a: IdentityAuthority, opts: { cache?: boolean } = {}): IdentityPort {
  const cache = new Map<string, PresentationAnswer>();
  return {
    async verifyPresentation(vp, audience) {
      const key = `${audience ?? ''} ${vp}`;
      const hit = opts.cache ? cache.get(key) : undefined;
      if (hit) return hit;
      try {
        const r = (await call(a, '/v1/agents/verify-presentation', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ vp, audience }),
        })) as { ok?: boolean; agentName?: string | null; agentDid?: string | null; reason?: string };
        const out: PresentationAnswer = { ok: r.ok === true, reason: r.reason ?? 'no reason' };
        if (r.agentName) out.agentName = r.agentName;
        if (r.agentDid) out.agentDid = r.agentDid;
        if (opts.cache && out.ok) cache.set(key, out);
        return out;
      } catch (e) {
        return { ok: false, reason: `identity authority error: ${String(e)}` };
      }
    },
    async checkDelegation(q) {
      try {
        const qs = new URLSearchParams({ actor: q.actor, task: q.task, action: q.action, resource: q.resource });
        const r = (await call(a, `/v1/delegations/check?${qs}`)) as { ok?: boolean; reason?: string; vcJti?: string; notAfter?: number };
        const out = { ok: r.ok === true, reason: r.reason ?? '' } as Awaited<ReturnType<IdentityPort['checkDelegation']>>;
        if (r.vcJti) out.vcJti = r.vcJti;
        if (typeof r.notAfter === 'number') out.notAfter = r.notAfter;
        return out;
      } catch (e) {
        return { ok: false, reason: `identity authority error: ${String(e)}` };
      }
    },
  };
}

/** Registers and provisions an agent on the authority; returns its identity and a fresh VP. */
export async function provisionAgent(a: IdentityAuthority, name: string): Promise<{ identity: AgentIdentity; vp: string }> {
  await a.whenReady();
  const reg = await a.app.request('/v1/agents', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name, role: 'worker', capabilities: [{ action: 'http:get', resource: '*' }] }),
  });
  if (reg.status !== 201) throw new Error(`register ${name}: ${reg.status} ${await reg.text()}`);
  const prov = await a.app.request(`/v1/agents/${name}/provision`, { method: 'POST' });
  if (prov.status !== 200) throw new Error(`provision ${name}: ${prov.status} ${await prov.text()}`);
  const identity = (await prov.json()) as AgentIdentity;
  return { identity, vp: await presentationFor(identity, { ttlSeconds: 3600 }) };
}

/** The `jti` of a JWT (no verification): used to revoke a Membership VC in tests. */
export function jtiOf(jwt: string): string {
  const payload = JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8')) as { jti?: string };
  if (!payload.jti) throw new Error('no jti');
  return payload.jti;
}

/** A throwaway self-signed certificate for 127.0.0.1 / localhost (openssl CLI). */
export function selfSignedCert(): { key: string; cert: string; certFile: string; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'writ-proxy-tls-'));
  const keyFile = join(dir, 'key.pem');
  const certFile = join(dir, 'cert.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      keyFile,
      '-out',
      certFile,
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
    ],
    { stdio: 'ignore' },
  );
  return { key: readFileSync(keyFile, 'utf8'), cert: readFileSync(certFile, 'utf8'), certFile, dir };
}

export interface CurlResult {
  exit: number;
  /** Final HTTP status (0 when there was none). */
  status: number;
  /** Status of the proxy's CONNECT answer (0 without CONNECT). */
  connect: number;
  /** Every header block received, proxy CONNECT answer included, lower-cased names. */
  headers: string;
  body: string;
  stderr: string;
}

let seq = 0;
const curlDir = mkdtempSync(join(tmpdir(), 'writ-proxy-curl-'));

/** Runs the real curl; `signal` kills it (a client that goes away). */
export function curl(args: string[], opts: { signal?: AbortSignal; stdin?: string } = {}): Promise<CurlResult> {
  const n = ++seq;
  const hfile = join(curlDir, `h${n}`);
  const bfile = join(curlDir, `b${n}`);
  writeFileSync(hfile, '');
  writeFileSync(bfile, '');
  return new Promise((resolve, reject) => {
    const child = spawn('curl', ['-sS', '--max-time', '30', '-D', hfile, '-o', bfile, '-w', '%{http_code} %{http_connect}\n', ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
      signal: opts.signal,
      killSignal: 'SIGKILL',
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.stdin.end(opts.stdin ?? '');
    child.on('error', (e) => {
      if ((e as { name?: string }).name === 'AbortError') return;
      reject(e);
    });
    child.on('close', (code) => {
      const [status, connect] = (out.trim().split('\n').at(-1) ?? '').split(' ').map(Number);
      resolve({
        exit: code ?? -1,
        status: status ?? 0,
        connect: connect ?? 0,
        headers: readFileSync(hfile, 'utf8').toLowerCase(),
        body: readFileSync(bfile, 'utf8'),
        stderr: err,
      });
    });
  });
}
