/**
 * Holds one request in the approval queue until a human approves or denies it, the hold times
 * out, or `signal` aborts (the client went away): the forward proxy's held requests and the MCP
 * gateway's held tool calls wait here. Never rejects: a queue that cannot take the request is an
 * `unavailable` answer, which the decision denies on.
 */
import { errMsg, logger } from '../../lib/log.js';
import type { HoldAnswer, HoldRequest } from '../decision/types.js';
import type { ApprovalQueue } from './queue.js';

const log = logger('approvals');

export async function holdForHuman(queue: ApprovalQueue | undefined, input: HoldRequest, signal: AbortSignal): Promise<HoldAnswer> {
  if (!queue) return { result: 'unavailable', detail: 'the approval queue is disabled' };
  let id: string | undefined;
  try {
    const rec = await queue.create(input);
    id = rec.id;
    log.info('request held for a human', { id, actor: rec.actor, target: rec.target, service: rec.service, action: rec.action, status: rec.status });
    const result = await queue.hold(rec.id, signal);
    if (result === 'released')
      return {
        result: 'unavailable',
        id,
        detail: `shutting down; egress request ${id} stays pending until ${rec.expiresAt}, and a retry of the same request gets its decision`,
      };
    let detail = '';
    try {
      const r = await queue.get(rec.id);
      detail = result === 'approved' ? (r?.approver ?? '') : (r?.denyReason ?? '');
      if (result === 'denied' && r?.approver) detail = `${r.approver}: ${detail}`;
    } catch {
      // The status is what matters; the detail only decorates the reason.
    }
    return { result, id, detail };
  } catch (e) {
    return { result: 'unavailable', id, detail: errMsg(e) };
  }
}
