/**
 * Shared control-plane records (SPEC 2.1-2.4). zod schemas validate the management API and
 * type everything else; the decision core and the stores use the inferred types.
 */
import { z } from '@hono/zod-openapi';
import { MAX_CALL_TOKENS } from '../lib/reservation-header.js';
import { whenProblem } from './decision/tool-rules.js';

export const KINDS = ['', 'service', 'agent', 'model', 'tool'] as const;
export const DATA_CLASSES = ['', 'public', 'internal', 'regulated'] as const;

/** `host:port` with a DNS name, IPv4 or bracketed IPv6 host and a port 1-65535. */
export const UPSTREAM_RE = /^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?):(?:[1-9]\d{0,4})$/;

export const BUDGET_MODES = ['enforce', 'audit'] as const;

export const BudgetSchema = z
  .object({
    tokensPerHour: z.number().int().nonnegative().optional(),
    callsPerHour: z.number().int().nonnegative().optional(),
    costUsdPerDay: z.number().nonnegative().finite().optional(),
    /** `enforce` (default) denies past a ceiling; `audit` allows and records what would have been denied. */
    mode: z.enum(BUDGET_MODES).optional(),
  })
  .strict();
export type Budget = z.infer<typeof BudgetSchema>;

/**
 * The characters of a registry name (at most `REGISTRY_NAME_MAX` of them). A `/` separates
 * segments none of which is empty, `.` or `..`: a URL path would resolve those to another entry's
 * name (`DELETE /v1/registry/services/x/../y` reached `y`).
 */
export const REGISTRY_NAME_RE = /^(?!.*\/\.{1,2}(?:\/|$))(?!.*\/\/)(?!.*\/$)[A-Za-z0-9][A-Za-z0-9._:/-]*$/;
export const REGISTRY_NAME_MAX = 253;

/** A registry name (a service, agent, model or tool; the broker's model names are the same names). */
export const RegistryName = z
  .string()
  .min(1)
  .max(REGISTRY_NAME_MAX)
  .regex(REGISTRY_NAME_RE, 'letters, digits and . _ : / - only, starting with a letter or digit, no empty, . or .. segment between slashes');

/** A list of names read as a set, as the CRDs declare it (`x-kubernetes-list-type: set`): a repeated entry is refused. */
const nameList = z
  .array(z.string().min(1).max(REGISTRY_NAME_MAX))
  .max(10_000)
  .superRefine((list, ctx) => {
    const seen = new Set<string>();
    list.forEach((x, i) => {
      if (seen.has(x)) ctx.addIssue({ code: 'custom', path: [i], message: `duplicate entry ${JSON.stringify(x)}` });
      seen.add(x);
    });
  });

export const PROTOCOLS = ['', 'mcp'] as const;

/**
 * One of an agent's tool rules (issue 42): `tool` names what it covers as `allowTools` does
 * (`<service>`, `<service>/<tool>`, `<service>/<prefix>*`); `when` is a CEL condition over
 * `args`, `agent`, `task` and `onBehalfOf` checked at call time (a rule whose condition does not
 * compile, or reads anything else, is refused here); `approval: required` holds the call for a
 * human; `dataClass: regulated` needs an approved delegation as a regulated target does.
 */
export const ToolRuleSchema = z
  .object({
    tool: z.string().min(1).max(REGISTRY_NAME_MAX),
    when: z
      .string()
      .min(1)
      .superRefine((w, ctx) => {
        const why = whenProblem(w);
        if (why) ctx.addIssue({ code: 'custom', message: `when does not compile as a call-time rule: ${why}` });
      })
      .optional(),
    approval: z.enum(['required']).optional(),
    dataClass: z.enum(['regulated']).optional(),
  })
  .strict();
export type ToolRule = z.infer<typeof ToolRuleSchema>;

/**
 * Most dollars one report may carry (tokens: MAX_CALL_TOKENS, what one call may reserve): the
 * meters and the shared ledger add them up, and an unbounded figure would overflow them
 * (Infinity, or past the integers a double holds exactly) and deny the agent for the window.
 */
export const USAGE_COST_MAX = 1e6;

/**
 * One tool of an MCP service with its price (issue 42): each `tools/call` of it is charged
 * `costUsd` against the calling agent's `costUsdPerDay`, reserved before the call is forwarded.
 * `name` is the tool's name on the server (what `tools/call` sends), exactly.
 */
export const ToolCostSchema = z
  .object({
    name: z.string().min(1).max(REGISTRY_NAME_MAX),
    costUsd: z.number().nonnegative().finite().max(USAGE_COST_MAX),
  })
  .strict();
export type ToolCost = z.infer<typeof ToolCostSchema>;

