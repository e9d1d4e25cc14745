/**
 * Asks the control plane's `/authz` (SPEC 4.1, egress path) whether an agent may invoke a model.
 * Resolves, never rejects: 200 is the only allow; 401 stays 401 (needs-approval header kept);
 * any other 4xx is a 403 deny carrying the engine's reason; a 5xx, a timeout or an unreachable
 * engine is `unavailable`, which the broker also refuses (fail closed).
 */
import { request, type Dispatcher } from 'undici';
import { H, header } from '../lib/brand.js';
import { errMsg } from '../lib/log.js';
import { injectTrace } from '../lib/tracing.js';

export type DecisionResult =
  { kind: 'allow' } | { kind: 'deny'; status: 401 | 403; reason: string; needsApproval: boolean } | { kind: 'unavailable'; why: string };

export interface DecisionQuery {
  actor: string;
  model: string;
  /** Client headers forwarded as-is when present (lower-case names). */
  passthrough: Record<string, string>;
}

/** Client headers that carry identity or task context for the decision. */
/** Request headers the broker hands to /authz as they came; the call ticket is the proxy hop's "already counted". */
export const PASSTHROUGH_HEADERS = [H.agentVp, H.task, H.onBehalfOf, H.action, H.resource, H.callTicket, 'authorization'] as const;

const MAX_DECISION_BODY = 64 * 1024;
const SAFE_REASON = /[^\x20-\x7e]/g;

function reasonOf(status: number, body: string, headers: Dispatcher.ResponseData['headers']): string {
  try {
    const j = JSON.parse(body) as { reason?: unknown };
    if (typeof j.reason === 'string' && j.reason) return j.reason.slice(0, 500);
  } catch {}
  const h = headers[H.denyReason];
  const hv = Array.isArray(h) ? h[0] : h;
  if (hv) return hv.replace(SAFE_REASON, '?').slice(0, 500);
  return `decision engine answered ${status}`;
}

export interface DecisionClient {
  decide(q: DecisionQuery): Promise<DecisionResult>;
}

export function createDecisionClient(o: { url: string; timeoutMs: number; dispatcher: Dispatcher }): DecisionClient {
  const url = new URL(o.url);
  const origin = url.origin;
  const path = url.pathname + url.search;
  const actorH = header('Actor');
  const serviceH = header('Service');
  const kindH = header('Target-Kind');
  return {
    async decide(q) {
      const headers: Record<string, string> = injectTrace({ ...q.passthrough, [actorH]: q.actor, [serviceH]: q.model, [kindH]: 'model' });
      try {
        const res = await request(origin + path, {
          method: 'GET',
          headers,
          dispatcher: o.dispatcher,
          headersTimeout: o.timeoutMs,
          bodyTimeout: o.timeoutMs,
        });
        if (res.statusCode === 200) {
          res.body.resume();
          return { kind: 'allow' };
        }
        let text = '';
        for await (const c of res.body) {
          text += (c as Buffer).toString('utf8');
          if (text.length > MAX_DECISION_BODY) break;
        }
        const reason = reasonOf(res.statusCode, text, res.headers);
        if (res.statusCode >= 500) return { kind: 'unavailable', why: `decision engine answered ${res.statusCode}: ${reason}` };
        if (res.statusCode === 401) return { kind: 'deny', status: 401, reason, needsApproval: res.headers[H.needsApproval] === 'true' };
        return { kind: 'deny', status: 403, reason, needsApproval: false };
      } catch (e) {
        const code = (e as { code?: string }).code;
        const why =
          code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' ? `timed out after ${o.timeoutMs} ms` : errMsg(e) || code || 'unreachable';
        return { kind: 'unavailable', why };
      }
    },
  };
}
