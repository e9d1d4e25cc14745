/** node:http helpers shared by the listeners. */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseAddr, type ProcessConfig } from './config.js';

/** Listens on a Go-style address (`:9191`, `127.0.0.1:0`) and resolves with the bound port. */
export function listen(server: http.Server | import('node:net').Server, addr: string): Promise<number> {
  const { host, port } = parseAddr(addr);
  return new Promise((resolve, reject) => {
    const onError = (e: Error) => reject(e);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/**
 * Server options bounding how long a client may take to send one request, head and body: past
 * `ms` Node answers 408 and closes the connection (its default lets a request trickle for 300 s).
 * Node looks for late requests every quarter of the deadline (its default is every 30 s).
 */
export function requestDeadline(ms: number): Pick<http.ServerOptions, 'headersTimeout' | 'requestTimeout' | 'connectionsCheckingInterval'> {
  return { headersTimeout: ms, requestTimeout: ms, connectionsCheckingInterval: Math.min(30_000, Math.max(50, Math.floor(ms / 4))) };
}

/** The management, identity and broker listeners' deadline (`WRIT_REQUEST_TIMEOUT_MS`, default 60 s). */
export function listenerDeadline(p: Pick<ProcessConfig, 'requestTimeoutMs'>): ReturnType<typeof requestDeadline> {
  return requestDeadline(p.requestTimeoutMs);
}

/** Closes a server and any idle keep-alive sockets; resolves when closed. */
export function close(server: http.Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeIdleConnections?.();
    setTimeout(() => server.closeAllConnections?.(), 2000).unref();
  });
}

/** True when a request announces a body (Content-Length > 0 or any Transfer-Encoding). */
export function hasBody(h: { 'content-length'?: string; 'transfer-encoding'?: string }): boolean {
  if (h['transfer-encoding'] !== undefined) return true;
  const cl = h['content-length'];
  return cl !== undefined && cl !== '0';
}

export class BodyTooLarge extends Error {}

/**
 * Reads a request body up to `limit` bytes; rejects with BodyTooLarge past it, and with an error
 * when the client goes away first. With a Content-Length each chunk is copied into place as it
 * arrives, so no single turn of the event loop copies the whole body (a 90 MB SCIM sync).
 */
export function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = req.headers['transfer-encoding'] === undefined ? Number(req.headers['content-length'] ?? 0) : NaN;
    // Past the limit nothing more is read: the caller answers and closes the connection.
    if (declared > limit) return reject(new BodyTooLarge(`body exceeds ${limit} bytes`));
    const into = Number.isSafeInteger(declared) && declared > 0 ? Buffer.allocUnsafe(declared) : undefined;
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (e?: Error) => {
      req.off('data', onData).off('end', onEnd).off('error', finish).off('close', onClose);
      if (e) return reject(e);
      resolve(into ? into.subarray(0, size) : Buffer.concat(chunks));
    };
    const onData = (c: Buffer) => {
      if (size + c.length > (into ? into.length : limit)) {
        return finish(new BodyTooLarge(`body exceeds ${into ? 'its Content-Length' : `${limit} bytes`}`));
      }
      if (into) c.copy(into, size);
      else chunks.push(c);
      size += c.length;
    };
    const onEnd = () => finish();
    const onClose = () => finish(new Error('the client went away before the whole body arrived'));
    req.on('data', onData).on('end', onEnd).on('error', finish).on('close', onClose);
  });
}

export function sendJson(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data), ...headers });
  res.end(data);
}
