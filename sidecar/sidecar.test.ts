/**
 * The sidecar over real sockets: client -> sidecar -> a recording forward proxy (in-test,
 * absolute-URI and CONNECT) -> a target "broker" (http, and https with a throwaway certificate).
 * VPs are checked with the identity authority's own verifier; start-up refusals run the real
 * entry point as a child process.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H, VP_AUDIENCE } from '../runtime/lib/brand.js';
import { close, listen } from '../runtime/lib/http.js';
import { checkPresentation, type IssuerKey } from '../runtime/identity/vc.js';
import { makeAgent, makeIssuer } from '../runtime/identity/testkit.js';
import { selfSignedCert } from '../runtime/control-plane/proxy/testkit.js';
import { IDENTITY_FILE_VAR, VP_TTL_SECONDS, isLoopback, startSidecar, type RunningSidecar } from './server.js';

interface ProxyHit {
  kind: 'absolute' | 'connect';
  target: string;
  auth?: string;
}
interface TargetHit {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));

/** Runs the real entry point; resolves with its exit code and stderr. */
function runMain(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const base: Record<string, string> = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' };
    const child = spawn(process.execPath, ['--import', 'tsx', MAIN], { env: { ...base, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => resolve({ code, stderr }));
  });
}

describe('sidecar', () => {
  let dir: string;
  let issuer: IssuerKey;
  let agentDid: string;
  let idFile: string;
  let target: http.Server;
  let tlsTarget: https.Server;
  let proxy: http.Server;
  let sidecar: RunningSidecar;
  let tlsSidecar: RunningSidecar;
  let base: string;
  let proxyUrl: string;
  let cert: string;
  let tlsDir: string | undefined;
  const proxied: ProxyHit[] = [];
  const tunnels = new Set<net.Socket>();
  const hits: TargetHit[] = [];
  let gate = deferred();
  let part1 = deferred<string>();
  const hangArrived = deferred();
  const hangClosed = deferred();

  const targetHandler: http.RequestListener = (req, res) => {
    if (req.url === '/api/upload') {
      // Reports the first piece of the body as soon as it arrives, before the client sends the rest.
      let body = '';
      req.on('data', (c: Buffer) => {
        if (!body) part1.resolve(c.toString());
        body += c.toString();
      });
      req.on('end', () => res.end(JSON.stringify({ got: body })));
      return;
    }
    if (req.url === '/api/hang') {
      hangArrived.resolve();
      res.on('close', () => hangClosed.resolve());
      return; // never answers
    }
    if (req.url === '/api/stream') {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: one\n\n');
      void gate.promise.then(() => res.end('data: two\n\n'));
      return;
    }
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      hits.push({ path: req.url ?? '', headers: req.headers, body });
      res.writeHead(200, { 'content-type': 'application/json', 'x-from': 'target' });
      res.end(JSON.stringify({ ok: true, path: req.url, len: body.length }));
    });
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sidecar-'));
    issuer = makeIssuer();
    const agent = await makeAgent(issuer, { name: 'bot' });
    agentDid = agent.did;
    idFile = join(dir, 'identity.json');
    writeFileSync(idFile, JSON.stringify(agent));
    const tlsPair = selfSignedCert();
    tlsDir = tlsPair.dir;
    cert = tlsPair.cert;
    const key = tlsPair.key;

    target = http.createServer(targetHandler);
    const targetPort = await listen(target, '127.0.0.1:0');
    tlsTarget = https.createServer({ cert, key }, targetHandler);
    const tlsPort = await listen(tlsTarget, '127.0.0.1:0');

    // The recording proxy: 407 without credentials, 403 + deny reason for /deny, else forward.
    proxy = http.createServer((req, res) => {
      const auth = req.headers['proxy-authorization'];
      proxied.push({ kind: 'absolute', target: req.url ?? '', auth });
      if (!auth) {
        res.writeHead(407, { 'proxy-authenticate': 'Bearer' });
        return res.end();
      }
      if (req.url?.includes('/deny')) {
        res.writeHead(403, { [H.denyReason]: 'not in egress allow list', 'content-type': 'application/json' });
        return res.end('{"error":"denied"}');
      }
      const headers = { ...req.headers };
      delete headers['proxy-authorization'];
      const up = http.request(req.url!, { method: req.method, headers }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      });
      req.pipe(up);
      up.on('error', () => res.destroy());
      res.on('close', () => {
        if (!res.writableFinished) up.destroy();
      });
    });
    proxy.on('connect', (req: http.IncomingMessage, socket: net.Socket) => {
      const auth = req.headers['proxy-authorization'];
      proxied.push({ kind: 'connect', target: req.url ?? '', auth });
      if (!auth) return socket.end('HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n');
      if (req.url?.startsWith('localhost:')) {
        return socket.end(`HTTP/1.1 403 Forbidden\r\n${H.denyReason}: host not allowed\r\ncontent-length: 0\r\n\r\n`);
      }
      tunnels.add(socket);
      socket.on('close', () => tunnels.delete(socket));
      const up = net.connect(tlsPort, '127.0.0.1', () => {
        socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        up.pipe(socket);
        socket.pipe(up);
      });
      up.on('error', () => socket.destroy());
      socket.on('error', () => up.destroy());
    });
    const proxyPort = await listen(proxy, '127.0.0.1:0');
    proxyUrl = `http://127.0.0.1:${proxyPort}`;

    sidecar = await startSidecar({ addr: '127.0.0.1:0', identityFile: idFile, brokerUrl: `http://127.0.0.1:${targetPort}`, proxyUrl });
    base = `http://127.0.0.1:${sidecar.port}`;
    tlsSidecar = await startSidecar({ addr: '127.0.0.1:0', identityFile: idFile, brokerUrl: `https://127.0.0.1:${tlsPort}/base`, proxyUrl, ca: cert });
  });

  afterAll(async () => {
    gate.resolve();
    await sidecar?.close();
    await tlsSidecar?.close();
    for (const t of tunnels) t.destroy();
    for (const s of [proxy, target, tlsTarget]) if (s) await close(s);
    if (dir) rmSync(dir, { recursive: true, force: true });
    if (tlsDir) rmSync(tlsDir, { recursive: true, force: true });
  });

  const verify = (vp: string) =>
    checkPresentation(vp, { issuerDid: issuer.did, issuerKey: issuer.publicKey, audience: VP_AUDIENCE, nowSec: Math.floor(Date.now() / 1000) });

  it('forwards an http request as an absolute-URI request with a fresh, valid 12 h VP each time', async () => {
    const send = () =>
      fetch(`${base}/v1/chat/completions?x=1`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          [H.actor]: 'mallory',
          authorization: 'Bearer sk-agent',
          'proxy-authorization': 'Bearer forged',
          [H.agentVp]: 'forged',
        },
        body: '{"model":"m"}',
      });
    const n = proxied.length;
    const r1 = await send();
    expect(r1.status).toBe(200);
    expect(r1.headers.get('x-from')).toBe('target');
    expect(await r1.json()).toEqual({ ok: true, path: '/v1/chat/completions?x=1', len: 13 });
    expect((await send()).status).toBe(200);
    const [a, b] = proxied.slice(n);
    expect(a?.kind).toBe('absolute');
    expect(a?.target).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions\?x=1$/);
    const vpA = a!.auth!.replace(/^Bearer /, '');
    const vpB = b!.auth!.replace(/^Bearer /, '');
    for (const vp of [vpA, vpB]) {
      const v = await verify(vp);
      expect(v.ok).toBe(true);
      if (v.ok) expect(v.holderDid).toBe(agentDid);
      const p = decodeJwt(vp);
      expect(p.aud).toBe(VP_AUDIENCE);
      expect((p.exp ?? 0) - (p.iat ?? 0)).toBe(VP_TTL_SECONDS);
    }
    expect(decodeJwt(vpA).nonce).not.toBe(decodeJwt(vpB).nonce);
    expect(decodeJwt(vpA).jti).not.toBe(decodeJwt(vpB).jti);
    // The broker sees the sidecar's identity, never what the agent claimed or forged.
    const hit = hits.at(-1)!;
    expect(hit.headers[H.actor]).toBe('bot');
    expect(hit.headers[H.agentVp]).toBe(vpB);
    expect(hit.headers.authorization).toBe(`Bearer ${vpB}`);
    expect(hit.headers['proxy-authorization']).toBeUndefined();
  });

  it('streams the request body and the response both ways', async () => {
    part1 = deferred<string>();
    const got = await new Promise<string>((resolve, reject) => {
      const req = http.request(`${base}/api/upload`, { method: 'POST', headers: { 'content-type': 'text/plain' } }, (res) => {
        let s = '';
        res.on('data', (c: Buffer) => (s += c.toString()));
        res.on('end', () => resolve(s));
      });
      req.on('error', reject);
      req.write('part-one;');
      // The rest is sent only once the target has the first piece: the upload is not buffered.
      void part1.promise.then((p) => {
        expect(p).toBe('part-one;');
        req.end('part-two');
      });
    });
    expect(JSON.parse(got)).toEqual({ got: 'part-one;part-two' });

    gate = deferred();
    const res = await fetch(`${base}/api/stream`);
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toBe('data: one\n\n'); // before the target has written the second event
    gate.resolve();
    let rest = '';
    for (let c = await reader.read(); !c.done; c = await reader.read()) rest += new TextDecoder().decode(c.value);
    expect(rest).toBe('data: two\n\n');
  });

  it('a client that hangs up ends the exchange with the broker', async () => {
    const ac = new AbortController();
    const p = fetch(`${base}/api/hang`, { signal: ac.signal }).catch((e: unknown) => e);
    await hangArrived.promise;
    ac.abort();
    expect(await p).toBeInstanceOf(Error);
    await hangClosed.promise; // the target saw its side of the exchange close
  });

  it('tunnels an https broker through CONNECT with the VP, TLS end to end', async () => {
    const n = proxied.length;
    const r = await fetch(`http://127.0.0.1:${tlsSidecar.port}/v1/models`);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ ok: true, path: '/base/v1/models', len: 0 });
    const hit = proxied[n]!;
    expect(hit.kind).toBe('connect');
    expect(hit.target).toMatch(/^127\.0\.0\.1:\d+$/);
    expect((await verify(hit.auth!.replace(/^Bearer /, ''))).ok).toBe(true);
  });

  it("passes the proxy's denials through with the deny reason", async () => {
    const r = await fetch(`${base}/deny/this`);
    expect(r.status).toBe(403);
    expect(r.headers.get(H.denyReason)).toBe('not in egress allow list');
    const dir2 = await startSidecar({ addr: '127.0.0.1:0', identityFile: idFile, brokerUrl: 'https://localhost:9/', proxyUrl, ca: cert });
    try {
      const t = await fetch(`http://127.0.0.1:${dir2.port}/v1/models`);
      expect(t.status).toBe(403);
      expect(t.headers.get(H.denyReason)).toBe('host not allowed');
      expect(((await t.json()) as { error: { code: string } }).error.code).toBe('egress_denied');
    } finally {
      await dir2.close();
    }
  });

  it('answers 502 when the proxy is unreachable, 400 for absolute-form requests', async () => {
    const dead = http.createServer();
    const deadPort = await listen(dead, '127.0.0.1:0');
    await close(dead);
    const s = await startSidecar({
      addr: '127.0.0.1:0',
      identityFile: idFile,
      brokerUrl: 'http://broker.test',
      proxyUrl: `http://127.0.0.1:${deadPort}`,
    });
    try {
      const r = await fetch(`http://127.0.0.1:${s.port}/v1/models`);
      expect(r.status).toBe(502);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe('proxy_unreachable');
    } finally {
      await s.close();
    }
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: sidecar.port, path: 'http://evil.test/x', method: 'GET' }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(400);
  });

  it('picks up a rotated identity file, and keeps the last good identity when the file turns bad', async () => {
    const file = join(dir, 'rotating.json');
    writeFileSync(file, (await import('node:fs')).readFileSync(idFile));
    const s = await startSidecar({ addr: '127.0.0.1:0', identityFile: file, brokerUrl: 'http://127.0.0.1:1', proxyUrl, reloadMs: 20 });
    const holder = async () => {
      const n = proxied.length;
      (await fetch(`http://127.0.0.1:${s.port}/deny/who`)).body?.cancel();
      return decodeJwt(proxied[n]!.auth!.replace(/^Bearer /, '')).iss;
    };
    try {
      expect(await holder()).toBe(agentDid);
      const next = await makeAgent(issuer, { name: 'bot' });
      writeFileSync(file, JSON.stringify(next));
      const end = Date.now() + 5000;
      while ((await holder()) !== next.did && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
      expect(await holder()).toBe(next.did);
      writeFileSync(file, '{broken');
      // Give the watcher a few periods to see the broken file: the identity must not change.
      await new Promise((r) => setTimeout(r, 120));
      expect(await holder()).toBe(next.did);
    } finally {
      await s.close();
    }
  });

  it('listens on loopback only', async () => {
    expect(isLoopback('127.0.0.1')).toBe(true);
    expect(isLoopback('::1')).toBe(true);
    expect(isLoopback('0.0.0.0')).toBe(false);
    expect(isLoopback('10.0.0.1')).toBe(false);
    await expect(startSidecar({ addr: ':0', identityFile: idFile, brokerUrl: 'http://b', proxyUrl })).rejects.toThrow(/loopback/);
    await expect(startSidecar({ addr: '0.0.0.0:0', identityFile: idFile, brokerUrl: 'http://b', proxyUrl })).rejects.toThrow(/loopback/);
  });

  it('refuses to start (exit 1, one clear line) without a readable, valid identity file', async () => {
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, '{not json');
    const wrong = join(dir, 'wrong.json');
    const other = await makeAgent(issuer, { name: 'other' });
    const me = await makeAgent(issuer, { name: 'bot' });
    writeFileSync(wrong, JSON.stringify({ ...me, privateKeyB64: other.privateKeyB64 }));
    // A name that could not go in the actor header (it crashed the first request).
    const oddName = join(dir, 'odd-name.json');
    writeFileSync(oddName, JSON.stringify({ ...me, name: 'bot\u2028x' }));
    const common = { REAL_BROKER_URL: 'http://broker.test', EGRESS_PROXY_URL: proxyUrl, SIDECAR_ADDR: '127.0.0.1:0' };
    const [none, missing, notJson, mismatch, open, odd] = await Promise.all([
      runMain(common),
      runMain({ ...common, [IDENTITY_FILE_VAR]: join(dir, 'nope.json') }),
      runMain({ ...common, [IDENTITY_FILE_VAR]: bad }),
      runMain({ ...common, [IDENTITY_FILE_VAR]: wrong }),
      runMain({ ...common, [IDENTITY_FILE_VAR]: idFile, SIDECAR_ADDR: '0.0.0.0:0' }),
      runMain({ ...common, [IDENTITY_FILE_VAR]: oddName }),
    ]);
    expect(odd.code).toBe(1);
    expect(odd.stderr).toMatch(/not a valid agent identity \(name: not an agent name/);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain(`${IDENTITY_FILE_VAR} is not set`);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/cannot read identity file .*nope\.json/);
    expect(notJson.code).toBe(1);
    expect(notJson.stderr).toMatch(/is not valid JSON/);
    expect(mismatch.code).toBe(1);
    expect(mismatch.stderr).toMatch(/not a valid agent identity \(privateKeyB64 does not match did\)/);
    expect(open.code).toBe(1);
    expect(open.stderr).toMatch(/must be a loopback address/);
  });
});
