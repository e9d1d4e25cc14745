/**
 * The egress gateway's decision: one `/authz` call per request, as an external-authorization
 * filter makes it (Envoy's ext_authz over HTTP). The request's facts go as `/authz` headers:
 *
 *   X-Writ-Upstream    host:port the agent asked for (the control plane resolves it as its forward
 *                      proxy does: a registry upstream, else an external host in `egressAllow`)
 *   X-Writ-Agent-VP    the agent's Membership VP from `Proxy-Authorization: Bearer` (verified there)
 *   X-Writ-Action      `http:<method>` (`http:connect` for a tunnel), X-Writ-Resource its URL / host:port
 *   X-Writ-Actor, -Task, -On-Behalf-Of, traceparent, tracestate: as the client sent them
 *
 * 200 allows, with the answer's `X-Writ-*` headers stamped on the upstream request. Anything else
 * is a hard deny (403 with the decision point's reason): a 401 needs-approval too (the gateway holds
 * nothing), a 5xx, a timeout, an unreachable `/authz`. No `Proxy-Authorization` is a 407 challenge
 * without asking.
 */
import { H } from '../lib/brand.js';
import { errMsg } from '../lib/log.js';
import type { ProxyDecider, ProxyRequest, ProxyVerdict } from '../control-plane/proxy/index.js';
import { DENY_REASON } from '../control-plane/proxy/index.js';

/** Client headers passed on to /authz as they came. */
const PASSED = [H.actor, H.task, H.onBehalfOf, 'traceparent', 'tracestate'] as const;
const OWN = /^x-writ-/i;

export interface AuthzDeciderOptions {
  /** The decision point, e.g. `http://writ-control-plane:9191/authz`. */
  url: string;
  /** Per-call timeout; past it the request is denied. */
  timeoutMs: number;
  /** Told of every call's reachability (readiness: the decision point is gone). */
  onReach?: (reached: boolean) => void;
}

const verdict = (kind: ProxyVerdict['kind'], reason: string, rule: string, headers?: Record<string, string>): ProxyVerdict => ({
  kind,
  outcome: { decision: { reason, rule, ...(headers ? { headers } : {}) } },
});

/** The /authz request headers for one proxied request. */
export function authzHeaders(req: ProxyRequest, vp: string): Record<string, string> {
  const out: Record<string, string> = {
    [H.upstream]: req.target.hostPort,
    [H.agentVp]: vp,
    [H.action]: `http:${req.method.toLowerCase()}`,
    [H.resource]: req.target.resource,
  };
  for (const name of PASSED) {
    const v = req.headers[name];
    if (typeof v === 'string') out[name] = v;
  }
  return out;
}

/** The `X-Writ-*` headers of an allow, to stamp on the upstream request. */
function ownHeaders(res: Response): Record<string, string> {
  const out: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    if (OWN.test(name) && name.toLowerCase() !== DENY_REASON.toLowerCase()) out[name] = value;
  });
  return out;
}

export function authzDecider(o: AuthzDeciderOptions): ProxyDecider {
  return async (req) => {
    const auth = req.headers['proxy-authorization'];
    const m = typeof auth === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(auth) : null;
    if (!m) return verdict('challenge', auth ? 'Proxy-Authorization must be "Bearer <Membership VP>"' : 'missing Proxy-Authorization', 'identity');
    let res: Response;
    try {
      res = await fetch(o.url, { headers: authzHeaders(req, m[1]!), signal: AbortSignal.timeout(o.timeoutMs) });
    } catch (e) {
      o.onReach?.(false);
      return verdict('deny', `decision point unreachable (${errMsg(e)}): denied`, 'inline');
    }
    o.onReach?.(true);
    const body = (await res.json().catch(() => ({}))) as { reason?: unknown; rule?: unknown };
    const reason = typeof body.reason === 'string' ? body.reason : (res.headers.get(DENY_REASON) ?? `decision point answered ${res.status}`);
    const rule = typeof body.rule === 'string' ? body.rule : 'inline';
    if (res.status === 200) return verdict('allow', reason, rule, ownHeaders(res));
    return verdict('deny', res.status === 403 || res.status === 401 ? reason : `decision point answered ${res.status}: ${reason}`, rule);
  };
}
