/**
 * Traces against an in-test OTLP/HTTP receiver that decodes what arrives (protobuf, the default;
 * otlp-testing.ts): identity-authority operation spans (names, attributes) continuing a caller's
 * `traceparent`; a decision span whose identity-authority call carries it on (parent/child across
 * the hop, and in process); polls without a caller context are not traced; unsampled, malformed
 * and missing traceparents.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BRAND } from './brand.js';
import { close } from './http.js';
import { otlpReceiver } from './otlp-testing.js';
import { openStore, type Store } from '../store/factory.js';
import { inProcessIdentity } from '../identity/in-process.js';
import { startIdentityAuthority } from '../identity/server.js';
import { presentationFor, type AgentIdentity } from '../identity/client.js';
import { flushTracing, initTracing, injectTrace, shutdownTracing, startDecisionSpan, tracingMode } from './tracing.js';
import type { AnswerOf, Gatherer } from '../control-plane/decision/decide.js';
import { askingWithin } from '../control-plane/decision/gather.js';
import type { Question } from '../control-plane/decision/types.js';
import { eventually } from './poll-testing.js';
import { newTraceparent, twoOrMore } from './tracing-testing.js';
import { loadConfig } from './settings.js';

const tracingOf = (env: Record<string, string | undefined>) => loadConfig(env).tracing;

describe('OTLP export of identity-authority and decision spans', () => {
  let rx: Awaited<ReturnType<typeof otlpReceiver>>;
  let store: Store;
  let idp: Awaited<ReturnType<typeof startIdentityAuthority>>;
  let base: string;

  beforeAll(async () => {
    rx = await otlpReceiver();
    expect(initTracing(tracingOf({ OTEL_EXPORTER_OTLP_ENDPOINT: rx.url }), `${BRAND}-test`)).toBe(true);
    expect(tracingMode()).toBe('otlp');
    expect(initTracing({ mode: 'stdout' })).toBe(false);
    store = await openStore({ backend: 'memory' });
    idp = await startIdentityAuthority({ store, config: loadConfig({ IDP_ISSUER_HOST: 'idp.test' }), addr: '127.0.0.1:0' });
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
