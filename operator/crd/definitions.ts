/**
 * The CustomResourceDefinitions of the `writ.io` group, as data: the ONE source of truth.
 * `crds/*.yaml` is rendered from here (`npx tsx operator/crd/generate.ts`; crd.test.ts fails when
 * the files drift), and the validator (`operator/validate/`) checks resources against the same
 * objects, so `writ validate`, the tests and the cluster agree.
 *
 * Enums come from the runtime's own lists (registry kinds, data classes, governance statuses,
 * owner types, risk tiers) so a CR can only say what the decision engine understands.
 */
import { API_GROUP, BRAND } from '../../runtime/lib/brand.js';
import { AGENT_STATUSES, OWNER_TYPES, RISK_TIERS } from '../../runtime/identity/enterprise/governance/model.js';

export const VERSION = 'v1alpha1';
export const API_VERSION = `${API_GROUP}/${VERSION}`;

/** A structural schema node (the subset of OpenAPI v3 Kubernetes accepts). */
export interface Schema {
  type?: 'object' | 'array' | 'string' | 'integer' | 'number' | 'boolean';
  format?: string;
  description?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  enum?: (string | number | boolean)[];
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  maxItems?: number;
  maxProperties?: number;
  default?: unknown;
  'x-kubernetes-list-type'?: 'atomic' | 'set' | 'map';
  'x-kubernetes-list-map-keys'?: string[];
  'x-kubernetes-validations'?: { rule: string; message: string; reason?: string; fieldPath?: string }[];
}

export interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'date' | 'boolean' | 'number';
  jsonPath: string;
  description?: string;
  priority?: number;
}

export interface CrdKind {
  kind: 'RegistryService' | 'AgentPolicy' | 'GovernedAgent';
  plural: string;
  singular: string;
  shortNames: string[];
  spec: Schema;
  status: Schema;
  columns: PrinterColumn[];
}

/** A registry name (SPEC 2.1 names) that is also a Kubernetes object name (DNS subdomain). */
const NAME_RE = '^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$';
/** Names inside allow lists: registry names (letters, digits and . _ : / -). */
const REF_RE = '^[A-Za-z0-9][A-Za-z0-9._:/-]*$';
/** `host:port` (same rule as the registry's UPSTREAM_RE, port 1-99999 here, <= 65535 by CEL). */
const UPSTREAM_RE = '^(\\[[0-9a-fA-F:.]+\\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?):[1-9][0-9]{0,4}$';
const TENANT_RE = '^[A-Za-z0-9][A-Za-z0-9._-]*$';
const RUNTIME_RE = '^[a-z0-9][a-z0-9_.-]*$';

const str = (description: string, extra: Partial<Schema> = {}): Schema => ({ type: 'string', description, maxLength: 253, ...extra });
const nameSet = (description: string, pattern = REF_RE): Schema => ({
  type: 'array',
  description,
  maxItems: 1000,
  'x-kubernetes-list-type': 'set',
  items: { type: 'string', minLength: 1, maxLength: 253, pattern },
});
/** A registry name, or `<mcp service>/<tool prefix>*` (allowTools and tool rules). */
const TOOL_REF_RE = '^[A-Za-z0-9][A-Za-z0-9._:/-]*\\*?$';
const upstream = (description: string): Schema => ({
  type: 'string',
  description,
  maxLength: 261,
  pattern: UPSTREAM_RE,
  'x-kubernetes-validations': [{ rule: "int(self.substring(self.lastIndexOf(':') + 1)) <= 65535", message: 'upstream port must be 1-65535' }],
});
const dataClass: Schema = {
  type: 'string',
  description: 'public, internal or regulated; regulated requires a task delegation (SPEC 2.1).',
  enum: ['public', 'internal', 'regulated'],
};

const condition: Schema = {
  type: 'object',
  required: ['type', 'status', 'lastTransitionTime', 'reason', 'message'],
  properties: {
    type: {
      type: 'string',
      maxLength: 316,
      pattern: '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$',
    },
    status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
    observedGeneration: { type: 'integer', format: 'int64', minimum: 0 },
    lastTransitionTime: { type: 'string', format: 'date-time' },
    reason: { type: 'string', minLength: 1, maxLength: 1024, pattern: '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$' },
    message: { type: 'string', maxLength: 32768 },
  },
};

/** Status shared by the three kinds: conditions Accepted, Programmed, Ready (metav1.Condition). */
const baseStatus = (extra: Record<string, Schema> = {}): Schema => ({
  type: 'object',
  properties: {
    observedGeneration: { type: 'integer', format: 'int64', minimum: 0, description: 'The metadata.generation the status describes.' },
    policyVersion: { type: 'integer', format: 'int64', minimum: 0, description: 'Policy snapshot version the resource was programmed at.' },
    conditions: {
      type: 'array',
      maxItems: 8,
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['type'],
      items: condition,
    },
    ...extra,
  },
});

