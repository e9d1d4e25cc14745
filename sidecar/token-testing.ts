/**
 * Tests of the sidecar's access tokens (`SIDECAR_CREDENTIAL=token`): a real identity authority
 * (`openBed`), a broker stand-in keeping every request's headers (its upstream also serves a
 * registry model, so the forward proxy passes it the agent's token as to Writ's broker), the
 * control plane with its forward proxy following the authority, agent `name` provisioned with its
 * identity file written, and sidecars started against them.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { H } from '../runtime/lib/brand.js';
import { close, listen } from '../runtime/lib/http.js';
import { loadConfig } from '../runtime/lib/settings.js';
import { agent, openBed, type OAuthBed } from '../runtime/identity/oauth/oauth-testing.js';
import type { AgentIdentity } from '../runtime/identity/client.js';
import { startFollowingPlane, type FollowingPlane } from '../runtime/control-plane/following-testing.js';
import { testBackends } from '../runtime/store/testing.js';
import { startSidecar, type RunningSidecar } from './server.js';

export interface TokenBed {
  bed: OAuthBed;
  plane: FollowingPlane;
  me: AgentIdentity;
  /** A folder for the test's files (removed on close). */
  dir: string;
  /** The headers of every request the broker stand-in received. */
  seen: http.IncomingHttpHeaders[];
  /** A sidecar with `SIDECAR_CREDENTIAL=token` for the entry `broker`, its token from `tokenUrl`; `env`: more sidecar settings. */
  sidecar(tokenUrl: string, env?: Record<string, string>): Promise<RunningSidecar>;
  /** `GET /v1/models` through a sidecar: status, JSON body, deny reason. */
  call(s: RunningSidecar): Promise<{ status: number; body: Record<string, any>; reason: string | null }>;
  close(): Promise<void>;
}

/** `name`: the agent (and the model entry `<name>-model`); `bedEnv`: identity authority settings. */
export async function openTokenBed(name: string, bedEnv: Record<string, string> = {}): Promise<TokenBed> {
  const dir = mkdtempSync(join(tmpdir(), 'writ-sidecar-token-'));
  const identityFile = join(dir, 'identity.json');
  const seen: http.IncomingHttpHeaders[] = [];
  const bed = await openBed(testBackends()[0]!, bedEnv);
  const broker = http.createServer((req, res) => {
    seen.push(req.headers);
    req.resume().on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"object":"list","data":[]}'));
  });
  const brokerPort = await listen(broker, '127.0.0.1:0');
  const entries = [
    { name: 'broker', upstream: `127.0.0.1:${brokerPort}`, kind: 'service' as const },
    // The upstream serves a model: it is Writ's broker, the next enforcement point, so the proxy passes it the token.
    { name: `${name}-model`, upstream: `127.0.0.1:${brokerPort}`, kind: 'model' as const },
    { name, upstream: `${name}.agents.svc:8080`, kind: 'agent' as const, egressAllow: ['broker'] },
  ];
  const me = await agent(bed, name);
  for (const e of entries) bed.services.set(e.name, e);
  writeFileSync(identityFile, JSON.stringify(me));
  const plane = await startFollowingPlane(bed, entries);
  const sidecars: RunningSidecar[] = [];
  return {
    bed,
    plane,
    me,
    dir,
    seen,
    async sidecar(tokenUrl, env = {}) {
      const s = await startSidecar({
        config: loadConfig({ ...env, SIDECAR_CREDENTIAL: 'token', SIDECAR_TOKEN_URL: tokenUrl, SIDECAR_TOKEN_AUDIENCE: 'broker' }),
        identityFile,
        brokerUrl: `http://127.0.0.1:${brokerPort}`,
        proxyUrl: `http://127.0.0.1:${plane.run.gateway.port}`,
        addr: '127.0.0.1:0',
      });
      sidecars.push(s);
      return s;
    },
    async call(s) {
      const r = await fetch(`http://127.0.0.1:${s.port}/v1/models`, { headers: { authorization: 'Bearer dummy' } });
      return { status: r.status, body: (await r.json()) as Record<string, any>, reason: r.headers.get(H.denyReason) };
    },
    async close() {
      for (const s of sidecars) await s.close();
      await plane.close();
      await close(broker);
      await bed.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
