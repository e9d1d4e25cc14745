/** Request headers -> decision facts. Pure: works on node's lower-cased header record. */
import { H } from '../../lib/brand.js';
import { parseReserve } from '../../lib/reservation-header.js';
import { bearerToken } from './credentials.js';
import type { EgressFacts, Facts, IngressFacts, ProxyHop } from './types.js';

export type HeaderBag = Record<string, string | string[] | undefined>;

/** First value of a header; node joins most duplicates with ", " but keeps some as arrays. */
export function first(h: HeaderBag, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

export interface RequestMeta {
  method?: string;
  path?: string;
  /** The request came from a trusted proxy: its x-forwarded-host names the target host. */
  trustedPeer?: boolean;
}

/** `X-Writ-Actor` present selects egress; everything else is ingress (SPEC 4.1). */
export function factsFromHeaders(h: HeaderBag, req: RequestMeta = {}): Facts {
  const actor = first(h, H.actor);
  if (actor !== undefined) {
    const f: EgressFacts = {
      kind: 'egress',
      via: 'authz',
      actor,
      onBehalfOf: first(h, H.onBehalfOf),
      task: first(h, H.task),
      target: first(h, H.service),
      targetKind: first(h, H.targetKind),
      action: first(h, H.action),
      resource: first(h, H.resource),
      vp: first(h, H.agentVp),
      authorization: first(h, 'authorization'),
      ticket: first(h, H.callTicket),
    };
    const reserve = first(h, H.reserve);
    if (reserve !== undefined) f.reserve = parseReserve(reserve);
    return f;
  }
  const f: IngressFacts = {
    kind: 'ingress',
    service: first(h, H.service),
    // A forwarded host counts only from a trusted proxy: anyone else could pick its target.
    host: (req.trustedPeer ? first(h, 'x-forwarded-host') : undefined) ?? first(h, 'host'),
    authorization: first(h, 'authorization'),
    method: req.method,
    requestPath: req.path,
  };
  return f;
}

/**
 * The forward proxy's facts: the agent's VP from `Proxy-Authorization: Bearer`, the task,
 * action and resource from the request's `X-Writ-*` headers (else the method and the URL), the
 * target from host:port. The dry-run builds the same facts from the same inputs.
 */
export function proxyFacts(h: HeaderBag, hop: ProxyHop, method: string, resourceUrl: string): EgressFacts {
  const auth = first(h, 'proxy-authorization');
  return {
    kind: 'egress',
    via: 'proxy',
    vp: bearerToken(auth),
    credentialIssue: auth ? 'Proxy-Authorization must be "Bearer <Membership VP>"' : 'missing Proxy-Authorization',
    onBehalfOf: first(h, H.onBehalfOf)?.trim() || undefined,
    task: first(h, H.task)?.trim() || undefined,
    action: first(h, H.action)?.trim() || `http:${method.toLowerCase()}`,
    resource: first(h, H.resource)?.trim() || resourceUrl,
    hop,
  };
}
