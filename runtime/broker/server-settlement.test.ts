/**
 * Settlements the broker owes outside the usual reply, over real sockets (server-testing.ts):
 * an /authz allow that comes after the broker gave up has its reservation given back through the
 * usage reporter, and a stream still running when the broker shuts down is settled before the
 * reporter closes.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { close, listen } from '../lib/http.js';
import type { Budget } from '../control-plane/types.js';
import { asApiError, deferred, promptEstimate, startBrokerHarness, unexpected, type BrokerHarness } from './server-testing.js';

describe('model broker: settlements owed', () => {
  let t: BrokerHarness;
  beforeAll(async () => {
    t = await startBrokerHarness();
  });
  afterAll(() => t?.close());

  const agent = (name: string, budget: Budget) => t.agent(name, budget, ['gpt-mini', 'gpt-gated']);
  const used = (name: string) => t.used(name).tokensLastHour;
  const brokerOn = (authzUrl: string, decisionTimeoutMs = 2000) => t.anotherBroker({ authzUrl, providerKey: 'sk-broker', decisionTimeoutMs });

  it('gives back the reservation of an /authz allow that comes after the broker gave up (503)', async () => {
    await agent('tardy', { tokensPerHour: 1_000_000 });
    // The real /authz behind a hop that holds each answer 300 ms: the broker waits 100.
    const answered = deferred<number>();
    const slow = http.createServer((req, res) => {
      req.resume();
      setTimeout(() => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && !['host', 'connection'].includes(k)) headers[k] = v;
        void fetch(`http://127.0.0.1:${t.cp.decisionPort}/authz`, { headers }).then(async (r) => {
          const body = await r.text();
          res.writeHead(r.status, Object.fromEntries([...r.headers].filter(([k]) => k.startsWith('x-') || k === 'content-type')));
          res.end(body);
          // The plane has reserved the call's worst case by now.
          answered.resolve(used('tardy'));
        });
      }, 300);
    });
    const b = await brokerOn(`http://127.0.0.1:${await listen(slow, '127.0.0.1:0')}/authz`, 100);
    try {
      const seen = t.seen.length;
      const err = await t
        .agentClient('tardy', { baseURL: `http://127.0.0.1:${b.port}/v1` })
        .chat.completions.create({ model: 'gpt-mini', messages: [{ role: 'user', content: 'hi' }] })
        .then(unexpected, asApiError);
      expect(err.status).toBe(503);
      expect(err.code).toBe('decision_unavailable');
      expect(err.message).toMatch(/decision timed out after 100 ms/);
      expect(await answered.promise).toBeGreaterThan(16_384);
      // Released (settled to nothing) once the late allow arrived; the provider never called.
      await expect.poll(() => used('tardy'), { timeout: 5000 }).toBe(0);
      expect(t.seen.length).toBe(seen);
    } finally {
      await b.close(100);
      await close(slow);
    }
  });

  it('settles a stream still running at shutdown before the usage reporter closes', async () => {
    await agent('lingerer', { tokensPerHour: 1_000_000 });
    const b = await brokerOn(`http://127.0.0.1:${t.cp.decisionPort}/authz`);
    t.gate = deferred();
    t.gatedClosed = deferred();
    const body = { model: 'gpt-gated', stream: true as const, messages: [{ role: 'user' as const, content: 'hi' }] };
    try {
      const stream = await t.agentClient('lingerer', { baseURL: `http://127.0.0.1:${b.port}/v1` }).chat.completions.create(body);
      const it = stream[Symbol.asyncIterator]();
      expect((await it.next()).value?.choices[0]?.delta.content).toBe('first');
      // The worst case is held while the stream runs.
      expect(used('lingerer')).toBeGreaterThan(16_384);
      const reading = it.next().catch((e: unknown) => e);
      // Shut down with the stream open: cut after 50 ms, settled, then the reporter closes.
      await b.close(50);
      await reading;
      await t.gatedClosed.promise;
      // Settled to the estimate: the request's bytes / 4 and 'first' (2 tokens).
      await expect.poll(() => used('lingerer'), { timeout: 5000 }).toBe(promptEstimate(body) + 2);
    } finally {
      t.gate.resolve();
      await b.close(0);
    }
  });
});
