/**
 * Fire-and-forget shipping of usage reports to the control plane's `POST /v1/usage` (SPEC 4.3).
 * The response to the agent never waits on it. Reports linger a few milliseconds (`lingerMs`,
 * like a producer's linger) so that completions of the same agent and model landing together go
 * out as one summed report: the endpoint is additive (budget meters and counters add), so the
 * control plane sees the same totals with far fewer posts under load. Then they go into a bounded queue (oldest dropped
 * when full, counted and logged), a few are posted at a time, a failed post (network, timeout,
 * 5xx) is retried once after a short pause, a 4xx is not retried. Nothing here throws.
 */
import { request, type Dispatcher } from 'undici';
import { errMsg, logger } from '../lib/log.js';
import type { UsageReport } from '../control-plane/types.js';

const log = logger('broker.usage');

export interface UsageReporterOptions {
  url: string;
  dispatcher: Dispatcher;
  /** WRIT_API_KEY: presented to the management listener. */
  apiKey?: string;
  /** Largest number of reports waiting (default 10 000). */
  maxQueue?: number;
  /** Posts in flight at once (default 4). */
  concurrency?: number;
  /** Per-post timeout (default 2000 ms). */
  timeoutMs?: number;
  /** Pause before the single retry (default 250 ms). */
  retryDelayMs?: number;
  /** How long a report waits for others of the same agent and model to merge with (default 10 ms; 0 posts each alone). */
  lingerMs?: number;
}

export interface UsageStats {
  sent: number;
  failed: number;
  dropped: number;
  queued: number;
  inFlight: number;
}

export interface UsageReporter {
  report(r: UsageReport): void;
  stats(): UsageStats;
  /** Resolves when everything queued has been attempted, or after `timeoutMs`. */
  flush(timeoutMs?: number): Promise<boolean>;
  close(timeoutMs?: number): Promise<void>;
}

type Outcome = 'ok' | 'retry' | 'fail';

export function createUsageReporter(o: UsageReporterOptions): UsageReporter {
  const url = new URL(o.url);
  const origin = url.origin;
  const path = url.pathname + url.search;
  const maxQueue = o.maxQueue ?? 10_000;
  const concurrency = o.concurrency ?? 4;
  const timeoutMs = o.timeoutMs ?? 2000;
  const retryDelayMs = o.retryDelayMs ?? 250;
  const lingerMs = o.lingerMs ?? 10;
  // WRIT_API_KEY for a management listener with WRIT_API_AUTH=keys (scope usage:write).
  const headers: Record<string, string> = { 'content-type': 'application/json', ...(o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {}) };
  const pending = new Map<string, UsageReport>();
  let lingerTimer: NodeJS.Timeout | undefined;
  const queue: { r: UsageReport; attempt: number }[] = [];
  const stats = { sent: 0, failed: 0, dropped: 0 };
  let inFlight = 0;
  let closed = false;
  let lastDropLog = 0;
  const idleWaiters = new Set<() => void>();
  const timers = new Set<NodeJS.Timeout>();

  const isIdle = () => queue.length === 0 && inFlight === 0 && timers.size === 0 && pending.size === 0;

  /** Moves the lingering reports into the send queue. */
  function release(): void {
    if (lingerTimer) clearTimeout(lingerTimer);
    lingerTimer = undefined;
    const items = [...pending.values()];
    pending.clear();
    for (const r of items) enqueue({ r, attempt: 0 });
    notifyIdle();
  }

  function linger(r: UsageReport): void {
    // A report settling a reservation is never merged (each settles its own).
    const key = `${r.agent}\u0000${r.model}\u0000${r.reservation ?? ''}`;
    const prev = pending.get(key);
    if (prev) {
      prev.tokens += r.tokens;
      prev.costUsd = Math.round((prev.costUsd + r.costUsd) * 1e9) / 1e9;
    } else {
      pending.set(key, { ...r });
      if (pending.size >= maxQueue) return release();
    }
    lingerTimer ??= setTimeout(release, lingerMs);
  }
  const notifyIdle = () => {
    if (!isIdle()) return;
    for (const w of idleWaiters) w();
    idleWaiters.clear();
  };

  async function post(r: UsageReport): Promise<Outcome> {
    try {
      const res = await request(origin + path, {
        method: 'POST',
        headers,
        body: JSON.stringify(r),
        dispatcher: o.dispatcher,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      res.body.resume();
      if (res.statusCode >= 200 && res.statusCode < 300) return 'ok';
      if (res.statusCode >= 500 || res.statusCode === 429) {
        log.warn('usage post failed', { status: res.statusCode, agent: r.agent });
        return 'retry';
      }
      log.error('usage report rejected', { status: res.statusCode, agent: r.agent, model: r.model });
      return 'fail';
    } catch (e) {
      log.warn('usage post failed', { err: errMsg(e), agent: r.agent });
      return 'retry';
    }
  }

  function pump(): void {
    while (inFlight < concurrency && queue.length > 0) {
      const item = queue.shift()!;
      inFlight++;
      void post(item.r).then((out) => {
        inFlight--;
        if (out === 'ok') stats.sent++;
        else if (out === 'retry' && item.attempt === 0 && !closed) {
          const t = setTimeout(() => {
            timers.delete(t);
            enqueue({ r: item.r, attempt: 1 });
          }, retryDelayMs);
          timers.add(t);
        } else {
          stats.failed++;
          if (out === 'retry') log.error('usage report lost after retry', { agent: item.r.agent, model: item.r.model, tokens: item.r.tokens });
        }
        pump();
        notifyIdle();
      });
    }
  }

  function enqueue(item: { r: UsageReport; attempt: number }): void {
    if (queue.length >= maxQueue) {
      queue.shift();
      stats.dropped++;
      const now = Date.now();
      if (now - lastDropLog > 5000) {
        lastDropLog = now;
        log.error('usage queue full: dropping oldest reports', { maxQueue, dropped: stats.dropped });
      }
    }
    queue.push(item);
    pump();
  }

  return {
    report(r) {
      if (closed) {
        stats.dropped++;
        return;
      }
      if (lingerMs > 0) linger(r);
      else enqueue({ r, attempt: 0 });
    },
    stats: () => ({ ...stats, queued: queue.length + pending.size, inFlight }),
    flush(ms = 5000) {
      if (pending.size) release();
      if (isIdle()) return Promise.resolve(true);
      return new Promise<boolean>((resolve) => {
        const done = () => {
          clearTimeout(t);
          resolve(true);
        };
        const t = setTimeout(() => {
          idleWaiters.delete(done);
          resolve(false);
        }, ms);
        idleWaiters.add(done);
      });
    },
    async close(ms = 5000) {
      // Retries scheduled before close still run (flush waits for them); new reports are refused.
      const ok = await this.flush(ms);
      closed = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      if (!ok) log.warn('usage reports not delivered at shutdown', { queued: queue.length, inFlight });
    },
  };
}
