/**
 * Each MCP gateway route as an OAuth protected resource (issue 43 item 6, RFC 9728; MCP
 * 2025-11-25 / 2026-07-28 authorization): `/mcp/{service}` is the resource, its metadata is served
 * at `/.well-known/oauth-protected-resource/mcp/{service}` (RFC 9728 3.1 path insertion: where an
 * MCP client looks when a 401 names none) and names Writ's authorization server (the issuer the
 * control plane follows), the scopes the entry needs and the bearer method; the listener's root
 * document (`/.well-known/oauth-protected-resource`) names the base. A refusal for want of
 * a credential, an invalid token or a missing scope carries the challenge (lib/protected-resource.ts).
 */
import type http from 'node:http';
import { BRAND_TITLE, H } from '../lib/brand.js';
import { isVpJwt } from '../lib/jws.js';
import { bearerToken } from '../control-plane/decision/credentials.js';
import { challengeFor, metadataUrlOf, PRM_WELL_KNOWN, resourceMetadata, type Challenge, type Refused } from '../lib/protected-resource.js';
import type { Service } from '../control-plane/types.js';

/** The gateway's routes: `/mcp/{service}`. */
export const MCP_PREFIX = '/mcp/';
export const MCP_METADATA_PREFIX = `${PRM_WELL_KNOWN}${MCP_PREFIX}`;

export interface ResourceOptions {
  /** The broker listener's base URL as clients reach it (`BROKER_PUBLIC_URL`); absent: `http://` + the request's Host. */
  publicUrl?: string;
  /** Writ's authorization server (its `issuer`), once known. */
  authorizationServer?: () => string | undefined;
}

/** A Host header as a URL authority: name or address, optional port; anything else is not used. */
const HOST_RE = /^(?:[a-z0-9.-]+|\[[0-9a-f:.]+\])(?::\d{1,5})?$/i;

/** The base URL of the listener for this request, or undefined when it cannot be told. */
export function baseUrlOf(req: http.IncomingMessage, publicUrl: string | undefined): string | undefined {
  if (publicUrl) return publicUrl.replace(/\/+$/, '');
  const host = req.headers.host;
  return host && HOST_RE.test(host) ? `http://${host}` : undefined;
}

/** The resource identifier of `/mcp/{service}`: its absolute URL. */
export const resourceOf = (base: string, service: string) => `${base}/mcp/${encodeURIComponent(service)}`;

/**
 * Whether the request carried a credential, not only a declared name: a VP (its header, or as the
 * bearer token) or a bearer token Writ's authorization server issued (`claimed`). A bearer token of
 * anyone else is never taken as a credential (issue 43 item 5), so it is answered as none is: 401
 * with the challenge alone, which sends an OAuth client to Writ's authorization server.
 */
export function credentialSent(req: http.IncomingMessage, claimed: (token: string) => boolean): boolean {
  if (req.headers[H.agentVp] !== undefined) return true;
  const auth = req.headers.authorization;
  const token = bearerToken(Array.isArray(auth) ? auth[0] : auth);
  return token !== undefined && (isVpJwt(token) || claimed(token));
}

/** The challenge for a refused message, when the refusal is a credential's; `claimed` says whether a bearer token is Writ's. */
export function mcpChallenge(
  req: http.IncomingMessage,
  o: ResourceOptions,
  service: string,
  d: Refused,
  claimed: (token: string) => boolean,
): Challenge | undefined {
  const base = baseUrlOf(req, o.publicUrl);
  if (!base) return undefined;
  return challengeFor(d, credentialSent(req, claimed), metadataUrlOf(resourceOf(base, service)));
}

function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  res.end(text);
}

/** The listener's paths the gateway answers: its routes, their metadata, and the root metadata. */
export const isGatewayPath = (path: string) => path.startsWith(MCP_PREFIX) || path.startsWith(MCP_METADATA_PREFIX) || path === PRM_WELL_KNOWN;

/**
 * GET `/.well-known/oauth-protected-resource` (no path): RFC 9728 3.1 for the listener's base URL,
 * where an MCP client (2025-11-25) looks last when the route's own document (path insertion) could
 * not be had and no challenge named one. It names Writ's authorization server; its `resource` is
 * the base, which no token is for: a token is for one registry entry, asked for with the route's
 * URL (`http(s)://<host>/mcp/<name>`, its own document) or the entry's name (the token endpoint
 * refuses the base with `invalid_target` saying so).
 */
function serveRoot(req: http.IncomingMessage, res: http.ServerResponse, o: ResourceOptions): void {
  const base = baseUrlOf(req, o.publicUrl);
  if (!base) return sendJson(res, 400, { error: 'invalid_request', error_description: 'the Host header is not a host[:port]' });
  const issuer = o.authorizationServer?.();
  if (!issuer) return sendJson(res, 503, UNKNOWN_ISSUER);
  sendJson(
    res,
    200,
    resourceMetadata({ resource: base, issuer, name: `${BRAND_TITLE} MCP gateway (a token is for one route: ${base}${MCP_PREFIX}{service})` }),
  );
}

const UNKNOWN_ISSUER = { error: 'temporarily_unavailable', error_description: 'the authorization server is not known yet (identity authority not reached)' };

/** GET `/.well-known/oauth-protected-resource/mcp/{service}`: the entry's RFC 9728 document; the root document at the bare well-known path. */
export function serveMetadata(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  path: string,
  o: ResourceOptions,
  entry: (name: string) => Service | undefined,
): void {
  req.resume();
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('allow', 'GET, HEAD');
    return sendJson(res, 405, { error: 'invalid_request', error_description: `method ${req.method} is not allowed on protected-resource metadata` });
  }
  if (path === PRM_WELL_KNOWN) return serveRoot(req, res, o);
  let service: string;
  try {
    service = decodeURIComponent(path.slice(MCP_METADATA_PREFIX.length));
  } catch {
    service = '';
  }
  const e = entry(service);
  if (!service || service.includes('/') || e?.protocol !== 'mcp')
    return sendJson(res, 404, { error: 'not_found', error_description: `no MCP service at ${path}` });
  const base = baseUrlOf(req, o.publicUrl);
  if (!base) return sendJson(res, 400, { error: 'invalid_request', error_description: 'the Host header is not a host[:port]' });
  const issuer = o.authorizationServer?.();
  if (!issuer) return sendJson(res, 503, UNKNOWN_ISSUER);
  sendJson(res, 200, resourceMetadata({ resource: resourceOf(base, service), issuer, name: service, requireScope: e.requireScope }));
}
