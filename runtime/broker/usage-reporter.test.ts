/** The usage reporter against a real recording HTTP server: merge, batch, retry, no retry on 4xx, drop when full. */
import http from 'node:http';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { close, listen } from '../lib/http.js';
import { USAGE_BATCH_MAX, type UsageReport } from '../control-plane/types.js';
import { createUsageReporter } from './usage-reporter.js';

describe('usage reporter', () => {
  let server: http.Server;
  let url: string;
  /** Every report received, and the size of each post (1 for a lone report). */
  const posts: UsageReport[] = [];
  const sizes: number[] = [];
  /** Status answers by agent name; each entry is consumed by one post. */
  const answers = new Map<string, number[]>();
  const dispatcher = new Agent();

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const j = JSON.parse(body) as UsageReport | UsageReport[];
        const batch = Array.isArray(j) ? j : [j];
        posts.push(...batch);
        sizes.push(Array.isArray(j) ? j.length : 1);
        const status = answers.get(batch[0]!.agent)?.shift() ?? 200;
        res.writeHead(status, { 'content-type': 'application/json' });
        // Agent `partial`: the settlement at index 1 not written (the control plane's 503 names it).
        const unsettled = batch[0]!.agent === 'partial' && status === 503 ? { unsettled: [1] } : {};
        res.end(status === 200 ? '{"ok":true}' : JSON.stringify({ error: 'x', ...unsettled }));
      });
    });
    url = `http://127.0.0.1:${await listen(server, '127.0.0.1:0')}/v1/usage`;
  });
  afterAll(async () => {
    await dispatcher.close();
    await close(server);
  });

  it('merges reports of the same agent and model that land within the linger window', async () => {
    posts.length = 0;
    sizes.length = 0;
    const u = createUsageReporter({ url, dispatcher, lingerMs: 1000 });
    u.report({ agent: 'a', model: 'm', tokens: 10, costUsd: 0.1 });
    u.report({ agent: 'a', model: 'm', tokens: 5, costUsd: 0.2 });
    u.report({ agent: 'a', model: 'n', tokens: 1, costUsd: 0 });
    u.report({ agent: 'b', model: 'm', tokens: 2, costUsd: 0 });
    expect(posts).toEqual([]);
    expect(await u.flush()).toBe(true); // flush releases the lingering reports at once
    expect(posts.sort((x, y) => (x.agent + x.model).localeCompare(y.agent + y.model))).toEqual([
      { agent: 'a', model: 'm', tokens: 15, costUsd: 0.3 },
      { agent: 'a', model: 'n', tokens: 1, costUsd: 0 },
      { agent: 'b', model: 'm', tokens: 2, costUsd: 0 },
    ]);
    expect(u.stats()).toMatchObject({ sent: 3, failed: 0, queued: 0 });
    expect(sizes).toEqual([3]); // what lingered went out as one post
    await u.close();
  });

  it('posts settlements of reservations together, each whole, in batches of at most USAGE_BATCH_MAX', async () => {
    posts.length = 0;
    sizes.length = 0;
    const u = createUsageReporter({ url, dispatcher, lingerMs: 1000 });
    const n = USAGE_BATCH_MAX + 2;
    for (let i = 0; i < n; i++) u.report({ agent: 'a', model: 'm', tokens: i, costUsd: 0, reservation: `r${i}` });
    expect(await u.flush()).toBe(true);
    expect(sizes.sort((x, y) => y - x)).toEqual([USAGE_BATCH_MAX, 2]);
    expect(posts.map((p) => p.reservation).sort()).toEqual(Array.from({ length: n }, (_, i) => `r${i}`).sort());
    expect(posts.every((p) => p.tokens === Number(p.reservation!.slice(1)))).toBe(true);
    expect(u.stats()).toMatchObject({ sent: n, posts: 2, failed: 0, queued: 0 });
    await u.close();
  });

  it('a batch refused with a 4xx is posted again report by report: only the bad report is lost', async () => {
    posts.length = 0;
    sizes.length = 0;
    answers.set('bad-batch', [400, 400]); // the batch (first report's agent), then that report alone
    const u = createUsageReporter({ url, dispatcher, lingerMs: 1000 });
    u.report({ agent: 'bad-batch', model: 'm', tokens: 1, costUsd: 0, reservation: 'x1' });
    u.report({ agent: 'fine', model: 'm', tokens: 2, costUsd: 0, reservation: 'x2' });
    expect(await u.flush()).toBe(true);
    expect(sizes).toEqual([2, 1, 1]);
    expect(u.stats()).toMatchObject({ sent: 1, posts: 1, failed: 1 });
    await u.close();
  });

  it('drops the oldest batches, counting their reports, when more than maxQueue wait', async () => {
    // Nothing answers: the posts hang until their timeout, so the queue fills behind them.
    const silent = http.createServer(() => {});
    const port = await listen(silent, '127.0.0.1:0');
    const u = createUsageReporter({
      url: `http://127.0.0.1:${port}/v1/usage`,
      dispatcher,
      lingerMs: 0,
      concurrency: 1,
      maxQueue: 3,
      timeoutMs: 200,
      retryDelayMs: 5,
    });
    for (let i = 0; i < 6; i++) u.report({ agent: 'a', model: 'm', tokens: 1, costUsd: 0 });
    // One in flight, three waiting, two dropped.
    expect(u.stats()).toMatchObject({ dropped: 2, queued: 3, inFlight: 1 });
    await u.close(50);
    silent.closeAllConnections();
    await close(silent);
  });

  it('retries a 5xx once, never a 4xx, and refuses reports after close', async () => {
    posts.length = 0;
    answers.set('flaky', [503]);
    answers.set('bad', [400]);
    answers.set('down', [500, 500]);
    const u = createUsageReporter({ url, dispatcher, lingerMs: 0, retryDelayMs: 5 });
    u.report({ agent: 'flaky', model: 'm', tokens: 1, costUsd: 0 });
    u.report({ agent: 'bad', model: 'm', tokens: 1, costUsd: 0 });
    u.report({ agent: 'down', model: 'm', tokens: 1, costUsd: 0 });
    expect(await u.flush()).toBe(true);
    expect(posts.filter((p) => p.agent === 'flaky')).toHaveLength(2);
    expect(posts.filter((p) => p.agent === 'bad')).toHaveLength(1);
    expect(posts.filter((p) => p.agent === 'down')).toHaveLength(2);
    expect(u.stats()).toMatchObject({ sent: 1, failed: 2 });
    await u.close();
    u.report({ agent: 'late', model: 'm', tokens: 1, costUsd: 0 });
    expect(u.stats().dropped).toBe(1);
  });

  it('a 503 naming unsettled reports posts only those again: the rest of the batch counted once', async () => {
    posts.length = 0;
    answers.set('partial', [503]);
    const u = createUsageReporter({ url, dispatcher, lingerMs: 20, retryDelayMs: 5 });
    u.report({ agent: 'partial', model: 'm', tokens: 1, costUsd: 0 });
    u.report({ agent: 'partial', model: 'm', tokens: 2, costUsd: 0, reservation: 'r1' });
    u.report({ agent: 'partial', model: 'm', tokens: 3, costUsd: 0, reservation: 'r2' });
    expect(await u.flush()).toBe(true);
    expect(posts.map((p) => p.tokens)).toEqual([1, 2, 3, 2]);
    expect(u.stats()).toMatchObject({ sent: 3, failed: 0 });
    await u.close();
  });

  it('never throws when the control plane is unreachable', async () => {
    const dead = http.createServer();
    const port = await listen(dead, '127.0.0.1:0');
    await close(dead);
    const u = createUsageReporter({ url: `http://127.0.0.1:${port}/v1/usage`, dispatcher, lingerMs: 0, retryDelayMs: 5 });
    u.report({ agent: 'x', model: 'm', tokens: 1, costUsd: 0 });
    expect(await u.flush()).toBe(true);
    expect(u.stats()).toMatchObject({ sent: 0, failed: 1 });
    await u.close();
  });
});
