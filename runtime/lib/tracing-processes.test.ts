/**
 * Tracing of real processes: one trace from a gateway through the control plane's /authz to the
 * identity authority, exported by both processes to an in-test OTLP/HTTP receiver (otlp-testing.ts);
 * the stdout fallback of a real identity authority process writes one JSON line per operation and
 * no decision spans.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BRAND } from './brand.js';
import { close } from './http.js';
import { otlpReceiver } from './otlp-testing.js';
import { startEntry } from './entry-testing.js';
import { tracingMode } from './tracing.js';
import { eventually } from './poll-testing.js';
import { newTraceparent } from './tracing-testing.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Starts an entry point (`runtime/.../main.ts`) as a real process (entry-testing.ts); resolves with its `up` ports. */
async function startProcess(entry: string, env: Record<string, string>): Promise<{ ports: Record<string, number>; stop(): Promise<unknown> }> {
  const child = await startEntry([process.execPath, '--import', 'tsx', join(ROOT, entry)], env);
  return { ports: child.ports, stop: () => (child.signal('SIGTERM'), child.exited) };
}

describe('one trace across three processes: gateway -> control plane /authz -> identity authority', () => {
  it('the decision continues the gateway span and the delegation check is its child, exported by both processes', async () => {
    const rx = await otlpReceiver();
    const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: rx.url };
    const idp = await startProcess('runtime/identity/main.ts', { ...otel, PORT: '0', IDP_STORE_BACKEND: 'memory' });
    let cp: Awaited<ReturnType<typeof startProcess>> | undefined;
    try {
      cp = await startProcess('runtime/control-plane/main.ts', {
        ...otel,
        REGISTRY_BACKEND: 'memory',
        AGENT_IDP_URL: `http://127.0.0.1:${idp.ports.identity}`,
        DECISION_ADDR: '127.0.0.1:0',
        MGMT_ADDR: '127.0.0.1:0',
        EGRESS_PROXY_ADDR: '127.0.0.1:0',
        EGRESS_REPLICA_ID: 'trace-test',
      });
      const mgmt = `http://127.0.0.1:${cp.ports.mgmt}`;
      for (const svc of [
        { name: 'ledger', upstream: 'ledger.svc:8080', kind: 'tool', dataClass: 'regulated' },
        { name: 'clerk', upstream: 'clerk.svc:8080', kind: 'agent', allowTools: ['ledger'] },
      ]) {
        const r = await fetch(`${mgmt}/v1/registry/services`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(svc) });
        expect(r.status).toBe(200);
      }
      // The gateway (Envoy) side: a span of its own, sent on as traceparent.
      const gw = newTraceparent();
      const res = await fetch(`http://127.0.0.1:${cp.ports.decision}/authz`, {
        headers: {
          traceparent: gw.traceparent,
          [`x-${BRAND}-actor`]: 'clerk',
          [`x-${BRAND}-service`]: 'ledger',
          [`x-${BRAND}-target-kind`]: 'tool',
          [`x-${BRAND}-task`]: 't-9',
          [`x-${BRAND}-action`]: 'ledger:read',
          [`x-${BRAND}-resource`]: 'acct/9',
          [`x-${BRAND}-on-behalf-of`]: 'alice@example.com',
        },
      });
      expect(res.status).toBe(401);
      // Both processes export in batches (1 s); stopping them flushes.
      await cp.stop();
      cp = undefined;
      const spans = await eventually(() => {
        const s = rx.spans.filter((x) => x.traceId === gw.traceId);
        return s.some((x) => x.name === 'authz') && s.some((x) => x.name === 'delegation.check') ? s : undefined;
      }, 'the authz and delegation.check spans');
      const authz = spans.find((x) => x.name === 'authz')!;
      const check = spans.find((x) => x.name === 'delegation.check')!;
      expect(authz).toMatchObject({ parentSpanId: gw.spanId, service: `${BRAND}-control-plane` });
      expect(authz.attributes).toMatchObject({ [`${BRAND}.rule`]: 'delegation', [`${BRAND}.decision`]: 'deny', 'http.response.status_code': 401 });
      expect(check).toMatchObject({ parentSpanId: authz.spanId, service: `${BRAND}-identity` });
      expect(check.attributes).toMatchObject({ [`${BRAND}.operation`]: 'delegation.check', 'http.route': '/v1/delegations/check' });
    } finally {
      await cp?.stop();
      await idp.stop();
      await close(rx.server);
    }
  }, 400_000);
});

describe('stdout fallback (no OTEL_EXPORTER_OTLP_ENDPOINT)', () => {
  it('a real identity authority process writes one JSON line per operation, nothing for polls, decisions or per-request checks', async () => {
    expect(tracingMode()).toBe('off');
    const script = `
      import { startIdentityAuthority } from ${JSON.stringify(join(ROOT, 'runtime/identity/server.ts'))};
      import { startDecisionSpan } from ${JSON.stringify(join(ROOT, 'runtime/lib/tracing.ts'))};
      const idp = await startIdentityAuthority({ env: { IDP_STORE_BACKEND: 'memory' }, addr: '127.0.0.1:0' });
      await idp.authority.whenReady();
      const base = 'http://127.0.0.1:' + idp.port;
      const post = (p, b) => fetch(base + p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
      await post('/v1/agents', { name: 'out-bot', role: 'w', capabilities: [] });
      await post('/v1/agents/out-bot/provision', {});
      // Once per agent request (a fresh VP each time): no line without a traceparent.
      await post('/v1/agents/verify-presentation', { vp: 'not-a-vp' });
      await fetch(base + '/v1/delegations/check?actor=out-bot&task=t&action=a&resource=r');
      for (let i = 0; i < 5; i++) await fetch(base + '/v1/revocations');
      startDecisionSpan('authz', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01').end({ rule: 'registry', allow: true });
      await idp.close();
      process.exit(0);
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, LOG_LEVEL: 'error' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const code = await new Promise<number | null>((r) => child.on('exit', r));
    expect(code, err).toBe(0);
    const lines = out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { trace: boolean; name: string; traceId: string; attributes: Record<string, unknown> });
    expect(lines.map((l) => l.name)).toEqual(['agent.register', 'agent.provision']);
    expect(lines[1]).toMatchObject({ trace: true, attributes: { [`${BRAND}.operation`]: 'agent.provision', 'http.response.status_code': 200 } });
  }, 180_000);
});