const READY: PrinterColumn = { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' };
const REASON: PrinterColumn = { name: 'Reason', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].reason' };
const AGE: PrinterColumn = { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' };

export const REGISTRY_SERVICE: CrdKind = {
  kind: 'RegistryService',
  plural: 'registryservices',
  singular: 'registryservice',
  shortNames: ['rsvc'],
  spec: {
    type: 'object',
    description: 'A registry entry (SPEC 2.1) named metadata.name: a north-south service, a model or a tool.',
    required: ['upstream'],
    properties: {
      upstream: upstream('In-cluster DNS target, host:port.'),
      owner: str('Owning team.'),
      requireScope: str('OAuth scope a caller must hold; empty means any authenticated caller.'),
      public: { type: 'boolean', default: false, description: 'If true, unauthenticated callers are allowed.' },
      kind: { type: 'string', enum: ['service', 'model', 'tool'], default: 'service', description: 'Agents are declared with an AgentPolicy.' },
      dataClass,
      protocol: {
        type: 'string',
        enum: ['mcp'],
        description: 'mcp: an MCP server (streamable HTTP) the gateway serves at /mcp/<name> on the broker listener (kind tool).',
      },
      path: str('The MCP endpoint path on the upstream (protocol mcp); default /mcp.', { maxLength: 1024, pattern: '^/[!-"$->@-~]*$' }),
      tools: {
        type: 'array',
        description:
          "Prices of the MCP server's tools (protocol mcp): each tools/call of a tool named here counts costUsd against the calling agent's costUsdPerDay.",
        maxItems: 10000,
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['name'],
        items: {
          type: 'object',
          required: ['name', 'costUsd'],
          properties: {
            name: str('The tool name on the server, exactly as tools/call sends it.', { minLength: 1 }),
            costUsd: { type: 'number', minimum: 0, maximum: 1e6, description: 'USD charged per call.' },
          },
        },
      },
      oauthResource: str(
        "An OAuth protected resource behind Envoy (opt-in): the service's URL as its clients reach it. /authz answers a refusal for want of a credential 401 with WWW-Authenticate: Bearer resource_metadata naming the metadata the control plane serves for it (MGMT_PUBLIC_URL); a token is asked for with this URL as resource.",
        { maxLength: 2048, pattern: '^[hH][tT][tT][pP][sS]?://[^\\s#]+$' },
      ),
      upstreamAuth: {
        type: 'object',
        description:
          'What the upstream gets (the MCP gateway, the forward proxy), never the agent\'s credential; exactly one of: secretRef, a key of a Secret mounted at UPSTREAM_SECRETS_DIR/<name>/<key>, sent as "<header>: <scheme> <value>" (never a literal); or exchange: true, a Writ access token the MCP gateway or the forward proxy exchanges (RFC 8693) for this service from the agent\'s own, of the same human (sub) and agent (act), sent as Authorization: Bearer.',
        properties: {
          secretRef: {
            type: 'object',
            required: ['name', 'key'],
            properties: {
              name: str("The Secret (in the control plane's namespace).", { pattern: '^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$' }),
              key: str('The key in its data.', { pattern: '^[-._a-zA-Z0-9]{1,253}$' }),
            },
          },
          header: str('Default Authorization.', { maxLength: 64, pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$" }),
          scheme: str('Default Bearer; empty sends the value alone.', { maxLength: 64, pattern: "^([!#$%&'*+.^_`|~0-9A-Za-z-]{1,64})?$" }),
          exchange: { type: 'boolean', enum: [true], description: "true: the upstream gets a token exchanged for it from the agent's Writ access token." },
        },
        'x-kubernetes-validations': [
          { rule: 'has(self.secretRef) != has(self.exchange)', message: 'upstreamAuth names exactly one of secretRef or exchange' },
          {
            rule: '!has(self.exchange) || (!has(self.header) && !has(self.scheme))',
            message: 'an exchanged token is sent as Authorization: Bearer (header and scheme are for secretRef)',
            fieldPath: '.exchange',
          },
        ],
      },
    },
    'x-kubernetes-validations': [
      { rule: "!has(self.protocol) || self.kind == 'tool'", message: 'protocol mcp is for kind tool', fieldPath: '.protocol' },
      { rule: '!has(self.path) || has(self.protocol)', message: 'path is for protocol mcp', fieldPath: '.path' },
      { rule: '!has(self.tools) || has(self.protocol)', message: 'tools are for protocol mcp', fieldPath: '.tools' },
      {
        rule: "!has(self.oauthResource) || (self.kind != 'agent' && self.kind != 'model' && !has(self.protocol))",
        message: 'oauthResource is for a service or tool behind Envoy (an MCP server has its gateway route)',
        fieldPath: '.oauthResource',
      },
      {
        rule: "!self.public || !has(self.requireScope) || self.requireScope == ''",
        message: 'a public service cannot require a scope',
        fieldPath: '.requireScope',
      },
      { rule: "!self.public || !has(self.dataClass) || self.dataClass != 'regulated'", message: 'a regulated service cannot be public', fieldPath: '.public' },
    ],
  },
  status: baseStatus(),
  columns: [
    { name: 'Kind', type: 'string', jsonPath: '.spec.kind' },
    { name: 'Upstream', type: 'string', jsonPath: '.spec.upstream' },
    { name: 'Class', type: 'string', jsonPath: '.spec.dataClass' },
    READY,
    REASON,
    AGE,
  ],
};

export const AGENT_POLICY: CrdKind = {
  kind: 'AgentPolicy',
  plural: 'agentpolicies',
  singular: 'agentpolicy',
  shortNames: ['apol'],
  spec: {
    type: 'object',
    description: 'What one agent may do: a registry entry of kind agent (SPEC 2.1), plus its identity-authority agent.',
    required: ['agent'],
    properties: {
      agent: str('The agent this policy governs (its registry name).', { pattern: NAME_RE }),
      upstream: upstream('host:port of the agent itself, for agent-to-agent hops. Default: <agent>.<namespace>.svc:8080.'),
      owner: str('Owning team.'),
      allowModels: nameSet('Model names the agent may invoke.'),
      allowTools: nameSet(
        'Tools the agent may call: a tool service name (all of it), or for an MCP service <service>/<tool> or <service>/<prefix>*.',
        TOOL_REF_RE,
      ),
      allowAgents: nameSet('Peer agents the agent may hop to.'),
      egressAllow: nameSet('Forward-proxy allow list: registry names or host[:port].'),
      dataClass,
      toolRules: {
        type: 'array',
        description: 'Rules on the MCP tools the agent calls, each applied to every call of the tools it covers.',
        maxItems: 1000,
        'x-kubernetes-list-type': 'atomic',
        items: {
          type: 'object',
          required: ['tool'],
          properties: {
            tool: str('What the rule covers, as allowTools names it: <service>, <service>/<tool> or <service>/<prefix>*.', {
              minLength: 1,
              pattern: TOOL_REF_RE,
            }),
            when: str(
              'CEL over args, agent, task and onBehalfOf, checked at call time (never when listing tools); a call it does not hold for is refused. Refused at apply when it does not compile or reads anything else.',
              { minLength: 1, maxLength: 4096 },
            ),
            approval: { type: 'string', enum: ['required'], description: 'required: each call is held for a human, bound to the digest of its arguments.' },
            dataClass: { type: 'string', enum: ['regulated'], description: 'regulated: each call needs an approved delegation (SPEC 4.1).' },
          },
        },
      },
      budget: {
        type: 'object',
        description: 'Egress rate ceilings; an absent field means no limit on that dimension.',
        properties: {
          tokensPerHour: { type: 'integer', format: 'int64', minimum: 0 },
          callsPerHour: { type: 'integer', format: 'int64', minimum: 0 },
          costUsdPerDay: { type: 'number', minimum: 0 },
          mode: {
            type: 'string',
            enum: ['enforce', 'audit'],
            description: 'enforce (absent: the default) denies over budget; audit allows and records what would have been denied.',
          },
        },
        'x-kubernetes-validations': [
          {
            rule: 'has(self.tokensPerHour) || has(self.callsPerHour) || has(self.costUsdPerDay)',
            message: 'budget needs at least one ceiling (omit it for no limit)',
          },
        ],
      },
      identity: {
        type: 'object',
        description: 'Registers the agent at the identity authority (POST /v1/agents, idempotent on name).',
        required: ['role'],
        properties: {
          role: str('Role recorded on the agent.', { minLength: 1, maxLength: 128 }),
          capabilities: {
            type: 'array',
            maxItems: 100,
            'x-kubernetes-list-type': 'atomic',
            items: {
              type: 'object',
              required: ['action', 'resource'],
              properties: { action: str('Action, e.g. tool.read.', { minLength: 1 }), resource: str('Resource name.', { minLength: 1 }) },
            },
          },
        },
      },
    },
    'x-kubernetes-validations': [
      { rule: '!has(self.allowAgents) || !(self.agent in self.allowAgents)', message: 'an agent cannot list itself in allowAgents', fieldPath: '.allowAgents' },
    ],
  },
  status: baseStatus(),
  columns: [{ name: 'Agent', type: 'string', jsonPath: '.spec.agent' }, { name: 'Class', type: 'string', jsonPath: '.spec.dataClass' }, READY, REASON, AGE],
};

const ACTIVE_GATE = "self.state != 'active' || (has(self.businessSponsor) && has(self.riskTier) && has(self.approvedRuntime))";

export const GOVERNED_AGENT: CrdKind = {
  kind: 'GovernedAgent',
  plural: 'governedagents',
  singular: 'governedagent',
  shortNames: ['gagent'],
  spec: {
    type: 'object',
    description: 'A governed agent (SPEC 2.8) named metadata.name, and the lifecycle state (SPEC 3.1) its declarer wants.',
    required: ['tenant', 'ownerType', 'ownerRef'],
    properties: {
      tenant: str('Tenant id (immutable).', {
        minLength: 1,
        maxLength: 128,
        pattern: TENANT_RE,
        'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'tenant is immutable' }],
      }),
      ownerType: { type: 'string', enum: [...OWNER_TYPES] },
      ownerRef: str('An employee subject, or a group key <tenant>:<external_id> for team types.', { minLength: 1, maxLength: 600 }),
      teamRef: str('Team reference.', { minLength: 1, maxLength: 600 }),
      businessSponsor: str('Sponsoring employee subject.', { minLength: 1, maxLength: 600 }),
      riskTier: { type: 'string', enum: [...RISK_TIERS] },
      approvedRuntime: str('Runtime label (lower case), e.g. doks_prod, kubernetes_job.', { minLength: 1, maxLength: 64, pattern: RUNTIME_RE }),
      state: {
        type: 'string',
        enum: [...AGENT_STATUSES],
        default: 'draft',
        description: 'Desired lifecycle state; the operator walks the SPEC 3.1 table to it.',
      },
    },
    'x-kubernetes-validations': [
      { rule: ACTIVE_GATE, message: 'state active needs businessSponsor, riskTier and approvedRuntime (the activation gate)', fieldPath: '.state' },
      {
        rule: "self.ownerType == 'employee' || self.ownerRef.startsWith(self.tenant + ':')",
        message: 'a team owner is a group key <tenant>:<external_id> of the same tenant',
        fieldPath: '.ownerRef',
      },
      { rule: "oldSelf.state != 'retired' || self.state == 'retired'", message: 'retired is terminal' },
    ],
  },
  status: baseStatus({
    lifecycle: { type: 'string', enum: [...AGENT_STATUSES], description: 'The status the identity authority reports.' },
    activationBlockers: { type: 'array', maxItems: 32, 'x-kubernetes-list-type': 'atomic', items: { type: 'string', maxLength: 128 } },
  }),
  columns: [
    { name: 'Tenant', type: 'string', jsonPath: '.spec.tenant' },
    { name: 'Owner', type: 'string', jsonPath: '.spec.ownerRef', priority: 1 },
    { name: 'Desired', type: 'string', jsonPath: '.spec.state' },
    { name: 'Status', type: 'string', jsonPath: '.status.lifecycle' },
    READY,
    REASON,
    AGE,
  ],
};

export const KINDS: readonly CrdKind[] = [REGISTRY_SERVICE, AGENT_POLICY, GOVERNED_AGENT];
export type CrKind = CrdKind['kind'];

export function kindOf(kind: string): CrdKind | undefined {
  return KINDS.find((k) => k.kind === kind);
}

/** The metadata a CR must carry (namespaced names are DNS subdomains). */
const metadataSchema: Schema = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 253, pattern: NAME_RE } },
};

/** The openAPIV3Schema of one kind (what the apiserver validates). */
export function openApiSchema(k: CrdKind): Schema {
  return {
    type: 'object',
    description: `${k.kind} (${API_VERSION}).`,
    required: ['spec'],
    properties: {
      apiVersion: { type: 'string' },
      kind: { type: 'string' },
      metadata: metadataSchema,
      spec: k.spec,
      status: k.status,
    },
  };
}

/** The apiextensions.k8s.io/v1 CustomResourceDefinition object of one kind. */
export function crdObject(k: CrdKind): Record<string, unknown> {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${k.plural}.${API_GROUP}`, labels: { [`app.kubernetes.io/part-of`]: BRAND } },
    spec: {
      group: API_GROUP,
      scope: 'Namespaced',
      names: { kind: k.kind, listKind: `${k.kind}List`, plural: k.plural, singular: k.singular, shortNames: k.shortNames, categories: [BRAND] },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          schema: { openAPIV3Schema: openApiSchema(k) },
          subresources: { status: {} },
          additionalPrinterColumns: k.columns,
        },
      ],
    },
  };
}
