/** The gRPC ext_authz listener over a real socket, called with @grpc/grpc-js as Envoy calls it. */
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../../lib/brand.js';
import { engineOf, type TestEngine } from '../decision/testkit.js';
import type { Service } from '../types.js';
import { RPC_OK, RPC_PERMISSION_DENIED, RPC_UNAUTHENTICATED } from './check.js';
import { createExtAuthzGrpcServer, type ExtAuthzGrpcServer } from './server.js';
import { asHttp, checkClient, checkRequest, type CheckClient, type WireCheckResponse } from './testing.js';

const services: Service[] = [
  { name: 'web', upstream: 'web.svc:80', public: true },
  { name: 'orders', upstream: 'orders.svc:8080' },
  { name: 'bot', upstream: 'bot.svc:80', kind: 'agent', allowTools: ['search', 'ledger'] },
  { name: 'search', upstream: 'search.svc:80', kind: 'tool' },
  { name: 'ledger', upstream: 'ledger.svc:80', kind: 'tool', dataClass: 'regulated' },
];

const OVERWRITE_IF_EXISTS_OR_ADD = 2;

function okHeaders(r: WireCheckResponse): Record<string, string> {
  expect(r.http_response).toBe('ok_response');
  return asHttp(r).headers;
}

/** Protobuf wire encoding by hand (varint tags, length-delimited fields): bytes as upstream Envoy would send them. */
function field(num: number, value: string | Buffer): Buffer {
  const body = typeof value === 'string' ? Buffer.from(value) : value;
  const varint = (n: number) => {
    const out: number[] = [];
    while (n > 127) {
      out.push((n & 127) | 128);
      n >>>= 7;
    }
    out.push(n);
    return Buffer.from(out);
  };
  return Buffer.concat([varint((num << 3) | 2), varint(body.length), body]);
}

function varintField(num: number, n: number): Buffer {
  return Buffer.from([(num << 3) | 0, n]);
}

