/**
 * The tool layer (issue 42): what one MCP message to a `protocol: mcp` tool service may do, after
 * the allowlist layer let the agent reach the service (an `allowTools` entry names it whole,
 * `<service>`, or in part, `<service>/<tool>` or `<service>/<prefix>*`). By method:
 * - `tools/call`, `resources/read|subscribe|unsubscribe`, `prompts/get` are decided: the name
 *   (tool, resource URI, prompt) must be covered by an allowTools entry; for `tools/call` the
 *   agent's `toolRules` covering the tool apply: every `when` must hold over the arguments (CEL,
 *   tool-rules.ts), `dataClass: regulated` needs an approved delegation (the delegation layer),
 *   `approval: required` holds the call for a human, bound to the digest of its arguments (the
 *   tool approval layer, after the delegation);
 * - `initialize`, `ping`, notifications, the client's answers to server requests, the list
 *   methods, the GET stream and DELETE pass;
 * - any other method is denied (deny by default), as is a check of an MCP service that carries no
 *   message. Only `tools/call` counts against `callsPerHour` (egress.ts `counted`), and against
 *   `costUsdPerDay` when its service prices the tool (`toolPrice`). Pure.
 */
import { canonicalJson } from '../../lib/jcs.js';
import type { Service, ToolRule } from '../types.js';
import { ask, pass, refuse, skip, type PolicyLayer, type Verdict } from './driver.js';
import type { EgressContext } from './egress.js';
import { whenHolds } from './tool-rules.js';
import type { Answers, HoldRequest, McpCall } from './types.js';

type V = Verdict<EgressContext>;

export type MethodClass = 'decided' | 'pass' | 'unknown';

const DECIDED: ReadonlySet<string> = new Set(['tools/call', 'resources/read', 'resources/subscribe', 'resources/unsubscribe', 'prompts/get']);
const PASSING: ReadonlySet<string> = new Set([
  'initialize',
  'ping',
  'tools/list',
  'resources/list',
  'resources/templates/list',
  'prompts/list',
  'completion/complete',
  'logging/setLevel',
  'tasks/get',
  'tasks/result',
  'tasks/list',
  'tasks/cancel',
  // Not JSON-RPC methods: the client's answer to a server request, the GET stream, DELETE.
  'response',
  'stream',
  'end',
]);

/** How the tool layer treats `method` (MCP 2025-11-25). */
export function methodClass(method: string): MethodClass {
  if (DECIDED.has(method)) return 'decided';
  if (PASSING.has(method) || method.startsWith('notifications/')) return 'pass';
  return 'unknown';
}

/** Does the allowTools (or rule) entry `e` cover `name` of `service`? `<service>` covers every name. */
export function covers(e: string, service: string, name: string): boolean {
  if (e === service) return true;
  if (e.length <= service.length + 1 || e.charCodeAt(service.length) !== 47 || !e.startsWith(service)) return false;
  const rest = e.slice(service.length + 1);
  return rest.endsWith('*') ? name.startsWith(rest.slice(0, -1)) : name === rest;
}

/** May the agent reach `service` at all (some allowTools entry names it whole or in part)? */
export function reaches(actor: Service, service: string): boolean {
  return (actor.allowTools ?? []).some((e) => e === service || (e.length > service.length + 1 && e.charCodeAt(service.length) === 47 && e.startsWith(service)));
}

/** The allowTools entry that lets the agent use `name` of `service`, if any. */
export function allowEntry(actor: Service, service: string, name: string): string | undefined {
  return (actor.allowTools ?? []).find((e) => covers(e, service, name));
}

/**
 * Which names of `service` a `tools/list` answer may show this agent: list-time filtering reads
 * names only, never a rule's `when` (no arguments exist yet). No agent: none.
 */
export function mayList(actor: Service | undefined, service: string): (name: string) => boolean {
  const list = actor?.allowTools ?? [];
  if (list.includes(service)) return () => true;
  // `covers` by entry, with the entries of this service read once: exact names and prefixes.
  const own = list.filter((e) => e.length > service.length + 1 && e.startsWith(`${service}/`)).map((e) => e.slice(service.length + 1));
  const exact = new Set(own.filter((e) => !e.endsWith('*')));
  const prefixes = own.filter((e) => e.endsWith('*')).map((e) => e.slice(0, -1));
  return (name) => exact.has(name) || prefixes.some((p) => name.startsWith(p));
}

/** The tools of a `tools/list` answer this agent may call (`mayList`); a tool without a string name is dropped. */
export function filterTools<T>(actor: Service | undefined, service: string, tools: readonly T[]): T[] {
  const may = mayList(actor, service);
  return tools.filter((t) => {
    const name = (t as { name?: unknown }).name;
    return typeof name === 'string' && may(name);
  });
}

/** `<service>/<name>`: the metric label and the delegation's resource. */
export const named = (service: string, name: string) => `${service}/${name}`;

/** Is `target` an MCP tool service (its checks are decided per message)? */
export const isMcp = (target: Service | undefined): boolean => target?.protocol === 'mcp';

/** The price of a `tools/call` (its service's `tools` entry naming the tool), 0 when it has none. */
export function toolPrice(target: Service | undefined, call: McpCall | undefined): number {
  if (!isMcp(target) || call?.method !== 'tools/call' || call.name === undefined) return 0;
  return target!.tools?.find((t) => t.name === call.name)?.costUsd ?? 0;
}

