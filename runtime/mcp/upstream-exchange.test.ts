/**
 * Exchanged upstream tokens (issue 43 item 7): an MCP entry with `upstreamAuth: {exchange: true}`
 * gets, instead of anything of the agent's, a token Writ's authorization server minted for that
 * entry from the agent's own Writ access token (RFC 8693, the gateway the client). A recorder (a
 * real HTTP server) stands upstream of the MCP gateway of a real control plane that follows a real
 * identity authority over HTTP; the recorder verifies what it got independently with `jose`
 * against the published JWKS. One exchange serves many calls; the exchanged token is no agent
 * credential at Writ; a call without a Writ token, a revoked delegation, and an exchange the
 * authority refuses never reach the upstream. With WRIT_API_AUTH=keys only an enforcement point's
 * credential makes the onward exchange.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocalJWKSet, decodeJwt, jwtVerify } from 'jose';
import { close as closeServer, listen } from '../lib/http.js';
import { setLogLevel } from '../lib/log.js';
import { eventually } from '../lib/poll-testing.js';
import { agent, delegation, exchangeDelegation, ISSUER, openBed, postForm, type OAuthBed } from '../identity/oauth/oauth-testing.js';
import { presentationFor, type AgentIdentity } from '../identity/client.js';
import { VP_AUDIENCE } from '../lib/brand.js';
import { testBackends } from '../store/testing.js';
import { startFollowingPlane, type FollowingPlane } from '../control-plane/following-testing.js';
import { createLocalDecisionClient } from '../broker/decision-local.js';
import { startBroker, type RunningBroker } from '../broker/server.js';
import type { Service } from '../control-plane/types.js';
import { createMcpGateway } from './gateway.js';

const EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS = 'urn:ietf:params:oauth:token-type:access_token';

describe.each(testBackends())('exchanged upstream tokens on $name', (b) => {
  let bed: OAuthBed;
  let plane: FollowingPlane;
  let broker: RunningBroker;
  let recorder: http.Server;
  /** The same recorder on a port of its own: the plain HTTP tool the proxy resolves by host:port. */
  let httpRecorder: http.Server;
  let me: AgentIdentity;
  let recorderPort = 0;
  const got: { authorization: string | undefined; body: string }[] = [];

  beforeAll(async () => {
    setLogLevel('error');
    bed = await openBed(b);
    const record: http.RequestListener = (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        got.push({ authorization: req.headers.authorization, body });
        if (req.url !== '/mcp') return void res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
        const id = (JSON.parse(body) as { id: number }).id;
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'recorded' }] } }));
      });
    };
    recorder = http.createServer(record);
    httpRecorder = http.createServer(record);
    const port = await listen(recorder, '127.0.0.1:0');
    recorderPort = await listen(httpRecorder, '127.0.0.1:0');
    const mcp = (name: string): Service => ({ name, upstream: `127.0.0.1:${port}`, kind: 'tool', protocol: 'mcp', upstreamAuth: { exchange: true } });
    const entries: Service[] = [
      mcp('ex-mcp'),
      mcp('ex-gone'),
      // A plain HTTP tool reached through the forward proxy.
      { name: 'ex-http', upstream: `127.0.0.1:${recorderPort}`, kind: 'tool', upstreamAuth: { exchange: true } },
      { name: 'ex-bot', upstream: 'ex-bot.agents.svc:8080', kind: 'agent', allowTools: ['ex-mcp', 'ex-gone', 'ex-http'] },
    ];
    me = await agent(bed, 'ex-bot');
    for (const e of entries) bed.services.set(e.name, e);
    plane = await startFollowingPlane(bed, entries);
    const engine = plane.run.cp.plane.engine;
    broker = await startBroker({
      addr: '127.0.0.1:0',
      config: { models: [] },
      localDecisions: (timeoutMs) => createLocalDecisionClient(engine, { timeoutMs }),
      usageUrl: `http://127.0.0.1:${plane.run.cp.mgmtPort}/v1/usage`,
      mcp: createMcpGateway({ engine, authorizationServer: () => engine.ports.identity?.tokens?.().issuer() }),
    });
  }, 60_000);
  afterAll(async () => {
    await broker?.close(0);
    await plane?.close();
    if (recorder) await closeServer(recorder);
    if (httpRecorder) await closeServer(httpRecorder);
    await bed?.close();
  });

  /** The agent's own token for `audience`, exchanged from a delegation alice approved. */
  async function agentToken(audience: string, task: string): Promise<{ token: string; delegationId: string; vcJti: string }> {
    const d = await delegation(bed, 'ex-bot', { task, action: 'tools/call', resource: `${audience}/*` });
    const r = await exchangeDelegation(bed, me, d.vc!, audience);
    expect(r.status).toBe(200);
    return { token: r.json.access_token as string, delegationId: d.id, vcJti: d.vcJti! };
  }

  /** One tools/call through the gateway: status, WWW-Authenticate and the JSON-RPC answer. */
  async function call(service: string, headers: Record<string, string>, id = 1) {
    const r = await fetch(`http://127.0.0.1:${broker.port}/mcp/${service}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: {} } }),
    });
    return [r.status, r.headers.get('www-authenticate'), await r.json()] as const;
  }
  const recorded = (id: number) => ({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'recorded' }] } });

  it('the upstream gets a token for its own entry, of the same human and agent, that it verifies against the JWKS', async () => {
    const mine = await agentToken('ex-mcp', 'T-x1');
    // The plane reads the authority's key with its first poll.
    await eventually(async () => (await call('ex-mcp', { authorization: `Bearer ${mine.token}` }, 1))[0] === 200, 'the first call through');
    expect(await call('ex-mcp', { authorization: `Bearer ${mine.token}` }, 2)).toEqual([200, null, recorded(2)]);

    const sent = got.map((g) => g.authorization);
    expect(sent.length).toBe(2);
    // One exchange served both calls.
    expect(sent[0]).toBe(sent[1]);
    for (const g of got) expect(JSON.stringify(g)).not.toContain(mine.token);
    const upstreamToken = sent[0]!.replace(/^Bearer /, '');

    const jwks = createLocalJWKSet((await (await fetch(`http://127.0.0.1:${bed.port}/.well-known/jwks.json`)).json()) as never);
    const { payload, protectedHeader } = await jwtVerify(upstreamToken, jwks, { issuer: ISSUER, audience: 'ex-mcp', typ: 'at+jwt' });
    const own = decodeJwt(mine.token);
    expect({
      alg: protectedHeader.alg,
      sub: payload.sub,
      act: payload.act,
      client_id: payload.client_id,
      scope: payload.scope,
      delegation: (payload.delegation as { id: string; task: string }).id,
      task: (payload.delegation as { id: string; task: string }).task,
      outlivesAgentToken: payload.exp! > own.exp!,
      sameJti: payload.jti === own.jti,
    }).toEqual({
      alg: 'EdDSA',
      sub: 'alice',
      act: { sub: me.did, name: 'ex-bot' },
      client_id: 'writ-gateway',
      scope: 'tools/call',
      delegation: mine.delegationId,
      task: 'T-x1',
      outlivesAgentToken: false,
      sameJti: false,
    });
    const listed = await bed.api.get(`/v1/tokens?delegation=${mine.delegationId}`);
    expect((listed.json.tokens as { audience: string }[]).map((t) => t.audience)).toEqual(['ex-mcp', 'ex-mcp']);

    // Presented back to Writ (the upstream replaying it), it is no agent credential.
    const before = got.length;
    const back = await call('ex-mcp', { authorization: `Bearer ${upstreamToken}` }, 3);
    expect([back[0], (back[2] as { error: { message: string } }).error.message]).toEqual([
      401,
      'denied by policy: token was issued to "writ-gateway" for an upstream, not to the agent (audit record ' +
        (back[2] as { error: { data: { auditSeq: number } } }).error.data.auditSeq +
        ')',
    ]);
    expect(got.length).toBe(before);
  });

  it('the token endpoint refuses an onward exchange of an upstream token, for another entry, or of a revoked delegation', async () => {
    const mine = await agentToken('ex-mcp', 'T-x2');
    const onward = (subject: string, audience: string) =>
      postForm(bed, '/oauth/token', { grant_type: EXCHANGE, subject_token: subject, subject_token_type: ACCESS, audience });
    const first = await onward(mine.token, 'ex-mcp');
    expect(first.status).toBe(200);
    const rows = [
      ['upstream token', await onward(first.json.access_token as string, 'ex-mcp')],
      ['another entry', await onward(mine.token, 'ex-gone')],
    ] as const;
    expect((await bed.api.post('/v1/revoke', { vcJti: mine.vcJti })).status).toBe(200);
    const revoked = await onward(mine.token, 'ex-mcp');
    expect([...rows, ['revoked delegation', revoked] as const].map(([what, r]) => [what, r.status, r.json])).toEqual([
      [
        'upstream token',
        400,
        { error: 'invalid_grant', error_description: 'subject_token was itself issued for an upstream: only an agent token is exchanged' },
      ],
      [
        'another entry',
        400,
        { error: 'invalid_target', error_description: "the agent token is for 'ex-mcp': it is exchanged only for the entry it was issued for" },
      ],
      ['revoked delegation', 400, { error: 'invalid_grant', error_description: 'subject_token: delegation revoked' }],
    ]);
  });

  it('revoking the agent token (RFC 7009) makes the token exchanged from it inactive too, for an upstream that introspects', async () => {
    const mine = await agentToken('ex-mcp', 'T-x6');
    const first = await postForm(bed, '/oauth/token', { grant_type: EXCHANGE, subject_token: mine.token, subject_token_type: ACCESS, audience: 'ex-mcp' });
    const exchanged = first.json.access_token as string;
    expect(decodeJwt(exchanged).parent_jti).toBe(decodeJwt(mine.token).jti);
    const introspect = async () => (await postForm(bed, '/oauth/introspect', { token: exchanged })).json;
    expect(await introspect()).toMatchObject({ active: true, client_id: 'writ-gateway' });
    expect((await postForm(bed, '/oauth/revoke', { token: mine.token })).status).toBe(200);
    expect(await introspect()).toEqual({ active: false });
  });

  it('a revoked delegation: no exchanged token, the call refused before the upstream', async () => {
    const mine = await agentToken('ex-mcp', 'T-x3');
    expect((await bed.api.post('/v1/revoke', { vcJti: mine.vcJti })).status).toBe(200);
    const before = got.length;
    // Refused by the decision once the revocation feed has it, by the exchange before then: never upstream.
    const last = await eventually(async () => {
      const r = await call('ex-mcp', { authorization: `Bearer ${mine.token}` }, 4);
      return r[0] === 401 ? r : undefined;
    }, 'the revocation at the gateway');
    expect([last[0], (last[2] as { error: { data: { reason: string } } }).error.data.reason]).toEqual([401, 'invalid access token: delegation revoked']);
    expect(got.length).toBe(before);
    const listed = await bed.api.get(`/v1/tokens?delegation=${mine.delegationId}`);
    expect((listed.json.tokens as unknown[]).length).toBe(1);
  });

  it('an exchange the authority refuses is a JSON-RPC refusal; a call without a Writ token gets the challenge', async () => {
    const gone = await agentToken('ex-gone', 'T-x4');
    // The authority's registry no longer has the entry; the control plane's still does.
    bed.services.delete('ex-gone');
    const before = got.length;
    const refusedGone = await call('ex-gone', { authorization: `Bearer ${gone.token}` }, 5);
    const goneWhy = "token exchange for ex-gone refused: identity authority answered 400 invalid_target: unknown registry entry 'ex-gone'";
    const goneSeq = (refusedGone[2] as { error: { data: { auditSeq: number } } }).error.data.auditSeq;
    expect(refusedGone).toEqual([
      403,
      null,
      {
        jsonrpc: '2.0',
        id: 5,
        error: { code: -32001, message: `${goneWhy} (audit record ${goneSeq})`, data: { rule: 'identity', reason: goneWhy, auditSeq: goneSeq } },
      },
    ]);
    const meta = `http://127.0.0.1:${broker.port}/.well-known/oauth-protected-resource/mcp/ex-mcp`;
    const refusedBare = await call('ex-mcp', { 'x-writ-actor': 'ex-bot' }, 6);
    const bareWhy = "ex-mcp takes a token exchanged from the agent's Writ access token: call with one (Authorization: Bearer)";
    const bareSeq = (refusedBare[2] as { error: { data: { auditSeq: number } } }).error.data.auditSeq;
    expect(refusedBare).toEqual([
      401,
      `Bearer resource_metadata="${meta}"`,
      {
        jsonrpc: '2.0',
        id: 6,
        error: { code: -32001, message: `${bareWhy} (audit record ${bareSeq})`, data: { rule: 'identity', reason: bareWhy, auditSeq: bareSeq } },
      },
    ]);
    expect(got.length).toBe(before);
    // The chain records both calls as the denials they were, not as allows.
    const records = (await (await fetch(`http://127.0.0.1:${plane.run.cp.mgmtPort}/v1/audit?limit=1000`)).json()) as {
      seq: number;
      allow: boolean;
      rule: string;
      reason: string;
    }[];
    for (const [seq, why] of [
      [goneSeq, goneWhy],
      [bareSeq, bareWhy],
    ] as const)
      expect(records.find((r) => r.seq === seq)).toMatchObject({ allow: false, rule: 'identity', reason: why });
  });

  it('through the forward proxy (plain HTTP): the upstream gets the exchanged token; a VP is refused before it', async () => {
    const mine = await agentToken('ex-http', 'T-x5');
    const viaProxy = (headers: Record<string, string>) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const target = `http://127.0.0.1:${recorderPort}/data`;
        const req = http.request(
          { host: '127.0.0.1', port: plane.run.gateway.port, method: 'GET', path: target, headers: { host: `127.0.0.1:${recorderPort}`, ...headers } },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
          },
        );
        req.on('error', reject);
        req.end();
      });
    expect(await viaProxy({ 'proxy-authorization': `Bearer ${mine.token}` })).toEqual({ status: 200, body: 'ok' });
    const sent = got.at(-1)!.authorization!.replace(/^Bearer /, '');
    expect(sent).not.toBe(mine.token);
    const c = decodeJwt(sent);
    expect([c.aud, c.sub, c.act, c.client_id]).toEqual(['ex-http', 'alice', { sub: me.did, name: 'ex-bot' }, 'writ-gateway']);

    const before = got.length;
    const vp = await presentationFor(me, { audience: VP_AUDIENCE });
    expect(await viaProxy({ 'proxy-authorization': `Bearer ${vp}` })).toEqual({
      status: 403,
      body: JSON.stringify({ error: "ex-http takes a token exchanged from the agent's Writ access token: call with one" }),
    });
    expect(got.length).toBe(before);
    // Recorded as the deny it is (settled before the decision was committed), not as an allow.
    const records = (await (await fetch(`http://127.0.0.1:${plane.run.cp.mgmtPort}/v1/audit?limit=1000`)).json()) as {
      action: string;
      allow: boolean;
      rule: string;
      reason: string;
    }[];
    expect(records.filter((r) => r.action === 'egress.proxy').at(-1)).toMatchObject({
      allow: false,
      rule: 'identity',
      reason: "ex-http takes a token exchanged from the agent's Writ access token: call with one",
    });
  });
});

