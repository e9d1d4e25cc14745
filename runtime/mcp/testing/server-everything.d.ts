// The reference server ships JavaScript only: the one factory the tests use, typed by hand (test-only: under testing/, outside the build and the image).
declare module '@modelcontextprotocol/server-everything/dist/server/index.js' {
  import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
  export function createServer(): { server: McpServer; cleanup: (sessionId?: string) => void };
}
