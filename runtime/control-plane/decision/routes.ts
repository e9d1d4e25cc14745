/**
 * `POST /v1/decisions/dry-run` on the management API: the same facts as /authz (its headers,
 * method and path, or the same as a JSON body), the same gather and evaluate, nothing
 * committed: no audit record, no budget consumed, no human asked (a proxied request that would
 * be held says so). SPEC 4.6 points users here for a runtime-faithful allow or deny.
 */
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import { normaliseHost } from '../../lib/host-name.js';
import { mgmtHook } from '../mgmt-errors.js';
import { dryRun, type DecisionEngine } from './engine.js';
import { asReceived, factsFromHeaders, proxyFacts } from './facts.js';

const HeaderValue = z.string().max(64 * 1024);
const DryRunBody = z
  .object({
    headers: z
      .record(z.string().max(256), z.union([HeaderValue, z.array(HeaderValue).min(1).max(16)]))
      .openapi({ description: 'The request headers /authz would see (names case-insensitive); a list is a header sent once per value.' }),
    peer: z
      .string()
      .max(64)
      .optional()
      .openapi({ description: 'The address the request comes from: a peer in TRUSTED_PROXIES may name the ingress target in X-Forwarded-Host.' }),
    method: z.string().max(16).optional(),
    path: z.string().max(8192).optional(),
    body: z
      .string()
      .max(1024 * 1024)
      .optional()
      .openapi({ description: 'The request body /authz would see (Envoy with_request_body): an MCP message (JSON-RPC) is decided from it.' }),
    proxy: z
      .object({ host: z.string().min(1).max(253), port: z.number().int().min(1).max(65535), connect: z.boolean().default(false) })
      .strict()
      .optional()
      .openapi({ description: 'Decide as the forward proxy would for this host:port (the VP from Proxy-Authorization).' }),
  })
  .strict()
  .openapi('DryRunRequest');
const DryRunResult = z
  .object({
    decision: z.object({ allow: z.boolean(), status: z.number().int(), rule: z.string(), reason: z.string(), headers: z.record(z.string(), z.string()) }),
    rule: z.string(),
    layers: z.array(z.object({ layer: z.string(), verdict: z.string(), reason: z.string() })),
    version: z.number().int(),
  })
  .openapi('DryRunResult');

export function decisionRoutes(engine: DecisionEngine): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: mgmtHook });
  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/decisions/dry-run',
      request: { body: { content: { 'application/json': { schema: DryRunBody } }, required: true } },
      responses: {
        200: {
          content: { 'application/json': { schema: DryRunResult } },
          description: 'The decision /authz would make now, every layer in order, and the snapshot version.',
        },
        400: { content: { 'application/json': { schema: z.object({ error: z.string() }) } }, description: 'Malformed request.' },
      },
    }),
    async (c) => {
      const b = c.req.valid('json');
      const lines: Record<string, string[]> = {};
      for (const [k, v] of Object.entries(b.headers)) (lines[k.toLowerCase()] ??= []).push(...(typeof v === 'string' ? [v] : v));
      // As node hands /authz a request: repeats joined with ", ", and the raw lines that tell them.
      const { headers, rawHeaders } = asReceived(lines);
      let facts = factsFromHeaders(headers, { method: b.method, path: b.path, trustedPeer: engine.trustedPeer(b.peer), rawHeaders, body: b.body });
      if (b.proxy) {
        // The host as the proxy reads it from a request target: refused, or in its one spelling.
        const host = normaliseHost(b.proxy.host);
        if (!host) return c.json({ error: `invalid request: proxy.host: not a host name or IP address (${JSON.stringify(b.proxy.host.slice(0, 200))})` }, 400);
        const hostPort = `${host}:${b.proxy.port}`;
        facts = proxyFacts(
          headers,
          { host, port: b.proxy.port, hostPort, connect: b.proxy.connect },
          b.proxy.connect ? 'CONNECT' : (b.method ?? 'GET'),
          b.proxy.connect ? hostPort : `http://${hostPort}${b.path ?? '/'}`,
          rawHeaders,
        );
      }
      const ev = await dryRun(engine, facts);
      const d = ev.decision;
      return c.json(
        {
          // Through the proxy a challenge is answered 407 (Proxy-Authenticate), as the proxy answers it.
          decision: { allow: d.allow, status: b.proxy && d.challenge ? 407 : d.status, rule: d.rule, reason: d.reason, headers: d.headers },
          rule: d.rule,
          layers: ev.layers,
          version: ev.version,
        },
        200,
      );
    },
  );
  return app;
}
