/**
 * JSON-RPC error answers of the MCP gateway (the message's facts: control-plane/decision/mcp-facts.ts).
 */

/** JSON-RPC error codes the gateway answers with. */
export const RPC = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  /** Denied by Writ's policy (the message names the reason and the audit record). */
  denied: -32001,
  /** The upstream MCP server could not be reached, failed, or answered too late. */
  upstream: -32002,
  /** A routable header (`Mcp-Method`, `Mcp-Name`) disagrees with the body (SEP-2243's HeaderMismatch). */
  headerMismatch: -32020,
} as const;

export type RpcId = string | number | null;

/** A JSON-RPC error response. */
export function rpcError(id: RpcId, code: number, message: string, data?: Record<string, unknown>): string {
  return JSON.stringify({ jsonrpc: '2.0', id, error: data ? { code, message, data } : { code, message } });
}
