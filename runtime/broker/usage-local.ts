/**
 * The broker's usage reports delivered in process, for the all-in-one, where the broker and the
 * control plane share a process (as decision-local.ts does for decisions): a batch is checked
 * with the schema `POST /v1/usage` checks its body with and recorded by the same
 * `recordUsageBatch`, so the meters, counters and settlements come out as they do over HTTP.
 * What it skips is the loopback post and its answer on the event loop the broker's requests share
 * (~1 post per 6 completions, bench/broker.bench.ts).
 *
 * The reporter's queue, linger, retry and drop rules are unchanged (usage-reporter.ts): a batch
 * the schema refuses is `fail` (as a 400: posted again report by report, so one bad report loses
 * only itself), one whose recording throws is `retry` (as a 5xx), and one whose settlements alone
 * were not written (the budget store unavailable) is retried for those only (as the 503's `unsettled`).
 */
import { errMsg, logger } from '../lib/log.js';
import { recordUsageBatch, UsageNotSettled } from '../control-plane/mgmt.js';
import { UsageBodySchema, type UsageReport } from '../control-plane/types.js';
import type { UsageDelivery } from './usage-reporter.js';

const log = logger('broker.usage');

export function deliverUsageLocally(record: (r: UsageReport) => unknown): UsageDelivery {
  return async (batch) => {
    const parsed = UsageBodySchema.safeParse(batch.length === 1 ? batch[0] : batch);
    if (!parsed.success) {
      const r = batch[0]!;
      log.error('usage report rejected', { error: 'invalid body', reports: batch.length, agent: r.agent, model: r.model });
      return 'fail';
    }
    try {
      await recordUsageBatch(record, Array.isArray(parsed.data) ? parsed.data : [parsed.data]);
      return 'ok';
    } catch (e) {
      log.warn('usage not recorded', { err: errMsg(e), reports: batch.length });
      // Only the settlements not written are tried again (the rest counted, as over HTTP's 503).
      return e instanceof UsageNotSettled ? { retry: e.unsettled.map((i) => batch[i]!) } : 'retry';
    }
  };
}
