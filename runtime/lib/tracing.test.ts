/**
 * Traces against an in-test OTLP/HTTP receiver that decodes what arrives (protobuf, the default,
 * and JSON; otlp-testing.ts):
 * identity-authority operation spans (names, attributes) continuing a caller's `traceparent`;
 * a decision span whose identity-authority call carries it on (parent/child across the
 * hop); polls without a caller context are not traced; the stdout fallback of a real identity
 * authority process writes one JSON line per operation and no decision spans; config validation.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BRAND } from './brand.js';
import { close } from './http.js';
import { otlpReceiver, type OtlpSpan } from './otlp-testing.js';
import { openStore, type Store } from '../store/factory.js';
import { inProcessIdentity } from '../identity/in-process.js';
import { startIdentityAuthority } from '../identity/server.js';
import { presentationFor, type AgentIdentity } from '../identity/client.js';
import { flushTracing, initTracing, injectTrace, shutdownTracing, startDecisionSpan, tracingFromEnv, tracingMode, withSpan } from './tracing.js';
import { otlpHeaders } from './tracing-config.js';
import type { AnswerOf, Gatherer } from '../control-plane/decision/decide.js';
import { askingWithin } from '../control-plane/decision/gather.js';
import type { Question } from '../control-plane/decision/types.js';
import { eventually } from './poll-testing.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export const newTraceparent = () => {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
};

/** Waits until `rx` has at least two spans of the trace (a parent and its child), and returns them. */
const twoOrMore = (rx: { spans: OtlpSpan[] }, traceId: string, what: string) =>
  eventually(() => {
    const s = rx.spans.filter((x) => x.traceId === traceId);
    return s.length >= 2 ? s : undefined;
  }, what);

