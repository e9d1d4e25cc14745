/**
 * Fire-and-forget shipping of usage reports to the control plane's `POST /v1/usage` (SPEC 4.3),
 * or in the all-in-one to the same recording in process (`deliver`, usage-local.ts). The response
 * to the agent never waits on it. Reports linger a few milliseconds (`lingerMs`,
 * like a producer's linger): completions of the same agent and model landing together become one
 * summed report (the endpoint is additive: budget meters and counters add), and what lingered
 * goes out as one post, an array of up to USAGE_BATCH_MAX reports (a settlement of a budget
 * reservation is never summed: each settles its own). One post per completion cost the broker a
 * quarter of a millisecond at p50 and ~2.5 ms at p99 (bench/broker). Batches go into a bounded
 * queue (oldest dropped when full, counted and logged), a few are posted at a time, a failed post
 * (network, timeout, 5xx) is retried once after a short pause, a 4xx is not retried (a batch
 * refused with a 4xx is posted again report by report, so one bad report loses only itself); a
 * 503 naming its `unsettled` reports (settlements the budget store could not take) retries only
 * those: the rest of the batch was counted, and counting a report twice would overcharge.
 * Nothing here throws.
 */
import { request, type Dispatcher } from 'undici';
import { errMsg, logger } from '../lib/log.js';
import { USAGE_BATCH_MAX, type UsageReport } from '../control-plane/types.js';

const log = logger('broker.usage');

/**
 * What delivering one batch came to: delivered, worth one retry, refused for good, or delivered
 * but for the reports listed (settlements the control plane could not write: only they are
 * worth the retry, the rest counted already).
 */
export type Outcome = 'ok' | 'retry' | 'fail' | { retry: UsageReport[] };
/** Delivers one batch: the HTTP post below, or the recording in process (usage-local.ts). */
export type UsageDelivery = (batch: UsageReport[]) => Promise<Outcome>;

export interface UsageReporterOptions {
  /** The control plane's `POST /v1/usage` (with `dispatcher`), unless `deliver` is given. */
  url?: string;
  dispatcher?: Dispatcher;
  /** WRIT_API_KEY: presented to the management listener. */
  apiKey?: string;
  /** Delivers a batch some other way than the HTTP post (in process: usage-local.ts). */
  deliver?: UsageDelivery;
  /** Largest number of reports waiting to be posted (default 10 000). */
  maxQueue?: number;
  /** Posts in flight at once (default 4). */
  concurrency?: number;
  /** Per-post timeout (default 2000 ms). */
  timeoutMs?: number;
  /** Pause before the single retry (default 250 ms). */
  retryDelayMs?: number;
  /** How long a report waits for others to go out with (default 10 ms; 0 posts each alone). */
  lingerMs?: number;
}

