/** Request headers -> decision facts. Pure: works on node's lower-cased header record. */
import { mcpCallOf } from './mcp-facts.js';
import { H } from '../../lib/brand.js';
import { parseReserve } from '../../lib/reservation-header.js';
import { parseHostPort } from '../../lib/host-name.js';
import { bearerToken } from './credentials.js';
import type { EgressFacts, Facts, IngressFacts, ProxyHop } from './types.js';

export type HeaderBag = Record<string, string | string[] | undefined>;

/** First value of a header; node joins most duplicates with ", " but keeps some as arrays. */
export function first(h: HeaderBag, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * The largest header section a decision reads: the /authz listener's `maxHeaderSize` (node
 * answers 431 beyond it, before any decision), and the gRPC Check's headers (the same 431).
 * Envoy's own default limit is 60 KiB.
 */
export const MAX_HEADER_BYTES = 64 * 1024;

export interface RequestMeta {
  method?: string;
  path?: string;
  /** The request came from a trusted proxy: its x-forwarded-host names the target host. */
  trustedPeer?: boolean;
  /** The request body, when the check carries it (Envoy's `with_request_body`): an MCP message is decided from it. */
  body?: string;
  /** node's `rawHeaders`: what tells a repeated header from one value with a comma in it. */
  rawHeaders?: readonly string[];
}

/** Does node's raw header list hold more than one line named `name` (lower-case)? */
function sentTwice(raw: readonly string[], name: string): boolean {
  let seen = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.length === name.length && raw[i]!.toLowerCase() === name && ++seen > 1) return true;
  return false;
}

/** The egress headers that scope a decision to one value each. */
const SCOPING = [H.task, H.action, H.resource, H.service, H.targetKind];

/**
 * The first scoping header sent more than once, or undefined. node joins a repeated header's
 * values with ", ", so only a value holding ", " is looked up in the raw header lines (the
 * common case costs one `includes` per header). Without raw lines (gRPC without Envoy's
 * `encode_raw_headers`: its `headers` map joins repeats) a repeat cannot be told from a comma.
 */
export function repeatedHeader(h: HeaderBag, raw: readonly string[] | undefined): string | undefined {
  if (!raw) return undefined;
  for (const name of SCOPING) {
    const v = h[name];
    if (typeof v !== 'string' || !v.includes(', ')) continue;
    if (sentTwice(raw, name)) return name;
  }
  return undefined;
}

/**
 * Header lines (a repeated header as its list of values) in the shape node hands a request over:
 * values joined with ", " and the raw lines, for `factsFromHeaders` (the broker's in-process
 * decision builds the request /authz would have received).
 */
export function asReceived(lines: Record<string, string | string[]>): { headers: Record<string, string>; rawHeaders: string[] } {
  const headers: Record<string, string> = {};
  const rawHeaders: string[] = [];
  for (const [k, v] of Object.entries(lines)) {
    headers[k] = typeof v === 'string' ? v : v.join(', ');
    for (const one of typeof v === 'string' ? [v] : v) rawHeaders.push(k, one);
  }
  return { headers, rawHeaders };
}

/**
 * A credential header sent twice: which VP speaks for the agent would depend on which line a
 * reader keeps (node keeps the first `Authorization`, Envoy's `headers` map joins them). A bearer
 * token or a JWT never holds a comma, so a joined value tells a repeat without the raw lines; with
 * them a second `Authorization` line is one too (whatever its scheme).
 */
function repeatedCredential(h: HeaderBag, raw: readonly string[] | undefined): string | undefined {
  const vp = h[H.agentVp];
  if (typeof vp === 'string' && vp.includes(',')) return H.agentVp;
  const auth = h.authorization;
  if (typeof auth !== 'string') return undefined;
  if (auth.includes(',') && /^bearer\s/i.test(auth)) return 'authorization';
  return raw && sentTwice(raw, 'authorization') ? 'authorization' : undefined;
}

