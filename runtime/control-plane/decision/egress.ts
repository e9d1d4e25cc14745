/**
 * Egress evaluation, SPEC 4.1: "may this agent make this call, on behalf of this human, for this
 * task, right now?". Pure, as layers over one context (evaluate.ts lists them): agent identity
 * (token and VP) and governance standing (egress-identity.ts), registry and allowlist
 * (egress-target.ts), the access token's audience (egress-token.ts), budget (egress-budget.ts), delegation for regulated targets and a human's
 * approval of a held proxy request (egress-delegation.ts), the optional OPA veto (veto.ts).
 * /authz and the forward proxy evaluate the same layers. This file: the context and the ends.
 */
import type { AccessTokenClaims } from '../../lib/access-token.js';
import { H } from '../../lib/brand.js';
import type { AuditAction, Decision, Rule, Service } from '../types.js';
import { allow, auditOf, UNKNOWN_LABEL } from './outcome.js';
import { vetoLayer } from './veto.js';
import { isMcp, toolPrice } from './tool.js';
import type { EgressFacts, Effects, Evaluation, HoldRequest, Layer, PolicySnapshot, ProxyHop, RegistryView } from './types.js';

export const EXTERNAL = 'external';

/** One egress evaluation: the facts, and what each layer established (the driver fills it in). */
export interface EgressContext {
  readonly facts: EgressFacts;
  readonly snap: PolicySnapshot;
  readonly now: number;
  /** Through the forward proxy, or named by an /authz caller (X-Writ-Upstream): where the request goes. */
  readonly proxy: ProxyHop | undefined;
  readonly task: string | undefined;
  /** `X-Writ-Actor`, then the agent its VP proves (identity). */
  actorName: string;
  /** The DID a verified VP or access token proves (identity). */
  agentDid: string | undefined;
  /** The verified Writ access token the call carries (identity); its audience is checked (token). */
  token: AccessTokenClaims | undefined;
  /** For whom the call is made: `X-Writ-On-Behalf-Of`, else the actor (identity). */
  subject: string;
  /** The actor's registry entry (registry). */
  actor: Service | undefined;
  /** The registry entry called (registry); none for an external host through the proxy. */
  target: Service | undefined;
  /** The audit row's service: the target's name, else the external host's egressAllow entry or `external` (registry). */
  service: string | undefined;
  /** `X-Writ-Target-Kind`, else the target's registry kind (registry). */
  kind: string | undefined;
  /** The egressAllow entry that lists an external host (registry). */
  external: string | undefined;
  /** A proxy hop's call ticket was valid: the call is counted already (budget). */
  ticketed: boolean;
  /** Budget audit mode: what enforce would have denied (budget). */
  overAudit: string;
  /** The allow's rule and reason (delegation, approval). */
  rule: Rule;
  reason: string;
  /** The approved delegation the allow rests on (delegation). */
  delegation: Evaluation['delegation'];
  /** Why a human must approve (delegation): the proxy holds the request for it (approval). */
  needsApproval: string | undefined;
  /** Counted against callsPerHour: every egress but an MCP message other than `tools/call` (tool.ts). */
  readonly counted: boolean;
  /** An MCP message (tool): why it passed, its metric label, a regulated tool, the hold a rule asks for. */
  toolReason?: string;
  toolLabel?: string;
  regulatedTool?: boolean;
  toolHold?: HoldRequest;
}

export function egressContext(f: EgressFacts, snap: PolicySnapshot, now: number): EgressContext {
  // The hop: the forward proxy's request, or the host:port an /authz caller named (X-Writ-Upstream: the egress gateway).
  const proxy = f.hop;
  return {
    facts: f,
    snap,
    now,
    proxy,
    task: f.task?.trim() || undefined,
    actorName: f.actor?.trim() ?? '',
    agentDid: undefined,
    token: undefined,
    subject: '',
    actor: undefined,
    target: undefined,
    service: proxy?.hostPort ?? f.target?.trim(),
    kind: f.targetKind?.trim().toLowerCase() || undefined,
    external: undefined,
    ticketed: false,
    overAudit: '',
    rule: 'inline',
    reason: '',
    delegation: undefined,
    needsApproval: undefined,
    counted: !f.mcp || f.mcp.method === 'tools/call',
  };
}