describe('tracing config', () => {
  it('reads OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SDK_DISABLED, refusing a bad endpoint', () => {
    expect(tracingFromEnv({})).toEqual({ mode: 'stdout' });
    expect(tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: '' })).toEqual({ mode: 'stdout' });
    expect(tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
      mode: 'otlp',
      endpoint: 'http://collector:4318',
      protocol: 'http/protobuf',
    });
    expect(tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' })).toEqual({ mode: 'off' });
    expect(() => tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toThrow(/OTEL_EXPORTER_OTLP_ENDPOINT/);
    expect(() => tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://c' })).toThrow(/OTEL_EXPORTER_OTLP_ENDPOINT/);
    expect(() => tracingFromEnv({ OTEL_SDK_DISABLED: 'maybe' })).toThrow(/OTEL_SDK_DISABLED/);
  });

  it('reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, refusing an unknown sampler or a ratio outside [0, 1]', () => {
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' };
    expect(tracingFromEnv({ ...env, OTEL_TRACES_SAMPLER: 'parentbased_always_on' })).toEqual({
      mode: 'otlp',
      endpoint: 'http://c:4318',
      protocol: 'http/protobuf',
    });
    expect(tracingFromEnv({ ...env, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25' })).toEqual({
      mode: 'otlp',
      endpoint: 'http://c:4318',
      protocol: 'http/protobuf',
      sampler: { name: 'parentbased_traceidratio', ratio: 0.25 },
    });
    expect(tracingFromEnv({ OTEL_TRACES_SAMPLER: 'traceidratio' })).toEqual({ mode: 'stdout', sampler: { name: 'traceidratio', ratio: 1 } });
    expect(tracingFromEnv({ OTEL_TRACES_SAMPLER: 'always_off', OTEL_TRACES_SAMPLER_ARG: 'ignored' }).sampler).toEqual({ name: 'always_off', ratio: 1 });
    expect(() => tracingFromEnv({ OTEL_TRACES_SAMPLER: 'sometimes' })).toThrow(/OTEL_TRACES_SAMPLER must be one of/);
    for (const bad of ['1.5', '-0.1', 'half', '0x'])
      expect(() => tracingFromEnv({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: bad }), bad).toThrow(/OTEL_TRACES_SAMPLER_ARG/);
  });

  it('reads OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the OTLP default) or http/json; grpc is refused', () => {
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' };
    expect(tracingFromEnv({ ...env, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }).protocol).toBe('http/json');
    expect(tracingFromEnv({ ...env, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf' }).protocol).toBe('http/protobuf');
    expect(() => tracingFromEnv({ ...env, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toThrow(
      /OTEL_EXPORTER_OTLP_PROTOCOL must be one of http\/protobuf, http\/json/,
    );
  });

  it('reads OTEL_EXPORTER_OTLP_HEADERS as the OTel spec writes it, never echoing a bad entry', () => {
    expect(
      tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_HEADERS: 'Authorization=Bearer%20s3cret, x-tenant = a%2Cb' }),
    ).toEqual({
      mode: 'otlp',
      endpoint: 'http://c:4318',
      protocol: 'http/protobuf',
      headers: { authorization: 'Bearer s3cret', 'x-tenant': 'a,b' },
    });
    expect(otlpHeaders('')).toEqual({});
    for (const bad of ['s3cret-token', '=v', 'bad key=v', 'k=%E0%A4%A', 'k=a%0D%0Ab'])
      expect(() => otlpHeaders(`ok=1,${bad}`), bad).toThrow(/^OTEL_EXPORTER_OTLP_HEADERS must be .*entry 2 is not$/);
  });
});

describe('OTLP export of identity-authority and decision spans', () => {
  let rx: Awaited<ReturnType<typeof otlpReceiver>>;
  let store: Store;
  let idp: Awaited<ReturnType<typeof startIdentityAuthority>>;
  let base: string;

  beforeAll(async () => {
    rx = await otlpReceiver();
    expect(initTracing(tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: rx.url }), `${BRAND}-test`)).toBe(true);
    expect(tracingMode()).toBe('otlp');
    expect(initTracing({ mode: 'stdout' })).toBe(false);
    store = await openStore({ backend: 'memory' });
    idp = await startIdentityAuthority({ store, env: { IDP_ISSUER_HOST: 'idp.test' }, addr: '127.0.0.1:0' });
    await idp.authority.whenReady();
    base = `http://127.0.0.1:${idp.port}`;
  });
  afterAll(async () => {
    await idp?.close();
    await store?.close();
    await shutdownTracing();
    if (rx) await close(rx.server);
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

  it('identity and credential operations are spans that continue the caller trace', async () => {
    const caller = newTraceparent();
    const h = { traceparent: caller.traceparent };
    expect((await post('/v1/agents', { name: 'tracer-bot', role: 'worker', capabilities: [] }, h)).status).toBe(201);
    const prov = (await (await post('/v1/agents/tracer-bot/provision', {}, h)).json()) as AgentIdentity;
    const vp = await presentationFor(prov, { ttlSeconds: 60 });
    expect(((await (await post('/v1/agents/verify-presentation', { vp }, h)).json()) as { ok: boolean }).ok).toBe(true);
    const d = (await (
      await post('/v1/delegations/request', { actorName: 'tracer-bot', task: 't', action: 'read', resource: 'r', reason: 'why' }, h)
    ).json()) as { id: string };
    const approved = (await (await post(`/v1/delegations/${d.id}/approve`, { approver: 'alice' }, h)).json()) as { vcJti: string };
    expect((await post('/v1/revoke', { vcJti: approved.vcJti }, h)).status).toBe(200);
    // A client error is the caller's, not the server's: status left unset (OTel HTTP server spans).
    const other = newTraceparent();
    expect((await post('/v1/revoke', { vcJti: 'no-such-jti' }, { traceparent: other.traceparent })).status).toBe(404);
    expect((await post('/v1/revoke', { vcJti: '' }, { traceparent: other.traceparent })).status).toBe(422);
    await post('/v1/identity/resolve', { claims: { iss: 'https://unknown.example', sub: 'x' } }, h);
    // A poll without caller context: not traced.
    expect((await fetch(`${base}/v1/revocations`)).status).toBe(200);
    await flushTracing();

    const ops = ['agent.register', 'agent.provision', 'vp.verify', 'delegation.request', 'delegation.approve', 'vc.revoke', 'identity.resolve'];
    const mine = await eventually(() => {
      const s = rx.spans.filter((x) => x.traceId === caller.traceId);
      return ops.every((o) => s.some((x) => x.name === o)) ? s : undefined;
    }, 'the identity operation spans');
    for (const o of ops) {
      const s = mine.find((x) => x.name === o)!;
      expect(s.parentSpanId, o).toBe(caller.spanId);
      expect(s.service).toBe(`${BRAND}-test`);
      expect(s.attributes[`${BRAND}.operation`]).toBe(o);
      expect(s.attributes['http.request.method']).toBe(o === 'delegation.check' ? 'GET' : 'POST');
    }
    expect(mine.find((x) => x.name === 'agent.provision')!.attributes).toMatchObject({
      'http.route': '/v1/agents/:name/provision',
      'http.response.status_code': 200,
    });
    expect(rx.spans.some((x) => String(x.attributes['http.route'] ?? '').includes('revocations'))).toBe(false);
    expect(mine.find((x) => x.name === 'vc.revoke')!.status).toBe(0);
    const refused = await twoOrMore(rx, other.traceId, 'the refused revocations');
    expect(refused.map((x) => [x.attributes['http.response.status_code'], x.status]).sort()).toEqual([
      [404, 0],
      [422, 0],
    ]);
  });

  it('a decision span continues the gateway trace and its identity-authority call is its child', async () => {
    const gateway = newTraceparent();
    const span = startDecisionSpan('authz', gateway.traceparent);
    const status = await span.run(async () => {
      const headers = injectTrace({ 'content-type': 'application/json' });
      expect(headers.traceparent).toMatch(new RegExp(`^00-${gateway.traceId}-[0-9a-f]{16}-01$`));
      const qs = new URLSearchParams({ actor: 'tracer-bot', task: 't', action: 'read', resource: 'r' });
      return (await fetch(`${base}/v1/delegations/check?${qs}`, { headers })).status;
    });
    expect(status).toBe(200);
    span.end({ rule: 'delegation', allow: false, service: 'ledger', status: 403 });
    await flushTracing();
    const inTrace = await twoOrMore(rx, gateway.traceId, 'the decision and check spans');
    const decision = inTrace.find((x) => x.name === 'authz')!;
    const check = inTrace.find((x) => x.name === 'delegation.check')!;
    expect(decision.parentSpanId).toBe(gateway.spanId);
    expect(check.parentSpanId).toBe(decision.spanId);
    expect(decision.attributes).toMatchObject({
      [`${BRAND}.rule`]: 'delegation',
      [`${BRAND}.decision`]: 'deny',
      [`${BRAND}.service`]: 'ledger',
      'http.response.status_code': 403,
    });
    expect(decision.kind).toBe(2);
    expect(BigInt(decision.end) > BigInt(decision.start)).toBe(true);
    // Both the SDK's spans and decision spans went as protobuf, the OTLP default.
    expect(new Set(rx.got.map((g) => g.headers['content-type']))).toEqual(new Set(['application/x-protobuf']));
  });

  it('in process (the all-in-one), the identity calls of a decision are its children, with their routes as attributes', async () => {
    const gateway = newTraceparent();
    const local = inProcessIdentity(idp.authority);
    const span = startDecisionSpan('broker', gateway.traceparent);
    // Each question asked within the decision's context, as the gatherer asks it (askingWithin).
    await span.run(() => local.verifyPresentation('not.a.vp'));
    await span.run(() => local.checkDelegation({ actor: 'tracer-bot', task: 't', action: 'read', resource: 'r' }));
    span.end({ rule: 'identity', allow: false, status: 403 });
    await flushTracing();
    const inTrace = await eventually(() => {
      const s = rx.spans.filter((x) => x.traceId === gateway.traceId);
      return s.length >= 3 ? s : undefined;
    }, 'the decision span and its two identity spans');
    const decision = inTrace.find((x) => x.name === 'broker')!;
    expect(decision.parentSpanId).toBe(gateway.spanId);
    for (const [name, route] of [
      ['vp.verify', '/v1/agents/verify-presentation'],
      ['delegation.check', '/v1/delegations/check'],
    ]) {
      const child = inTrace.find((x) => x.name === name)!;
      expect(child.parentSpanId, name).toBe(decision.spanId);
      expect(child.attributes).toMatchObject({ [`${BRAND}.operation`]: name, 'http.route': route });
    }
  });

  it('a question a decision asks after an await carries its span (askingWithin); the context is synchronous otherwise', async () => {
    const gw = newTraceparent();
    const span = startDecisionSpan('authz-async', gw.traceparent);
    const sent: (string | undefined)[] = [];
    const inner: Gatherer = {
      ask: <Q extends Question>() => {
        sent.push(injectTrace({}).traceparent);
        return Promise.resolve(true) as Promise<AnswerOf<Q>>;
      },
    };
    const g = askingWithin(inner, span);
    const q = { kind: 'ticket', ticket: 't', actor: 'a', upstream: 'u' } as const;
    await g.ask(q);
    await new Promise((r) => setImmediate(r));
    await g.ask(q);
    // Outside askingWithin, after an await, no context is active: nothing is sent on.
    await span.run(async () => {
      await null;
      sent.push(injectTrace({}).traceparent);
    });
    expect(sent[0]).toMatch(new RegExp(`^00-${gw.traceId}-[0-9a-f]{16}-01$`));
    expect(sent[1]).toBe(sent[0]);
    expect(sent[2]).toBeUndefined();
    expect(askingWithin(inner, startDecisionSpan('ignored', `00-${gw.traceId}-${gw.spanId}-00`))).not.toBe(inner);
    span.end({ rule: 'ticket', allow: true });
    await flushTracing();
    const recorded = await eventually(() => rx.spans.find((x) => x.name === 'authz-async'), 'the decision span');
    expect(sent[0]).toBe(`00-${gw.traceId}-${recorded.spanId}-01`);
    expect(recorded.parentSpanId).toBe(gw.spanId);
  });

  it('an unsampled gateway trace is continued but not recorded; a malformed traceparent starts a new trace', async () => {
    const gw = newTraceparent();
    const quiet = startDecisionSpan('authz-unsampled', `00-${gw.traceId}-${gw.spanId}-00`);
    const sent = quiet.run(() => injectTrace({}));
    expect(sent.traceparent).toMatch(new RegExp(`^00-${gw.traceId}-[0-9a-f]{16}-00$`));
    quiet.end({ rule: 'registry', allow: true });
    const bad = startDecisionSpan('authz-malformed', '00-zz-1-01');
    bad.end({ rule: 'registry', allow: false });
    await flushTracing();
    const fresh = await eventually(() => rx.spans.find((x) => x.name === 'authz-malformed'), 'the malformed-parent span');
    expect(fresh.parentSpanId).toBeUndefined();
    expect(rx.spans.some((x) => x.name === 'authz-unsampled')).toBe(false);
  });

  it('reads the sampled bit among other flags; an uppercase traceparent is not W3C and starts a new trace', async () => {
    const gw = newTraceparent();
    startDecisionSpan('authz-flags', `00-${gw.traceId}-${gw.spanId}-03`).end({ allow: true });
    startDecisionSpan('authz-upper', `00-${gw.traceId.toUpperCase()}-${gw.spanId}-01`).end({ allow: true });
    await flushTracing();
    const flagged = await eventually(() => rx.spans.find((x) => x.name === 'authz-flags'), 'the flags-03 span');
    expect(flagged).toMatchObject({ traceId: gw.traceId, parentSpanId: gw.spanId });
    const upper = await eventually(() => rx.spans.find((x) => x.name === 'authz-upper'), 'the uppercase-parent span');
    expect(upper.traceId).not.toBe(gw.traceId);
    expect(upper.parentSpanId).toBeUndefined();
  });

  it('a decision without a traceparent starts its own trace', async () => {
    const span = startDecisionSpan('proxy');
    span.end({ rule: 'registry', allow: true });
    await flushTracing();
    const s = await eventually(() => rx.spans.find((x) => x.name === 'proxy'), 'the proxy span');
    expect(s.parentSpanId).toBeUndefined();
    expect(s.attributes[`${BRAND}.decision`]).toBe('allow');
  });
});

describe('OTEL_EXPORTER_OTLP_PROTOCOL=http/json', () => {
  let rx: Awaited<ReturnType<typeof otlpReceiver>>;
  beforeAll(async () => {
    rx = await otlpReceiver();
    initTracing(tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: rx.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }), `${BRAND}-json`);
  });
  afterAll(async () => {
    await shutdownTracing();
    if (rx) await close(rx.server);
  });

  it('sends decision spans and SDK spans as JSON, with the same content', async () => {
    const gw = newTraceparent();
    const span = startDecisionSpan('authz', gw.traceparent);
    await span.run(() => withSpan('delegation.check', { [`${BRAND}.operation`]: 'delegation.check' }, () => Promise.resolve()));
    span.end({ rule: 'registry', allow: true, status: 200 });
    await flushTracing();
    const both = await twoOrMore(rx, gw.traceId, 'the decision and SDK spans');
    const decision = both.find((x) => x.name === 'authz')!;
    expect(decision).toMatchObject({ parentSpanId: gw.spanId, kind: 2, service: `${BRAND}-json` });
    expect(decision.attributes).toMatchObject({ [`${BRAND}.rule`]: 'registry', [`${BRAND}.decision`]: 'allow', 'http.response.status_code': 200 });
    expect(both.find((x) => x.name === 'delegation.check')!.parentSpanId).toBe(decision.spanId);
    expect(new Set(rx.got.map((g) => g.headers['content-type']))).toEqual(new Set(['application/json']));
  });
});

describe('sampling: one sampler for decision spans and SDK spans', () => {
  let rx: Awaited<ReturnType<typeof otlpReceiver>>;
  beforeAll(async () => {
    rx = await otlpReceiver();
  });
  afterAll(async () => {
    await shutdownTracing();
    await close(rx.server);
  });

  /** Runs a decision span named `name` (with an SDK child span inside); resolves with the traceparent it sends on. */
  async function decide(name: string, traceparent?: string): Promise<string> {
    const span = startDecisionSpan(name, traceparent);
    const sent = span.run(() => injectTrace({})).traceparent ?? '';
    await span.run(() => withSpan(`${name}-child`, {}, async () => {}));
    span.end({ rule: 'registry', allow: true });
    return sent;
  }
  const withSampler = async (OTEL_TRACES_SAMPLER: string, OTEL_TRACES_SAMPLER_ARG: string) => {
    await shutdownTracing();
    expect(initTracing(tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: rx.url, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG }), `${BRAND}-test`)).toBe(true);
  };
  const names = () => rx.spans.map((s) => s.name);

  it('parentbased_traceidratio 0: a trace Writ would start is not recorded (flags 00 travel on); a sampled gateway trace is', async () => {
    await withSampler('parentbased_traceidratio', '0');
    const gw = newTraceparent();
    expect(await decide('root-unsampled')).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
    expect(await decide('gateway-sampled', `00-${gw.traceId}-${gw.spanId}-01`)).toMatch(new RegExp(`^00-${gw.traceId}-[0-9a-f]{16}-01$`));
    await flushTracing();
    await eventually(() => rx.spans.find((s) => s.name === 'gateway-sampled-child'), 'the sampled child span');
    expect(names()).toContain('gateway-sampled');
    expect(names().filter((n) => n.startsWith('root-unsampled'))).toEqual([]);
  });

  it('traceidratio (not parent based): 0 records nothing even under a sampled gateway, 1 records a root', async () => {
    await withSampler('traceidratio', '0');
    const gw = newTraceparent();
    expect(await decide('ratio0-under-gateway', `00-${gw.traceId}-${gw.spanId}-01`)).toMatch(/-00$/);
    await withSampler('traceidratio', '1');
    expect(await decide('ratio1-root')).toMatch(/-01$/);
    await flushTracing();
    await eventually(() => rx.spans.find((s) => s.name === 'ratio1-root-child'), 'the ratio-1 child span');
    expect(names()).toContain('ratio1-root');
    expect(names().filter((n) => n.startsWith('ratio0-'))).toEqual([]);
  });
});

/** Starts an entry point (`runtime/.../main.ts`) as a real process; resolves with its `up` ports. */
function startProcess(entry: string, env: Record<string, string>): Promise<{ ports: Record<string, number>; stop(): Promise<void> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, entry)], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise<void>((r) => child.on('exit', () => r()));
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${entry} did not come up:\n${log}`)), 150_000);
    child.stderr!.on('data', (c: Buffer) => {
      log += c.toString();
      for (const line of log.split('\n')) {
        if (!line.includes('"msg":"up"')) continue;
        clearTimeout(timer);
        const ev = JSON.parse(line) as Record<string, unknown>;
        const ports: Record<string, number> = {};
        for (const [k, v] of Object.entries(ev)) if (typeof v === 'number') ports[k] = v;
        resolve({ ports, stop: () => (child.kill('SIGTERM'), exited) });
        return;
      }
    });
    void exited.then(() => reject(new Error(`${entry} exited:\n${log}`)));
  });
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