describe('gRPC ext_authz listener', () => {
  let engine: TestEngine;
  let server: ExtAuthzGrpcServer;
  let client: CheckClient;
  let port: number;

  beforeAll(async () => {
    engine = engineOf(services, {
      identity: {
        verifyPresentation: async (vp) =>
          vp === 'vp-bot' ? { ok: true, agentName: 'bot', agentDid: 'did:key:z6Mkbot', reason: 'ok' } : { ok: false, reason: 'bad signature' },
        checkDelegation: async (q) =>
          q.task === 'approved' ? { ok: true, reason: 'approved delegation', delegationId: 'd1' } : { ok: false, reason: 'no approved delegation' },
      },
    });
    server = createExtAuthzGrpcServer(engine);
    port = await server.listen('127.0.0.1:0');
    client = checkClient(port);
  });
  afterAll(async () => {
    client.close();
    await server.close();
  });

  it('allow: status OK, the decision headers stamped upstream (overwriting), unstamped identity headers removed', async () => {
    const r = await client.check(
      checkRequest({ method: 'GET', path: '/api/items?x=1', host: 'web.svc:80', headers: { [H.service]: 'web', [H.subject]: 'forged-admin' } }),
    );
    expect(r.status?.code ?? RPC_OK).toBe(RPC_OK);
    const h = okHeaders(r);
    expect(h).toEqual({ [H.subject]: 'anonymous', [H.upstream]: 'web.svc:80', [H.policyVersion]: '1' });
    for (const o of r.ok_response!.headers!) expect(o.append_action).toBe(OVERWRITE_IF_EXISTS_OR_ADD);
    expect(r.ok_response!.headers_to_remove!.sort()).toEqual([H.actor, H.agentDid].sort());
    expect(asHttp(r).body).toEqual({ allow: true, reason: 'public service', rule: 'inline' });
  });

  it('egress allow stamps subject, upstream, actor and agent DID; one audit row per Check', async () => {
    const before = engine.audit.length;
    const r = await client.check(
      checkRequest({
        method: 'POST',
        path: '/v1/search',
        headers: { [H.actor]: 'bot', [H.service]: 'search', [H.onBehalfOf]: 'alice', [H.agentVp]: 'vp-bot' },
      }),
    );
    expect(okHeaders(r)).toEqual({
      [H.subject]: 'alice',
      [H.upstream]: 'search.svc:80',
      [H.actor]: 'bot',
      [H.agentDid]: 'did:key:z6Mkbot',
      [H.policyVersion]: '1',
    });
    expect(r.ok_response!.headers_to_remove ?? []).toEqual([]);
    expect(engine.audit.slice(before)).toMatchObject([{ action: 'tool.read', actor: 'bot', subject: 'alice', allow: true }]);
  });

  it('deny: PERMISSION_DENIED, denied_response 403 with the JSON body and X-Writ-Deny-Reason', async () => {
    const r = await client.check(checkRequest({ headers: { [H.service]: 'orders' } }));
    expect(r.status?.code).toBe(RPC_PERMISSION_DENIED);
    expect(r.status?.message).toBe('private service needs credentials');
    expect(r.http_response).toBe('denied_response');
    const d = r.denied_response!;
    expect(d.status?.code).toBe(403);
    expect(JSON.parse(d.body!)).toEqual({ allow: false, reason: 'private service needs credentials', rule: 'inline' });
    const h = asHttp(r).headers;
    expect(h['content-type']).toBe('application/json');
    expect(h[H.denyReason]).toBe('private service needs credentials');
    expect(h[H.policyVersion]).toBe('1');
    expect(h[H.upstream]).toBeUndefined();
    expect(h[H.needsApproval]).toBeUndefined();
  });

  it('needs approval: UNAUTHENTICATED, denied_response 401 with X-Writ-Needs-Approval: true', async () => {
    const r = await client.check(
      checkRequest({ headers: { [H.actor]: 'bot', [H.service]: 'ledger', [H.task]: 't1', [H.action]: 'ledger:read', [H.resource]: 'acct/1' } }),
    );
    expect(r.status?.code).toBe(RPC_UNAUTHENTICATED);
    expect(r.denied_response?.status?.code).toBe(401);
    const h = asHttp(r).headers;
    expect(h[H.needsApproval]).toBe('true');
    expect(JSON.parse(r.denied_response!.body!)).toMatchObject({ allow: false, rule: 'delegation' });
    // With the approved delegation the same call is allowed.
    const ok = await client.check(
      checkRequest({ headers: { [H.actor]: 'bot', [H.service]: 'ledger', [H.task]: 'approved', [H.action]: 'ledger:read', [H.resource]: 'acct/1' } }),
    );
    expect(okHeaders(ok)[H.actor]).toBe('bot');
  });

  it('a request without attributes, or with headers of the wrong shape, decides as a deny', async () => {
    for (const req of [{}, { attributes: {} }, { attributes: { request: { http: {} } } }, checkRequest({ headers: {} })]) {
      const r = await client.check(req);
      expect(r.status?.code).toBe(RPC_PERMISSION_DENIED);
      expect(r.denied_response?.status?.code).toBe(403);
      expect(asHttp(r).body).toMatchObject({ allow: false, rule: 'registry', reason: 'no target service named' });
    }
  });

  it('headers past 64 KiB are a 431 with no decision made, as the HTTP listener answers; just under, decided', async () => {
    const before = engine.audit.length;
    const bigs: Record<string, string>[] = [{ 'x-big': 'a'.repeat(64 * 1024) }, { 'x-a': 'a'.repeat(33 * 1024), 'x-b': 'b'.repeat(33 * 1024) }];
    for (const big of bigs) {
      const r = await client.check(checkRequest({ headers: { [H.service]: 'web', ...big } }));
      expect(r.status?.code).toBe(RPC_PERMISSION_DENIED);
      expect(r.denied_response?.status?.code).toBe(431);
      expect(asHttp(r).body).toEqual({ allow: false, reason: 'request headers larger than 65536 bytes', rule: 'inline' });
    }
    expect(engine.audit.length).toBe(before);
    const ok = await client.check(checkRequest({ headers: { [H.service]: 'web', 'x-big': 'a'.repeat(60 * 1024) } }));
    expect(ok.http_response).toBe('ok_response');
    expect(engine.audit.length).toBe(before + 1);
  });

  it('bytes that are not a CheckRequest fail that call only (INTERNAL), and the listener keeps answering', async () => {
    const err = await new Promise<grpc.ServiceError | null>((resolve) => {
      client.raw.makeUnaryRequest(
        '/envoy.service.auth.v3.Authorization/Check',
        (b: Buffer) => b,
        (b: Buffer) => b,
        Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]),
        (e) => resolve(e),
      );
    });
    expect(err?.code).toBe(grpc.status.INTERNAL);
    const r = await client.check(checkRequest({ headers: { [H.service]: 'web' } }));
    expect(r.http_response).toBe('ok_response');
  });

  it('decodes a CheckRequest with the upstream fields this server omits (source peer, request time, body, metadata)', async () => {
    const entry = (k: string, v: string) => field(3, Buffer.concat([field(1, k), field(2, v)]));
    const http = Buffer.concat([
      field(1, 'req-1'),
      field(2, 'POST'),
      entry(':authority', 'web.svc:80'),
      entry(H.service, 'web'),
      field(4, '/submit?draft=1'),
      field(5, 'web.svc:80'),
      varintField(9, 7),
      field(11, 'payload'),
    ]);
    const request = Buffer.concat([field(1, varintField(1, 42)), field(2, http)]);
    const source = field(1, Buffer.concat([field(2, 'frontend'), field(4, 'spiffe://cluster.local/ns/a/sa/frontend')]));
    const attrs = Buffer.concat([source, field(4, request), field(11, field(1, 'x'))]);
    const bytes = field(1, attrs);
    const decode = (b: Buffer) => b;
    const raw = await new Promise<Buffer>((resolve, reject) => {
      client.raw.makeUnaryRequest(
        '/envoy.service.auth.v3.Authorization/Check',
        (b: Buffer) => b,
        decode,
        bytes,
        (e, v) => (e ? reject(e) : resolve(v!)),
      );
    });
    // Field 1 of the answer is the google.rpc.Status; field 3 the OkHttpResponse (upstream numbers).
    expect(raw[0]).toBe((1 << 3) | 2);
    expect(raw.includes(Buffer.from('web.svc:80'))).toBe(true);
    const r = await client.check(checkRequest({ headers: { [H.service]: 'web' } }));
    expect(r.http_response).toBe('ok_response');
  });

  it('header_map (encode_raw_headers) is read like the headers map, raw values included', async () => {
    const r = await client.check({
      attributes: {
        request: {
          http: {
            method: 'GET',
            path: '/',
            header_map: {
              headers: [
                { key: 'X-Writ-Actor', raw_value: Buffer.from('bot') },
                { key: H.service, value: 'search' },
              ],
            },
          },
        },
      },
    });
    expect(okHeaders(r)[H.actor]).toBe('bot');
  });

  it('header_map keeps repeats apart: a scoping header on two lines is denied, one value with a comma is not', async () => {
    const withLines = (lines: { key: string; value: string }[]) =>
      client.check({
        attributes: {
          request: {
            http: { method: 'GET', path: '/', header_map: { headers: [{ key: H.actor, value: 'bot' }, { key: H.service, value: 'search' }, ...lines] } },
          },
        },
      });
    const twice = await withLines([
      { key: H.resource, value: 'index/a' },
      { key: 'X-Writ-Resource', value: 'secret/b' },
    ]);
    expect(asHttp(twice)).toMatchObject({
      status: 403,
      body: { rule: 'inline', reason: `${H.resource} sent more than once: the call is scoped by one value` },
    });
    expect((await withLines([{ key: H.resource, value: 'index/a, part 2' }])).http_response).toBe('ok_response');
    // Two credentials: which VP speaks for the agent would depend on the reader, so none does.
    const creds = await withLines([
      { key: 'authorization', value: 'Bearer a.b.c' },
      { key: 'Authorization', value: 'Bearer d.e.f' },
    ]);
    expect(asHttp(creds)).toMatchObject({
      status: 403,
      body: { rule: 'identity', reason: 'authorization sent more than once: one credential speaks for the agent' },
    });
  });

  it('the host of the request (:authority) picks the ingress target; x-forwarded-host only from a trusted peer', async () => {
    expect((await client.check(checkRequest({ host: 'web.svc:80', headers: {} }))).http_response).toBe('ok_response');
    const spoof = await client.check(checkRequest({ host: 'orders', headers: { 'x-forwarded-host': 'web' } }));
    expect(asHttp(spoof).body.reason).toBe('private service needs credentials');
    const trusting = createExtAuthzGrpcServer({ ...engine, trustedPeer: (a) => a === '127.0.0.1' || a === '::ffff:127.0.0.1' });
    const p = await trusting.listen('127.0.0.1:0');
    const c = checkClient(p);
    try {
      expect((await c.check(checkRequest({ host: 'orders', headers: { 'x-forwarded-host': 'web' } }))).http_response).toBe('ok_response');
    } finally {
      c.close();
      await trusting.close();
    }
  });

  it('health: SERVING while up, NOT_FOUND for another service, Watch streams SERVING then NOT_SERVING on close', async () => {
    expect(await client.health()).toBe(1);
    expect(await client.health('envoy.service.auth.v3.Authorization')).toBe(1);
    await expect(client.health('no.such.Service')).rejects.toMatchObject({ code: grpc.status.NOT_FOUND });

    const own = createExtAuthzGrpcServer(engine);
    const p = await own.listen('127.0.0.1:0');
    const c = checkClient(p);
    try {
      const seen: number[] = [];
      const stream = c.watch();
      const ended = new Promise<void>((resolve) => {
        stream.on('data', (m: { status?: number }) => seen.push(m.status ?? 0));
        stream.on('end', () => resolve());
        stream.on('error', () => resolve());
      });
      await expect.poll(() => seen).toEqual([1]);
      await own.close();
      await ended;
      expect(seen).toEqual([1, 2]);
    } finally {
      c.close();
      await own.close();
    }
  });

  it('a decision that throws is answered as a 403 deny, never a failed RPC', async () => {
    const broken = createExtAuthzGrpcServer({
      ...engine,
      policy: {
        get current(): never {
          throw new Error('snapshot unavailable');
        },
      },
    } as unknown as TestEngine);
    const p = await broken.listen('127.0.0.1:0');
    const c = checkClient(p);
    try {
      const r = await c.check(checkRequest({ headers: { [H.service]: 'web' } }));
      expect(r.status?.code).toBe(RPC_PERMISSION_DENIED);
      expect(asHttp(r)).toMatchObject({ status: 403, body: { allow: false, reason: 'internal decision error', rule: 'inline' } });
    } finally {
      c.close();
      await broken.close();
    }
  });

  it('listens on the Go-style address forms', async () => {
    const s = createExtAuthzGrpcServer(engine);
    const p = await s.listen(':0');
    const c = checkClient(p);
    try {
      expect(await c.health()).toBe(1);
    } finally {
      c.close();
      await s.close();
    }
    await expect(createExtAuthzGrpcServer(engine).listen('nonsense')).rejects.toThrow(/invalid listen address/);
  });
});
