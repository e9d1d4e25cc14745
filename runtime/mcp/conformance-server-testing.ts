/**
 * A reference MCP server for the conformance suite (`@modelcontextprotocol/conformance` 0.1.10):
 * the tools, resources and prompts its server scenarios describe ("Implement tool
 * `test_simple_text` ... that returns ..."), built on the official SDK's `McpServer`. The suite's
 * package does not ship such a server, and server-everything names its tools otherwise, so without
 * this one most scenarios could only fail both ways. It exercises what a gateway must pass through:
 * server-to-client requests (sampling, elicitation), notifications during a call (logging,
 * progress), embedded resources, binary content and subscriptions.
 */
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { completable } from '@modelcontextprotocol/sdk/server/completable.js';
import { SubscribeRequestSchema, UnsubscribeRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { startMcpTestServer, type McpTestServer } from './everything-testing.js';

/** A 1×1 red PNG. */
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
/** A 44-byte WAV header with no samples. */
const WAV = Buffer.from('UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=', 'base64').toString('base64');

const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

function contentTools(s: McpServer): void {
  s.registerTool('test_simple_text', { description: 'Returns simple text' }, () => text('This is a simple text response for testing.'));
  s.registerTool('test_image_content', { description: 'Returns an image' }, () => ({ content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] }));
  s.registerTool('test_audio_content', { description: 'Returns audio' }, () => ({ content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] }));
  s.registerTool('test_embedded_resource', { description: 'Returns an embedded resource' }, () => ({
    content: [{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }],
  }));
  s.registerTool('test_multiple_content_types', { description: 'Returns text, image and resource' }, () => ({
    content: [
      { type: 'text', text: 'Multiple content types test:' },
      { type: 'image', data: PNG, mimeType: 'image/png' },
      { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' } },
    ],
  }));
  s.registerTool('test_error_handling', { description: 'Always fails' }, () => ({
    isError: true,
    content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }],
  }));
}

/** Tools that talk back to the client during the call: notifications and server-to-client requests. */
function interactiveTools(s: McpServer): void {
  s.registerTool('test_tool_with_logging', { description: 'Logs three messages while it runs' }, async (extra) => {
    for (const [i, data] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
      if (i > 0) await pause(50);
      await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
    }
    return text('Logging tool completed');
  });
  s.registerTool('test_tool_with_progress', { description: 'Reports progress 0, 50, 100 of 100' }, async (extra) => {
    const progressToken = extra._meta?.progressToken;
    for (const progress of [0, 50, 100]) {
      if (progress > 0) await pause(50);
      if (progressToken !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress, total: 100 } });
    }
    return text('Progress tool completed');
  });
  s.registerTool('test_sampling', { description: 'Asks the client to sample', inputSchema: { prompt: z.string() } }, async ({ prompt }) => {
    const r = await s.server.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 100 });
    return text(`LLM response: ${r.content.type === 'text' ? r.content.text : JSON.stringify(r.content)}`);
  });
  s.registerTool('test_elicitation', { description: 'Asks the user', inputSchema: { message: z.string() } }, async ({ message }) => {
    const r = await s.server.elicitInput({
      message,
      requestedSchema: {
        type: 'object',
        properties: { username: { type: 'string', description: "User's response" }, email: { type: 'string', description: "User's email address" } },
        required: ['username', 'email'],
      },
    });
    return text(`User response: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
  });
}

function resources(s: McpServer): void {
  s.registerResource('static-text', 'test://static-text', { description: 'A static text resource', mimeType: 'text/plain' }, (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
  }));
  s.registerResource('static-binary', 'test://static-binary', { description: 'A static PNG', mimeType: 'image/png' }, (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'image/png', blob: PNG }],
  }));
  s.registerResource('watched', 'test://watched-resource', { description: 'A resource to subscribe to', mimeType: 'text/plain' }, (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'watched' }],
  }));
  const template = new ResourceTemplate('test://template/{id}/data', { list: undefined });
  s.registerResource('template', template, { description: 'Data by id', mimeType: 'application/json' }, (uri, { id }) => ({
    contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${String(id)}` }) }],
  }));
  const subscribed = new Set<string>();
  s.server.registerCapabilities({ resources: { subscribe: true } });
  s.server.setRequestHandler(SubscribeRequestSchema, (r) => (subscribed.add(r.params.uri), {}));
  s.server.setRequestHandler(UnsubscribeRequestSchema, (r) => (subscribed.delete(r.params.uri), {}));
}

function prompts(s: McpServer): void {
  const user = (
    content:
      | { type: 'text'; text: string }
      | { type: 'image'; data: string; mimeType: string }
      | { type: 'resource'; resource: { uri: string; mimeType: string; text: string } },
  ) => ({
    role: 'user' as const,
    content,
  });
  s.registerPrompt('test_simple_prompt', { description: 'A simple prompt' }, () => ({
    messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })],
  }));
  const words = ['paris', 'park', 'party'];
  s.registerPrompt(
    'test_prompt_with_arguments',
    {
      description: 'A prompt with two arguments',
      argsSchema: { arg1: completable(z.string(), (v) => words.filter((w) => w.startsWith(v))), arg2: z.string() },
    },
    ({ arg1, arg2 }) => ({ messages: [user({ type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` })] }),
  );
  s.registerPrompt('test_prompt_with_embedded_resource', { description: 'Embeds a resource', argsSchema: { resourceUri: z.string() } }, ({ resourceUri }) => ({
    messages: [
      user({ type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } }),
      user({ type: 'text', text: 'Please process the embedded resource above.' }),
    ],
  }));
  s.registerPrompt('test_prompt_with_image', { description: 'Shows an image' }, () => ({
    messages: [user({ type: 'image', data: PNG, mimeType: 'image/png' }), user({ type: 'text', text: 'Please analyze the image above.' })],
  }));
}

export function createConformanceServer(): { server: McpServer['server']; cleanup: () => void } {
  const s = new McpServer({ name: 'writ-conformance-reference', version: '1.0.0' }, { capabilities: { logging: {} } });
  contentTools(s);
  interactiveTools(s);
  resources(s);
  prompts(s);
  return { server: s.server, cleanup: () => {} };
}

/** The reference server on streamable HTTP at port 0 (`/mcp`), sessions as server-everything's launcher keeps them. */
export function startConformanceServer(): Promise<McpTestServer> {
  return startMcpTestServer(createConformanceServer);
}