/** An HTTP path on an upstream: `/` then visible ASCII, no `?` or `#`. */
const UPSTREAM_PATH_RE = /^\/[\x21-\x22\x24-\x3e\x40-\x7e]*$/;

/** A Kubernetes object name (DNS-1123 subdomain) and a Secret data key: safe as path segments. */
const SECRET_NAME_RE = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const SECRET_KEY_RE = /^[-._a-zA-Z0-9]{1,253}$/;
/** An HTTP field name / auth scheme (RFC 9110 token). */
const HTTP_TOKEN_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$/;

/**
 * The credential an upstream gets instead of the agent's (issue 43 item 7), exactly one of:
 * - `secretRef`: a Secret reference, never a literal; read from `UPSTREAM_SECRETS_DIR/<name>/<key>`
 *   (a mounted Secret). Sent as `<header>: <scheme> <value>` (default `Authorization: Bearer`;
 *   `scheme: ""` sends the value alone).
 * - `exchange: true`: a Writ access token exchanged (RFC 8693) for this entry from the agent's own
 *   Writ token, carrying the same human (`sub`) and agent (`act`), sent as `Authorization: Bearer`
 *   (lib/upstream-tokens.ts): the upstream can see who acts for whom itself.
 */
export const UpstreamAuthSchema = z
  .object({
    secretRef: z
      .object({
        name: z.string().regex(SECRET_NAME_RE, 'secretRef.name must be a Secret name (DNS-1123)'),
        key: z.string().regex(SECRET_KEY_RE, 'secretRef.key must be a Secret data key'),
      })
      .strict()
      .optional(),
    header: z.string().regex(HTTP_TOKEN_RE, 'header must be an HTTP field name').optional(),
    scheme: z.union([z.literal(''), z.string().regex(HTTP_TOKEN_RE, 'scheme must be an HTTP auth scheme')]).optional(),
    exchange: z.literal(true).optional(),
  })
  .strict()
  .superRefine((a, ctx) => {
    if ((a.secretRef === undefined) === (a.exchange === undefined))
      ctx.addIssue({ code: 'custom', path: [], message: 'upstreamAuth names exactly one of secretRef or exchange' });
    if (a.exchange && (a.header !== undefined || a.scheme !== undefined))
      ctx.addIssue({
        code: 'custom',
        path: ['exchange'],
        message: 'an exchanged token is sent as Authorization: Bearer (header and scheme are for secretRef)',
      });
  });
export type UpstreamAuth = z.infer<typeof UpstreamAuthSchema>;

export const ServiceSchema = z
  .object({
    name: RegistryName,
    upstream: z
      .string()
      .regex(UPSTREAM_RE, 'upstream must be host:port')
      .refine((u) => Number(u.slice(u.lastIndexOf(':') + 1)) <= 65535, 'upstream port must be 1-65535'),
    owner: z.string().max(253).optional(),
    requireScope: z.string().max(253).optional(),
    public: z.boolean().optional(),
    /** RFC 3339; empty (or Go's zero time) means "set by the store". */
    registeredAt: z.union([z.iso.datetime({ offset: true }), z.literal('')]).optional(),
    kind: z.enum(KINDS).optional(),
    allowModels: nameList.optional(),
    allowTools: nameList.optional(),
    allowAgents: nameList.optional(),
    /** Forward proxy deny-by-default list (SPEC 2.1 `EgressAllow`): registry names or host[:port]. */
    egressAllow: nameList.optional(),
    budget: BudgetSchema.optional(),
    dataClass: z.enum(DATA_CLASSES).optional(),
    /** `mcp`: a tool server the gateway serves at `/mcp/{name}` on the broker listener (kind tool). */
    protocol: z.enum(PROTOCOLS).optional(),
    /** The MCP endpoint's path on the upstream (protocol mcp; default `/mcp`). */
    path: z.string().max(1024).regex(UPSTREAM_PATH_RE, 'path must start with / and hold no query, fragment, space or control character').optional(),
    /** The upstream's own credential (a Secret reference), sent by the MCP gateway and the forward proxy. */
    upstreamAuth: UpstreamAuthSchema.optional(),
    /**
     * An OAuth protected resource behind Envoy (issue 43 item 6, opt-in): the service's URL as its
     * clients reach it (RFC 8707 / RFC 9728 `resource`). `/authz` then answers a refusal for want of
     * a credential 401 with `WWW-Authenticate: Bearer resource_metadata=...` naming the metadata the
     * control plane serves for it (MGMT_PUBLIC_URL); the token endpoint takes this URL as `resource`.
     */
    oauthResource: z
      .string()
      .max(2048)
      .regex(/^https?:\/\/[^\s#]+$/i, 'oauthResource must be an absolute http(s) URL without fragment or space')
      .optional(),
    /** Agents: rules on the tools they call (issue 42). */
    toolRules: z.array(ToolRuleSchema).max(1000).optional(),
    /** MCP services: the price of a call of each tool named (the others cost nothing). */
    tools: z
      .array(ToolCostSchema)
      .max(10_000)
      .superRefine((list, ctx) => {
        const seen = new Set<string>();
        list.forEach((t, i) => {
          if (seen.has(t.name)) ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `duplicate tool ${JSON.stringify(t.name)}` });
          seen.add(t.name);
        });
      })
      .optional(),
  })
  .strict()
  .superRefine((s, ctx) => {
    if (s.protocol === 'mcp' && s.kind !== 'tool') ctx.addIssue({ code: 'custom', path: ['protocol'], message: 'protocol mcp is for kind tool' });
    if (s.oauthResource !== undefined && (s.kind === 'agent' || s.kind === 'model' || s.protocol === 'mcp'))
      ctx.addIssue({
        code: 'custom',
        path: ['oauthResource'],
        message: 'oauthResource is for a service or tool behind Envoy (an MCP server has its gateway route)',
      });
    if (s.protocol === 'mcp' && s.name.includes('/'))
      ctx.addIssue({ code: 'custom', path: ['name'], message: 'an mcp service name has no "/": allowTools reads <service>/<tool>' });
    if (s.path !== undefined && s.protocol !== 'mcp') ctx.addIssue({ code: 'custom', path: ['path'], message: 'path is for protocol mcp' });
    if (s.toolRules?.length && s.kind !== 'agent') ctx.addIssue({ code: 'custom', path: ['toolRules'], message: 'toolRules are for kind agent' });
    if (s.tools?.length && s.protocol !== 'mcp') ctx.addIssue({ code: 'custom', path: ['tools'], message: 'tools are for protocol mcp' });
  });