export interface UsageStats {
  /** Reports delivered, in `posts` requests. */
  sent: number;
  posts: number;
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

type Item = { batch: UsageReport[]; attempt: number };

export function createUsageReporter(o: UsageReporterOptions): UsageReporter {
  const post = o.deliver ?? httpPost(o);
  const maxQueue = o.maxQueue ?? 10_000;
  const concurrency = o.concurrency ?? 4;
  const retryDelayMs = o.retryDelayMs ?? 250;
  const lingerMs = o.lingerMs ?? 10;
  const pending = new Map<string, UsageReport>();
  let lingerTimer: NodeJS.Timeout | undefined;
  /** Batches to post; `waiting` counts their reports. */
  const queue: Item[] = [];
  let waiting = 0;
  const stats = { sent: 0, posts: 0, failed: 0, dropped: 0 };
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
    for (let i = 0; i < items.length; i += USAGE_BATCH_MAX) enqueue({ batch: items.slice(i, i + USAGE_BATCH_MAX), attempt: 0 });
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

  function pump(): void {
    while (inFlight < concurrency && queue.length > 0) {
      const item = queue.shift()!;
      const n = item.batch.length;
      waiting -= n;
      inFlight++;
      void post(item.batch).then((result) => {
        inFlight--;
        // Delivered but for `retry` (settlements not written): only they are tried again.
        const partial = typeof result === 'object';
        const rest = partial ? result.retry : item.batch;
        const out = partial ? (rest.length ? 'retry' : 'ok') : result;
        const delivered = partial ? n - rest.length : out === 'ok' ? n : 0;
        if (delivered > 0) {
          stats.sent += delivered;
          stats.posts++;
        }
        if (out === 'retry' && item.attempt === 0 && !closed) {
          const t = setTimeout(() => {
            timers.delete(t);
            enqueue({ batch: rest, attempt: 1 });
          }, retryDelayMs);
          timers.add(t);
        } else if (out === 'fail' && n > 1 && !closed) {
          // A batch refused whole (one bad report) is posted report by report: only the bad one is lost.
          for (const r of rest) enqueue({ batch: [r], attempt: 0 });
        } else if (out !== 'ok') {
          stats.failed += rest.length;
          if (out === 'retry') log.error('usage reports lost after retry', { reports: rest.length, tokens: rest.reduce((a, r) => a + r.tokens, 0) });
        }
        pump();
        notifyIdle();
      });
    }
  }

  function enqueue(item: Item): void {
    while (queue.length > 0 && waiting + item.batch.length > maxQueue) {
      const old = queue.shift()!;
      waiting -= old.batch.length;
      stats.dropped += old.batch.length;
      const now = Date.now();
      if (now - lastDropLog > 5000) {
        lastDropLog = now;
        log.error('usage queue full: dropping oldest reports', { maxQueue, dropped: stats.dropped });
      }
    }
    queue.push(item);
    waiting += item.batch.length;
    pump();
  }

  return {
    report(r) {
      if (closed) {
        stats.dropped++;
        return;
      }
      if (lingerMs > 0) linger(r);
      else enqueue({ batch: [r], attempt: 0 });
    },
    stats: () => ({ ...stats, queued: waiting + pending.size, inFlight }),
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

/** Posts a batch to the control plane's `POST /v1/usage` (one report as the SPEC writes it; more as an array). */
function httpPost(o: UsageReporterOptions): UsageDelivery {
  if (!o.url || !o.dispatcher) throw new Error('usage reporter: a url and a dispatcher, or deliver');
  const url = new URL(o.url);
  const target = url.origin + url.pathname + url.search;
  const timeoutMs = o.timeoutMs ?? 2000;
  const dispatcher = o.dispatcher;
  // WRIT_API_KEY for a management listener with WRIT_API_AUTH=keys (scope usage:write).
  const headers: Record<string, string> = { 'content-type': 'application/json', ...(o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {}) };
  return async (batch) => {
    const r = batch[0]!;
    try {
      const res = await request(target, {
        method: 'POST',
        headers,
        body: JSON.stringify(batch.length === 1 ? r : batch),
        dispatcher,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      if (res.statusCode === 503) {
        // The settlements the control plane could not write, by index; the rest of the batch counted.
        const retry = unsettledOf(await res.body.json().catch(() => undefined), batch);
        log.warn('usage post failed', { status: 503, reports: batch.length, unsettled: retry?.length });
        return retry ? { retry } : 'retry';
      }
      res.body.resume();
      if (res.statusCode >= 200 && res.statusCode < 300) return 'ok';
      if (res.statusCode >= 500 || res.statusCode === 429) {
        log.warn('usage post failed', { status: res.statusCode, reports: batch.length });
        return 'retry';
      }
      log.error('usage report rejected', { status: res.statusCode, reports: batch.length, agent: r.agent, model: r.model });
      return 'fail';
    } catch (e) {
      log.warn('usage post failed', { err: errMsg(e), reports: batch.length });
      return 'retry';
    }
  };
}

/** The reports a 503 answer names as not recorded (`unsettled`: indexes in the batch); undefined when it names none. */
export function unsettledOf(body: unknown, batch: readonly UsageReport[]): UsageReport[] | undefined {
  const idx = (body as { unsettled?: unknown } | undefined)?.unsettled;
  if (!Array.isArray(idx) || !idx.every((i) => Number.isInteger(i) && i >= 0 && i < batch.length)) return undefined;
  return [...new Set(idx as number[])].sort((a, b) => a - b).map((i) => batch[i]!);
}
