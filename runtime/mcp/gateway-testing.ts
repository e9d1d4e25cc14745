/**
 * The MCP gateway over real sockets for tests: the control plane (registry, audit chain, budgets,
 * approval queue) on in-memory PGlite, the reference MCP server (everything-testing.ts), and the
 * broker listener with the gateway mounted at `/mcp/{service}`; plus an official SDK client
 * connected through it as a named agent.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { H } from '../lib/brand.js';
import { holdForHuman } from '../control-plane/approvals/hold.js';
import { startControlPlaneWithEgress, type RunningWithEgress } from '../control-plane/egress-gateway.js';
import type { IdentityPort } from '../control-plane/identity-port.js';
import type { Service } from '../control-plane/types.js';
import { createLocalDecisionClient } from '../broker/decision-local.js';
import type { BrokerConfig } from '../broker/config.js';
import { startBroker, type RunningBroker } from '../broker/server.js';
import { openTestPglite } from '../store/testing.js';
import type { Store } from '../store/factory.js';
import { startEverything, type Everything } from './everything-testing.js';
import { createMcpGateway, type McpGatewayOptions } from './gateway.js';
import { loadConfig } from '../lib/settings.js';

/** Identity is not under test here: no VP is presented, no delegation is approved. */
const identity: IdentityPort = {
  verifyPresentation: async () => ({ ok: false, reason: 'no VPs in these tests' }),
  checkDelegation: async () => ({ ok: false, reason: 'no approved delegation' }),
};

export interface McpHarness {
  everything: Everything;
  run: RunningWithEgress;
  broker: RunningBroker;
  /** The control plane's store (in-memory PGlite). */
  store: Store;
  /** `http://127.0.0.1:<broker>/mcp/everything`. */
  url: string;
  mgmt: string;
  /** Registers (or replaces) an agent entry. */
  agent(a: Omit<Service, 'upstream' | 'kind'>): Promise<void>;
  /** An SDK client connected through the gateway as `actor`, with `headers` on every request. */
  client(actor: string, headers?: Record<string, string>): Promise<Client>;
  close(): Promise<void>;
}

/**
 * `identity`: the identity port the decisions use (default: one that verifies nothing); `models`:
 * the broker's model table on the same listener (default none), with `providerKey` the key it
 * sends those providers; `env`: settings added to the control plane's (UPSTREAM_SECRETS_DIR for the
 * proxy); `gateway`: options added to the gateway's.
 */
export async function startMcpHarness(
  o: {
    identity?: IdentityPort;
    models?: BrokerConfig['models'];
    providerKey?: string;
    env?: Record<string, string>;
    gateway?: Partial<McpGatewayOptions>;
  } = {},
): Promise<McpHarness> {
  const store: Store = await openTestPglite();
  const everything = await startEverything();
  const run = await startControlPlaneWithEgress({
    store,
    config: loadConfig({ AUDIT_CHAIN_ID: 'mcp-test', ...o.env }),
    identity: o.identity ?? identity,
    decisionAddr: '127.0.0.1:0',
    mgmtAddr: '127.0.0.1:0',
    proxyAddr: '127.0.0.1:0',
    queue: { timeoutMs: 30_000, pollMs: 200 },
  });
  const engine = run.cp.plane.engine;
  const broker = await startBroker({
    addr: '127.0.0.1:0',
    config: { models: o.models ?? [] },
    ...(o.providerKey ? { providerKey: o.providerKey } : {}),
    localDecisions: (timeoutMs) => createLocalDecisionClient(engine, { timeoutMs }),
    usageUrl: `http://127.0.0.1:${run.cp.mgmtPort}/v1/usage`,
    mcp: createMcpGateway({
      engine,
      hold: (req, signal) => holdForHuman(run.gateway.queue, req, signal),
      upstreamTimeoutMs: 5000,
      authorizationServer: () => (o.identity ?? identity).tokens?.().issuer(),
      ...o.gateway,
    }),
  });
  await run.cp.plane.registry.upsert({ name: 'everything', upstream: everything.upstream, kind: 'tool', protocol: 'mcp' });
  const clients: Client[] = [];
  const url = `http://127.0.0.1:${broker.port}/mcp/everything`;
  return {
    everything,
    run,
    broker,
    store,
    url,
    mgmt: `http://127.0.0.1:${run.cp.mgmtPort}`,
    async agent(a) {
      await run.cp.plane.registry.upsert({ ...a, upstream: `${a.name}.agents.svc:8080`, kind: 'agent' });
    },
    async client(actor, headers = {}) {
      const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { [H.actor]: actor, ...headers } } });
      const c = new Client({ name: `test-${actor}`, version: '1.0.0' });
      await c.connect(transport);
      clients.push(c);
      return c;
    },
    async close() {
      await Promise.all(clients.map((c) => c.close().catch(() => {})));
      await broker.close(0);
      await run.close();
      await everything.close();
      await store.close();
    },
  };
}