export type Service = z.infer<typeof ServiceSchema>;

export const UsageSchema = z
  .object({
    agent: z.string().min(1).max(REGISTRY_NAME_MAX),
    model: z.string().max(REGISTRY_NAME_MAX),
    tokens: z.number().int().nonnegative().max(MAX_CALL_TOKENS),
    costUsd: z.number().nonnegative().max(USAGE_COST_MAX),
    /** The broker's budget reservation this report settles (issue 14); absent: plain usage. */
    reservation: z.string().min(1).max(64).optional(),
  })
  .strict();
export type UsageReport = z.infer<typeof UsageSchema>;

/** Most reports in one `/v1/usage` batch (an array body: the broker's settlements of a few milliseconds, one post). */
export const USAGE_BATCH_MAX = 500;
/** A `/v1/usage` body: one report (SPEC 4.3) or a batch of them. */
export const UsageBodySchema = z.union([UsageSchema, z.array(UsageSchema).min(1).max(USAGE_BATCH_MAX)]);

export const AUDIT_ACTIONS = [
  'authz',
  'egress',
  'model.invoke',
  'tool.read',
  'tool.call',
  'agent.invoke',
  'egress.proxy',
  'egress.approval',
  'registry.upsert',
] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];
export type Rule = 'identity' | 'registry' | 'inline' | 'opa' | 'delegation';

/** What a caller hands to the audit chain. */
export interface AuditEntry {
  action: AuditAction;
  subject?: string;
  actor?: string;
  task?: string;
  service?: string;
  allow: boolean;
  reason: string;
  rule?: Rule;
  delegationId?: string;
  /** Epoch seconds. */
  delegationExp?: number;
  /** `tool.call`: the tool, prompt or resource URI the MCP message names. */
  tool?: string;
  /** `tool.call`: SHA-256 (hex) of the RFC 8785 form of the call's arguments; the arguments are never recorded. */
  argsDigest?: string;
  /** `tool.call`: the MCP session (`Mcp-Session-Id`). */
  session?: string;
}

/** A chained audit record (SPEC 2.3). */
export interface AuditRecord extends AuditEntry {
  seq: number;
  /** RFC 3339 time the record was appended. */
  time: string;
  prevHash: string;
  hash: string;
}

/** Outcome of a decision: pure data, rendered by /authz and by the forward proxy. */
export interface Decision {
  allow: boolean;
  status: 200 | 401 | 403;
  reason: string;
  rule: Rule;
  headers: Record<string, string>;
  /** Set when the egress target needs a human decision (regulated, no delegation). */
  needsApproval?: boolean;
  /**
   * No usable credential was presented: the proxy answers 407 with a challenge; `/authz`, for a
   * service that opts in (`oauthResource`), 401 with the RFC 9728 challenge (decision/egress-challenge.ts).
   */
  challenge?: boolean;
  /** The scopes an access token lacks for this target (every one it needs: `requireScope`), answered 403 `insufficient_scope`. */
  insufficientScope?: string[];
}