/**
 * `X-Writ-Upstream: host:port` on an egress /authz call (the egress gateway, as an external
 * authorization filter names the destination): the target is resolved from host:port as the forward
 * proxy resolves it (a registry upstream, else an external host in the agent's `egressAllow`);
 * `X-Writ-Action: http:connect` marks a tunnel. A malformed value names no hop: the call is then
 * decided on `X-Writ-Service` alone, which an unknown target denies.
 */
function hopOf(upstream: string | undefined, action: string | undefined): ProxyHop | undefined {
  if (upstream === undefined) return undefined;
  const p = parseHostPort(upstream.trim());
  if ('error' in p) return undefined;
  return { host: p.host, port: p.port, hostPort: `${p.host}:${p.port}`, connect: action?.trim().toLowerCase() === 'http:connect' };
}

/**
 * `X-Writ-Actor` present selects egress, and so does `X-Writ-Upstream` (the egress gateway: the
 * actor is then the agent its VP proves); everything else is ingress (SPEC 4.1).
 */
export function factsFromHeaders(h: HeaderBag, req: RequestMeta = {}): Facts {
  const actor = first(h, H.actor);
  if (actor !== undefined || first(h, H.upstream) !== undefined) {
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
    const hop = hopOf(first(h, H.upstream), f.action);
    if (hop) f.hop = hop;
    const reserve = first(h, H.reserve);
    if (reserve !== undefined) f.reserve = parseReserve(reserve);
    const repeated = repeatedHeader(h, req.rawHeaders);
    if (repeated) f.repeated = repeated;
    const twice = repeatedCredential(h, req.rawHeaders);
    if (twice) f.repeatedCredential = twice;
    const mcp = mcpCallOf(h, req.body);
    if (typeof mcp === 'string') f.mcpError = mcp;
    else if (mcp) {
      // The message is the action and resource (as the proxy's request is), not what a header declares.
      const service = f.target?.trim() ?? '';
      f.mcp = mcp;
      f.action = mcp.method;
      f.resource = mcp.name === undefined ? service : `${service}/${mcp.name}`;
    }
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
 * The forward proxy's facts: the agent's VP from `Proxy-Authorization: Bearer`, the task from
 * `X-Writ-Task`, the target from host:port, and the action and resource from the request itself
 * (`http:<method>` and its URL; `http:connect` and host:port for a tunnel). What the agent declares
 * in `X-Writ-Action` / `X-Writ-Resource` is never decided on here: a delegation for a GET below
 * `/public/` must not let a DELETE of `/admin` through. A declaration that differs is kept to be
 * shown to the human when the request is held. The dry-run builds the same facts from the same inputs.
 */
export function proxyFacts(h: HeaderBag, hop: ProxyHop, method: string, resourceUrl: string, rawHeaders?: readonly string[]): EgressFacts {
  const auth = first(h, 'proxy-authorization');
  const repeated = repeatedHeader(h, rawHeaders);
  // node keeps the first of two Proxy-Authorization lines: which VP spoke would depend on the reader.
  const twice = auth !== undefined && rawHeaders !== undefined && sentTwice(rawHeaders, 'proxy-authorization');
  const action = `http:${method.toLowerCase()}`;
  const said = { action: first(h, H.action)?.trim() || action, resource: first(h, H.resource)?.trim() || resourceUrl };
  return {
    kind: 'egress',
    via: 'proxy',
    ...(said.action !== action || said.resource !== resourceUrl ? { declared: said } : {}),
    vp: bearerToken(auth),
    credentialIssue: auth ? 'Proxy-Authorization must be "Bearer <Membership VP>"' : 'missing Proxy-Authorization',
    onBehalfOf: first(h, H.onBehalfOf)?.trim() || undefined,
    task: first(h, H.task)?.trim() || undefined,
    action,
    resource: resourceUrl,
    hop,
    ...(repeated ? { repeated } : {}),
    ...(twice ? { repeatedCredential: 'proxy-authorization' } : {}),
  };
}