describe.each(testBackends())('the onward exchange with WRIT_API_AUTH=keys on $name', (b) => {
  const KEY = 'bootstrap-key-for-the-onward-exchange-test';
  let bed: OAuthBed;
  beforeAll(async () => {
    setLogLevel('error');
    bed = await openBed(b, { WRIT_API_AUTH: 'keys', WRIT_BOOTSTRAP_ADMIN_KEY: KEY });
  }, 60_000);
  afterAll(async () => bed?.close());

  it("only an enforcement point's credential exchanges an agent token for an upstream; the agent's own exchange stays public", async () => {
    const me = await agent(bed, 'ex-keyed', ['ex-keyed-mcp']);
    bed.services.set('ex-keyed-mcp', { name: 'ex-keyed-mcp', upstream: 'k.tools:80', kind: 'tool', protocol: 'mcp', upstreamAuth: { exchange: true } });
    const d = await delegation(bed, 'ex-keyed', { task: 'T-k', action: 'tools/call', resource: 'ex-keyed-mcp/*' });
    const own = await exchangeDelegation(bed, me, d.vc!, 'ex-keyed-mcp');
    const form = { grant_type: EXCHANGE, subject_token: own.json.access_token as string, subject_token_type: ACCESS, audience: 'ex-keyed-mcp' };
    const rows = [
      ['none', await postForm(bed, '/oauth/token', form)],
      ['the agent token itself', await postForm(bed, '/oauth/token', form, { authorization: `Bearer ${form.subject_token}` })],
      ['the bootstrap key', await postForm(bed, '/oauth/token', form, { authorization: `Bearer ${KEY}` })],
    ] as const;
    expect([own.status, ...rows.map(([who, r]) => [who, r.status, r.json.error ?? r.json.token_type, r.headers.get('www-authenticate')])]).toEqual([
      200,
      ['none', 401, 'invalid_client', 'Bearer error="invalid_client"'],
      ['the agent token itself', 401, 'invalid_client', 'Bearer error="invalid_client"'],
      ['the bootstrap key', 200, 'Bearer', null],
    ]);
  });
});
