/**
 * The MCP gateway on a listener of its own, for the control plane process in a cluster
 * (MCP_GATEWAY_ADDR): there the broker runs apart, with no decision engine, registry snapshot or
 * approval queue beside it, so the control plane serves `/mcp/{service}` and its RFC 9728
 * metadata itself (a route or Ingress can put both behind one base URL). The all-in-one serves
 * the same gateway on its broker listener instead.
 */
import http from 'node:http';
import { close, listen, sendJson, type requestDeadline } from '../lib/http.js';
import type { McpGateway } from './gateway.js';
import { isGatewayPath } from './resource.js';

export interface McpListener {
  port: number;
  /** Ends the gateway's exchanges, then the listener. */
  close(): Promise<void>;
}

/** `deadline`: how long a client may take to send one request (`listenerDeadline`; streams answered after it are not cut). */
export async function startMcpListener(addr: string, gateway: McpGateway, deadline: ReturnType<typeof requestDeadline>): Promise<McpListener> {
  const server = http.createServer({ keepAliveTimeout: 65_000, ...deadline }, (req, res) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    if (isGatewayPath(path)) return gateway.handle(req, res, path);
    req.resume();
    sendJson(res, 404, { error: 'not_found', message: `no route ${path}: this listener serves /mcp/{service}` });
  });
  let port: number;
  try {
    port = await listen(server, addr);
  } catch (e) {
    await gateway.close();
    throw e;
  }
  return {
    port,
    async close() {
      await gateway.close();
      await close(server);
    },
  };
}
