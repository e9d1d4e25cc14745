/**
 * The MCP reference server (`@modelcontextprotocol/server-everything`) in streamable HTTP mode for
 * tests: the server its `streamableHttp` launcher builds (one `createServer()` per session behind
 * the SDK's StreamableHTTPServerTransport, sessions by `Mcp-Session-Id`), on node:http at port 0
 * so tests never pick a port. `received` lists every JSON-RPC message it was sent, so a test can
 * show a denied call never reached it. `startMcpTestServer` serves any such server factory the
 * same way (conformance-server-testing.ts uses it).
 */
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
// The package has no exports map: its server factory is reached by path.
import { createServer } from '@modelcontextprotocol/server-everything/dist/server/index.js';
import { listen } from '../lib/http.js';

export interface McpTestServer {
  port: number;
  /** `host:port`, a registry entry's upstream. */
  upstream: string;
  /** Every JSON-RPC message POSTed, in order. */
  received: { method?: string; params?: { name?: string; arguments?: unknown } }[];
  /** Headers of every request, in order (what reached the upstream). */
  headers: http.IncomingHttpHeaders[];
  close(): Promise<void>;
}

interface Session {
  transport: StreamableHTTPServerTransport;
  close: () => Promise<void>;
}

export type Everything = McpTestServer;

/** What a server factory gives: the SDK's low-level server for one session, and its cleanup. */
type McpServerFactory = () => {
  server: { connect(t: StreamableHTTPServerTransport): Promise<void>; close(): Promise<void> };
  cleanup: (sessionId: string) => void;
};

export function startEverything(): Promise<Everything> {
  return startMcpTestServer(createServer);
}

export async function startMcpTestServer(factory: McpServerFactory): Promise<McpTestServer> {
  const sessions = new Map<string, Session>();
  const received: McpTestServer['received'] = [];
  const headers: http.IncomingHttpHeaders[] = [];
  const server = http.createServer((req, res) => {
    headers.push(req.headers);
    void handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let body: unknown;
    if (req.method === 'POST') {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      received.push(...(Array.isArray(body) ? body : [body]));
    }
    const sid = req.headers['mcp-session-id'];
    const known = typeof sid === 'string' ? sessions.get(sid) : undefined;
    if (known) return known.transport.handleRequest(req, res, body);
    if (sid !== undefined || req.method !== 'POST') {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}');
      return;
    }
    const { server: mcp, cleanup } = factory();
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, close: () => mcp.close() });
      },
    });
    transport.onclose = () => {
      if (transport.sessionId) {
        sessions.delete(transport.sessionId);
        cleanup(transport.sessionId);
      }
    };
    await mcp.connect(transport);
    await transport.handleRequest(req, res, body);
  }
  const port = await listen(server, '127.0.0.1:0');
  return {
    port,
    upstream: `127.0.0.1:${port}`,
    received,
    headers,
    async close() {
      await Promise.all([...sessions.values()].map((s) => s.close().catch(() => {})));
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