function tool(c: Readonly<EgressContext>): V {
  const { target, facts: f } = c;
  if (!isMcp(target)) return f.mcp || f.mcpError ? refuse(403, 'registry', `${c.service} is not an MCP tool service (protocol mcp)`) : skip();
  const service = target!.name;
  if (f.mcpError) return refuse(403, 'inline', `MCP message refused: ${f.mcpError}`);
  const call = f.mcp;
  if (!call) return refuse(403, 'inline', `${service} is an MCP service: a check must carry the message (the body, or Mcp-Method and Mcp-Name)`);
  const cls = methodClass(call.method);
  if (cls === 'unknown') return refuse(403, 'inline', `unknown MCP method ${JSON.stringify(call.method)}`);
  if (cls === 'pass') return pass({ toolReason: `${call.method} passes for an agent that may reach ${service}` });
  const name = call.name;
  if (!name)
    return refuse(403, 'inline', `${call.method} names no ${call.method === 'tools/call' ? 'tool' : call.method === 'prompts/get' ? 'prompt' : 'resource'}`);
  const actor = c.actor!;
  const entry = allowEntry(actor, service, name);
  // Bounded metric labels: a tool the allowlist names exactly has its own; any other is `<service>/*`.
  const toolLabel = entry === named(service, name) ? entry : `${service}/*`;
  if (!entry) return refuse(403, 'inline', `${named(service, name)} is not in ${actor.name}.allowTools`, { adds: { toolLabel } });
  const allowed = `${named(service, name)} allowed by ${actor.name}.allowTools ${entry}`;
  if (call.method !== 'tools/call') return pass({ toolLabel, toolReason: allowed });
  return toolRules(c, call, actor, target!, name, toolLabel, allowed);
}

/** A tools/call the allowlist admits: the agent's rules covering the tool, in order. */
function toolRules(c: Readonly<EgressContext>, call: McpCall, actor: Service, target: Service, name: string, toolLabel: string, allowed: string): V {
  const service = target.name;
  const rules = (actor.toolRules ?? []).filter((r) => covers(r.tool, service, name));
  if (call.args === undefined && rules.some((r) => r.when !== undefined || r.approval))
    return refuse(403, 'inline', `the check carries no arguments (no body) and ${named(service, name)} has rules on them`, { adds: { toolLabel } });
  const ctx = { args: call.args ?? {}, agent: actor.name, task: c.task ?? '', onBehalfOf: c.facts.onBehalfOf?.trim() ?? '' };
  for (const r of rules) {
    if (r.when === undefined) continue;
    const held = whenHolds(r.when, ctx);
    const why = held.error ? `cannot be evaluated (${held.error})` : 'is false';
    if (!held.ok) return refuse(403, 'inline', `tool rule ${r.tool}: when ${JSON.stringify(r.when)} ${why}`, { adds: { toolLabel } });
  }
  const needs = rules.find((r) => r.approval === 'required');
  return pass({
    toolLabel,
    toolReason: `${allowed}${rules.some((r) => r.when) ? ' and its tool rules' : ''}`,
    regulatedTool: rules.some((r) => r.dataClass === 'regulated'),
    ...(needs ? { toolHold: holdOf(c, call, target, name, needs) } : {}),
  });
}

/** What the approval queue shows: the tool, the digest of its arguments (the approval is bound to it), and the arguments. */
function holdOf(c: Readonly<EgressContext>, call: McpCall, target: Service, name: string, r: ToolRule): HoldRequest {
  return {
    actor: c.actorName,
    actorDid: c.agentDid,
    target: target.upstream,
    service: target.name,
    action: 'tools/call',
    resource: `${named(target.name, name)} sha256:${call.digest ?? ''}`,
    reason: `tool rule ${r.tool} requires a human's approval; arguments ${canonicalJson(call.args ?? {})}`,
  };
}

/** `approval: required`: the call waits for a human (the gateway holds it in the approval queue). */
function toolApproval(c: Readonly<EgressContext>, a: Answers): V {
  const request = c.toolHold;
  if (!request) return skip();
  const h = a.hold;
  if (!h) return ask({ kind: 'hold', request });
  const ref = h.id ? `approval request ${h.id}` : 'approval request';
  if (h.result === 'pending')
    return refuse(401, 'delegation', `needs approval: ${request.reason} (would be held for a human)`, { extra: { needsApproval: true } });
  if (h.result === 'denied') return refuse(403, 'delegation', `${ref} denied${h.detail ? `: ${h.detail}` : ''}`);
  if (h.result === 'expired') return refuse(403, 'delegation', `${ref} expired${h.detail ? `: ${h.detail}` : ''}`);
  if (h.result === 'unavailable') return refuse(403, 'delegation', `needs approval and the approval queue is unavailable: ${h.detail}`);
  return pass({ rule: 'delegation', reason: `${c.reason}; ${ref} approved${h.detail ? ` by ${h.detail}` : ''}` });
}

export const toolLayer: PolicyLayer<EgressContext> = { name: 'tool', decide: tool, why: (c) => c.toolReason ?? '' };
export const toolApprovalLayer: PolicyLayer<EgressContext> = { name: 'approval', decide: toolApproval, why: (c) => c.reason };
