/**
 * The answers the egress forward proxy writes itself: JSON replies on a ServerResponse (plain
 * HTTP) or straight on a socket (CONNECT, upgrades), the deny headers and body of a 403/407, and
 * the 502/504 of an upstream failure (a timeout is 504, anything else 502).
 */
import http from 'node:http';
import type net from 'node:net';
import { BRAND, header } from '../../lib/brand.js';
import { errMsg } from '../../lib/log.js';
import type { VerdictOutcome } from './decide.js';
import { safeHeaderValue } from './headers.js';
import type { ProxyTarget } from './target.js';

export const REALM = `${BRAND}-egress`;
export const DENY_REASON = header('Deny-Reason');
const EGRESS_REQUEST = header('Egress-Request');

export class UpstreamTimeout extends Error {}

const TIMEOUT_CODES = new Set(['ETIMEDOUT', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

function isTimeout(e: unknown): boolean {
  if (e instanceof UpstreamTimeout) return true;
  return TIMEOUT_CODES.has((e as { code?: string } | undefined)?.code ?? '');
}

/** 502/504 body text: the upstream failure without internals beyond the error code. */
export function upstreamError(t: ProxyTarget, e: unknown): { status: 502 | 504; message: string } {
  if (isTimeout(e)) return { status: 504, message: `upstream ${t.hostPort} timed out: ${errMsg(e)}` };
  const code = (e as { code?: string } | undefined)?.code;
  if (code === 'EADDRREFUSED') return { status: 502, message: `upstream ${t.hostPort} not dialed: ${errMsg(e)}` };
  return { status: 502, message: `upstream ${t.hostPort} failed: ${code ?? errMsg(e)}` };
}

export function denyHeaders(o: VerdictOutcome, requestId?: string): Record<string, string> {
  const h: Record<string, string> = { [DENY_REASON]: safeHeaderValue(o.decision.reason) };
  if (requestId) h[EGRESS_REQUEST] = requestId;
  return h;
}

export function denyBody(o: VerdictOutcome, requestId?: string): object {
  const b: Record<string, unknown> = { allow: false, reason: o.decision.reason, rule: o.decision.rule };
  if (requestId) b.egressRequest = requestId;
  return b;
}

/** A complete HTTP/1.1 response written straight to a socket (CONNECT replies), then closed. */
export function rawReply(socket: net.Socket, status: number, headers: Record<string, string>, body: object): void {
  if (socket.destroyed) return;
  const data = JSON.stringify(body);
  let head = `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? 'Error'}\r\n`;
  for (const [k, v] of Object.entries(headers)) head += `${k}: ${safeHeaderValue(v, 2048)}\r\n`;
  head += `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(data)}\r\nConnection: close\r\n\r\n`;
  socket.end(head + data);
  // The peer closes on Connection: close; one that does not is cut off shortly.
  const t = setTimeout(() => socket.destroy(), 2000);
  t.unref();
  socket.once('close', () => clearTimeout(t));
}

export function sendJson(res: http.ServerResponse, status: number, body: object, headers: Record<string, string> = {}, close = false): void {
  if (res.headersSent || res.destroyed) return;
  const data = JSON.stringify(body);
  const out: Record<string, string | number> = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data), ...headers };
  if (close) out.connection = 'close';
  res.writeHead(status, out);
  res.end(res.req.method === 'HEAD' ? undefined : data);
}
