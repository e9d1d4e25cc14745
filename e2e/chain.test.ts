/**
 * The whole egress chain on loopback sockets: an agent (the official `openai` SDK, no key of its
 * own) -> sidecar (mints a Membership VP per request from a real provisioned identity file) ->
 * forward proxy (verifies the VP with the real identity authority, egress decision, audit
 * `egress.proxy`) -> model broker (its own `/authz` decision, audit `model.invoke`, provider key)
 * -> a local OpenAI-compatible upstream; the usage lands in the control plane's budget meter and
 * the next call over budget is refused.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { close, listen } from '../runtime/lib/http.js';
import { openStore, type Store } from '../runtime/store/factory.js';
import { createIdentityAuthority, type IdentityAuthority } from '../runtime/identity/server.js';
import { startControlPlaneWithEgress, type RunningWithEgress } from '../runtime/control-plane/egress-gateway.js';
import { inProcessIdentity, provisionAgent } from '../runtime/control-plane/proxy/testkit.js';
import type { AuditRecord } from '../runtime/control-plane/types.js';
import { parseConfig } from '../runtime/broker/config.js';
import { startBroker, type RunningBroker } from '../runtime/broker/server.js';
import { startSidecar, type RunningSidecar } from '../sidecar/server.js';
import { loadConfig } from '../runtime/lib/settings.js';

const PROVIDER_KEY = 'sk-chain-provider-key';
const USAGE = { prompt_tokens: 30, completion_tokens: 10, total_tokens: 40 };

async function until(f: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!f()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('agent -> sidecar -> forward proxy -> broker -> provider', () => {
  let dir: string;
  let store: Store;
  let authority: IdentityAuthority;
  let run: RunningWithEgress;
  let upstream: http.Server;
  let broker: RunningBroker;
  let sidecar: RunningSidecar;
  let agent: OpenAI;
  const upstreamAuth: (string | undefined)[] = [];
  const brokerSaw: http.IncomingHttpHeaders[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'writ-chain-'));
    store = await openStore({ backend: 'memory' });
    authority = createIdentityAuthority({ store, config: loadConfig({ IDP_ISSUER_HOST: 'idp.test' }) });
    const { identity } = await provisionAgent(authority, 'bot');
    const idFile = join(dir, 'identity.json');
    writeFileSync(idFile, JSON.stringify(identity));

    upstream = http.createServer((req, res) => {
      let text = '';
      req.on('data', (c: Buffer) => (text += c.toString()));
      req.on('end', () => {
        upstreamAuth.push(req.headers.authorization);
        const body = JSON.parse(text) as { stream?: boolean; stream_options?: { include_usage?: boolean } };
        if (body.stream) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          for (const c of ['chained', ' stream']) {
            res.write(
              `data: ${JSON.stringify({ id: 's', object: 'chat.completion.chunk', created: 1, model: 'p', choices: [{ index: 0, delta: { content: c }, finish_reason: null }] })}\n\n`,
            );
          }
          if (body.stream_options?.include_usage)
            res.write(`data: ${JSON.stringify({ id: 's', object: 'chat.completion.chunk', created: 1, model: 'p', choices: [], usage: USAGE })}\n\n`);
          return res.end('data: [DONE]\n\n');
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            id: 'c',
            object: 'chat.completion',
            created: 1,
            model: 'p',
            choices: [{ index: 0, message: { role: 'assistant', content: 'chained hello', refusal: null }, finish_reason: 'stop', logprobs: null }],
            usage: USAGE,
          }),
        );
      });
    });
    const upPort = await listen(upstream, '127.0.0.1:0');

    run = await startControlPlaneWithEgress({
      store,
      // vc mode: every decision (the proxy's and the broker's) needs a verified VP.
      config: loadConfig({ AGENT_IDENTITY_MODE: 'vc' }),
      identity: inProcessIdentity(authority),
      decisionAddr: '127.0.0.1:0',
      mgmtAddr: '127.0.0.1:0',
      proxyAddr: '127.0.0.1:0',
    });
    broker = await startBroker({
      addr: '127.0.0.1:0',
      config: parseConfig({
        models: [
          {
            name: 'gpt-mini',
            model: 'provider-mini',
            apiBase: `http://127.0.0.1:${upPort}/v1`,
            priceInputPer1k: 0.5,
            priceOutputPer1k: 1.5,
            maxOutputTokens: 10,
          },
        ],
      }),
      authzUrl: `http://127.0.0.1:${run.cp.decisionPort}/authz`,
      usageUrl: `http://127.0.0.1:${run.cp.mgmtPort}/v1/usage`,
      providerKey: PROVIDER_KEY,
    });
    broker.server.prependListener('request', (req: http.IncomingMessage) => void brokerSaw.push(req.headers));
    const reg = run.cp.plane.registry;
    await reg.upsert({ name: 'broker', upstream: `127.0.0.1:${broker.port}`, kind: 'service' });
    await reg.upsert({ name: 'gpt-mini', upstream: `127.0.0.1:${broker.port}`, kind: 'model' });
    await reg.upsert({
      name: 'bot',
      upstream: 'bot.agents.svc:8080',
      kind: 'agent',
      egressAllow: ['broker'],
      allowModels: ['gpt-mini'],
      budget: { tokensPerHour: 160 },
    });

    sidecar = await startSidecar({
      addr: '127.0.0.1:0',
      identityFile: idFile,
      brokerUrl: `http://127.0.0.1:${broker.port}`,
      proxyUrl: `http://127.0.0.1:${run.gateway.port}`,
    });
    // The agent holds no provider key and names no actor: the sidecar and the proxy supply identity.
    agent = new OpenAI({ apiKey: 'no-key-in-the-pod', baseURL: `http://127.0.0.1:${sidecar.port}/v1`, maxRetries: 0 });
  });

  afterAll(async () => {
    await sidecar?.close();
    await broker?.close(500);
    await run?.close();
    if (upstream) await close(upstream);
    await authority?.close();
    await store?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const used = () => run.cp.plane.budget.usage('bot', Date.now());
  const audit = async () => (await (await fetch(`http://127.0.0.1:${run.cp.mgmtPort}/v1/audit?limit=1000`)).json()) as AuditRecord[];

  it('completes through the chain; both hops decide and audit; the provider sees only the broker key; usage lands', async () => {
    const r = await agent.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hello' }] });
    expect(r.choices[0]?.message.content).toBe('chained hello');
    expect(upstreamAuth.at(-1)).toBe(`Bearer ${PROVIDER_KEY}`);
    // The broker got the proxy-verified actor, never the proxy credential.
    const h = brokerSaw.at(-1)!;
    expect(h[H.actor]).toBe('bot');
    expect(h['proxy-authorization']).toBeUndefined();
    await until(() => used().tokensLastHour === 40, 'usage in the budget meter');
    expect(used().costUsdLastDay).toBeCloseTo((30 * 0.5 + 10 * 1.5) / 1000, 9);
    const rows = await audit();
    expect(rows.some((a) => a.action === 'egress.proxy' && a.actor === 'bot' && a.service === 'broker' && a.allow)).toBe(true);
    expect(rows.some((a) => a.action === 'model.invoke' && a.actor === 'bot' && a.service === 'gpt-mini' && a.allow)).toBe(true);
  });

  it('streams through the chain', async () => {
    const stream = await agent.chat.completions.create({ model: 'gpt-mini', stream: true, messages: [{ role: 'user', content: 'hello' }] });
    let text = '';
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? '';
      expect(c.usage ?? undefined).toBeUndefined();
    }
    expect(text).toBe('chained stream');
    await until(() => used().tokensLastHour === 80, 'stream usage in the budget meter');
  });

  it('a call that skips the sidecar and the proxy is refused by the broker (vc mode: no VP)', async () => {
    const direct = new OpenAI({ apiKey: 'x', baseURL: `http://127.0.0.1:${broker.port}/v1`, maxRetries: 0, defaultHeaders: { [H.actor]: 'bot' } });
    const e = await direct.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'sneaky' }] }).then(
      () => undefined,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect((e as Error).message).toMatch(/agent VP or access token required/);
  });

  it('refuses the next call whose worst case no longer fits the budget (reserved before the provider)', async () => {
    const r = await agent.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'third' }] });
    expect(r.choices[0]?.message.content).toBe('chained hello');
    await until(() => used().tokensLastHour === 120, 'usage of three calls');
    const n = upstreamAuth.length;
    const e = await agent.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'fourth' }] }).then(
      () => undefined,
      (x: unknown) => x,
    );
    // 120 used of 160: the fourth call's worst case (its request bytes + 10 output tokens) does not fit.
    expect(e).toBeInstanceOf(OpenAI.RateLimitError);
    expect((e as InstanceType<typeof OpenAI.APIError>).code).toBe('budget_exceeded');
    expect((e as Error).message).toMatch(/tokensPerHour budget of agent bot: this call needs up to \d+ of 160 tokens per hour and 120 are used or reserved/);
    expect(upstreamAuth.length).toBe(n);
  });

  it('one completion is one call: callsPerHour 1 allows the first completion through both hops and denies the second', async () => {
    const reg = run.cp.plane.registry;
    const before = used().callsLastHour;
    await reg.upsert({
      name: 'bot',
      upstream: 'bot.agents.svc:8080',
      kind: 'agent',
      egressAllow: ['broker'],
      allowModels: ['gpt-mini'],
      budget: { tokensPerHour: 1_000_000, callsPerHour: before + 1 },
    });
    const seq = (await audit()).at(-1)!.seq;
    const r = await agent.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'counted once' }] });
    expect(r.choices[0]?.message.content).toBe('chained hello');
    expect(used().callsLastHour).toBe(before + 1);
    const rows = (await audit()).filter((a) => a.seq > seq && a.actor === 'bot');
    const calls = rows.filter((a) => a.allow && !/counted by the proxy hop/.test(a.reason));
    expect(calls.map((a) => a.action)).toEqual(['egress.proxy']);
    expect(rows.filter((a) => a.action === 'model.invoke' && a.allow).map((a) => a.reason)).toEqual([
      'allowed by registry allowlist and budget (call counted by the proxy hop)',
    ]);
    // The broker never saw a ticket the agent could have sent: the proxy stamped it on its hop.
    expect(typeof brokerSaw.at(-1)![H.callTicket]).toBe('string');
    const e = await agent.chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'one too many' }] }).then(
      () => undefined,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect((e as InstanceType<typeof OpenAI.PermissionDeniedError>).headers?.get(H.denyReason) ?? (e as Error).message).toMatch(/call budget exceeded/);
    expect(used().callsLastHour).toBe(before + 1);
  });
});