/** The OPA veto sees the facts and what the layers established, never a credential. */
export const egressVeto = vetoLayer<EgressContext>((c) => ({
  path: 'egress',
  via: c.facts.via,
  actor: c.actorName,
  agentDid: c.agentDid ?? '',
  onBehalfOf: c.facts.onBehalfOf ?? '',
  task: c.task ?? '',
  target: c.target?.name ?? c.proxy?.hostPort ?? '',
  targetKind: c.kind ?? '',
  dataClass: c.target?.dataClass ?? '',
  action: c.facts.action ?? '',
  resource: c.facts.resource ?? '',
  delegationId: c.delegation?.id ?? '',
}));

/** Audit action by target kind (SPEC 2.3, 6); every proxy decision is `egress.proxy`. */
export function egressAction(kind: string | undefined, via: EgressFacts['via']): AuditAction {
  if (via === 'proxy') return 'egress.proxy';
  if (kind === 'model') return 'model.invoke';
  if (kind === 'tool') return 'tool.read';
  if (kind === 'agent') return 'agent.invoke';
  return 'egress';
}

/** Some registry model is served at `upstream` (a broker): only there does a call ticket mean anything. */
const servesModel = (reg: RegistryView, upstream: string) => reg.byUpstream(upstream).some((s) => s.kind === 'model');

type Extra = Pick<Effects, 'reserveCall' | 'reserveTokens' | 'ticket'>;

/** The Evaluation of decision `d`; an allow's effects are `extra` too. */
export function egressEnd(c: Readonly<EgressContext>, d: Decision, layers: Layer[], extra?: Extra): Evaluation {
  const f = c.facts;
  const who = { subject: f.onBehalfOf?.trim() || c.actorName || undefined, actor: c.actorName || undefined, task: c.task, service: c.service };
  const effects: Effects = {
    audit: auditOf(egressAction(c.kind ?? c.target?.kind, f.via), d, who),
    serviceLabel: c.toolLabel ?? c.target?.name ?? UNKNOWN_LABEL,
  };
  if (f.mcp || f.mcpError || isMcp(c.target)) toolAudit(effects.audit, f);
  if (d.allow && extra) Object.assign(effects, extra);
  const ev: Evaluation = { decision: d, layers, effects, version: c.snap.version };
  if (c.agentDid) ev.agentDid = c.agentDid;
  return ev;
}

/** An MCP message's record (`tool.call`): what it names, the digest of its arguments (never the arguments), its session. */
function toolAudit(audit: Effects['audit'], f: EgressFacts): void {
  audit.action = 'tool.call';
  const call = f.mcp;
  if (!call) return;
  if (call.name !== undefined) audit.tool = call.name;
  if (call.digest) audit.argsDigest = call.digest;
  if (call.session) audit.session = call.session;
}

/** Every layer passed: the allow, its headers, and what it commits (the call, the broker's reservation, the proxy's ticket). */
export function egressAllowed(c: Readonly<EgressContext>, layers: Layer[]): Evaluation {
  const { facts: f, actorName, target, delegation } = c;
  const headers: Record<string, string> = { [H.subject]: c.subject, [H.upstream]: target?.upstream ?? c.proxy!.hostPort, [H.actor]: actorName };
  if (c.agentDid) headers[H.agentDid] = c.agentDid;
  // What the allow commits; built in place, never copied.
  const extra: Extra = c.ticketed || !c.counted ? {} : { reserveCall: { agent: actorName, budget: c.actor!.budget } };
  const reserve = f.reserve;
  if (reserve && !('error' in reserve)) extra.reserveTokens = { ...reserve, agent: actorName };
  // A priced tool: its price reserved against costUsdPerDay as the broker's worst case is.
  const price = extra.reserveCall ? toolPrice(target, f.mcp) : 0;
  if (price > 0) extra.reserveTokens = { agent: actorName, promptTokens: 0, outputTokens: 0, priceInputPer1k: 0, priceOutputPer1k: 0, costUsd: price };
  // A call ticket only where a next hop can present it: an upstream that also serves a model (a
  // broker asking /authz for the same agent's completion).
  if (f.via === 'proxy' && target && servesModel(c.snap.registry, target.upstream)) extra.ticket = { actor: actorName, upstream: target.upstream };
  const reason = c.toolReason ? `${c.toolReason}; ${c.reason}` : c.reason;
  const ev = egressEnd(c, allow(c.rule, c.overAudit ? `${c.overAudit}; ${reason}` : reason, headers), layers, extra);
  if (c.token) ev.token = c.token;
  if (delegation) {
    ev.delegation = delegation;
    ev.effects.audit.delegationId = delegation.id;
    if (delegation.exp !== undefined) ev.effects.audit.delegationExp = delegation.exp;
  }
  return ev;
}
