/** Request headers -> decision facts. Pure: works on node's lower-cased header record. */
import { H } from '../../lib/brand.js';
import type { EgressFacts, IngressFacts } from './types.js';

export type HeaderBag = Record<string, string | string[] | undefined>;

/** First value of a header; node joins most duplicates with ", " but keeps some as arrays. */
function first(h: HeaderBag, name: string): string | undefined {
  const v = h[name];
  const s = Array.isArray(v) ? v[0] : v;
  return s === undefined ? undefined : s;
}

export type Facts = { path: 'egress'; facts: EgressFacts } | { path: 'ingress'; facts: IngressFacts };

/** `X-Writ-Actor` present selects egress; everything else is ingress (SPEC 4.1). */
export function factsFromHeaders(h: HeaderBag, req: { method?: string; path?: string } = {}): Facts {
  const actor = first(h, H.actor);
  if (actor !== undefined) {
    return {
      path: 'egress',
      facts: {
        actor,
        onBehalfOf: first(h, H.onBehalfOf),
        task: first(h, H.task),
        target: first(h, H.service),
        targetKind: first(h, H.targetKind),
        action: first(h, H.action),
        resource: first(h, H.resource),
        vp: first(h, H.agentVp),
        authorization: first(h, 'authorization'),
        via: 'authz',
      },
    };
  }
  return {
    path: 'ingress',
    facts: {
      service: first(h, H.service),
      host: first(h, 'x-forwarded-host') ?? first(h, 'host'),
      authorization: first(h, 'authorization'),
      method: req.method,
      path: req.path,
    },
  };
}
