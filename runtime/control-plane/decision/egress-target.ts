/**
 * The egress path's registry and allowlist layers: the actor is a registered agent, the target a
 * registered service (through the proxy, resolved from host:port, or an external host), and the
 * actor's allow list for the target's kind names it (deny by default). Pure.
 */
import type { Service } from '../types.js';
import { pass, refuse, type PolicyLayer, type Verdict } from './driver.js';
import { EXTERNAL, type EgressContext } from './egress.js';
import { isMcp, reaches } from './tool.js';
import type { ProxyHop, RegistryView } from './types.js';

type V = Verdict<EgressContext>;

/** The allow list of `actor` that governs a target of `kind` (deny by default). */
export function allowListFor(actor: Service, kind: string): { list: readonly string[]; field: string } {
  if (kind === 'model') return { list: actor.allowModels ?? [], field: 'allowModels' };
  if (kind === 'tool') return { list: actor.allowTools ?? [], field: 'allowTools' };
  if (kind === 'agent') return { list: actor.allowAgents ?? [], field: 'allowAgents' };
  // Plain services and unknown kinds: the agent's general egress list (SPEC 2.1 EgressAllow).
  return { list: actor.egressAllow ?? [], field: 'egressAllow' };
}

const allowedFor = (actor: Service, svc: Service) => allowListFor(actor, svc.kind ?? '').list.includes(svc.name);

/**
 * The registry entry a proxied host:port reaches. Several entries may share one upstream (models
 * behind one broker): the first by name the agent may reach wins, else the first by name.
 */
export function resolveUpstream(reg: RegistryView, hostPort: string, actor: Service): Service | undefined {
  const hits = reg.byUpstream(hostPort);
  return hits.find((s) => allowedFor(actor, s)) ?? hits[0];
}

/**
 * The egressAllow entry naming an external host: an exact `host:port`, or a bare `host` on the
 * scheme's default port (80 for plain HTTP, a CONNECT port for tunnels). A registry name in
 * egressAllow names that registry entry only, never a host name.
 */
export function externalAllowEntry(actor: Service, hop: ProxyHop, reg: RegistryView, connectPorts: ReadonlySet<number>): string | undefined {
  const list = actor.egressAllow ?? [];
  for (const e of list) if (e.toLowerCase() === hop.hostPort) return e;
  const defaultPort = hop.connect ? connectPorts.has(hop.port) : hop.port === 80;
  if (!defaultPort) return undefined;
  for (const e of list) if (!e.includes(':') && e.toLowerCase() === hop.host && !reg.get(e)) return e;
  return undefined;
}

function registry(c: Readonly<EgressContext>): V {
  const reg = c.snap.registry;
  const actor = reg.get(c.actorName);
  if (!actor || actor.kind !== 'agent') return refuse(403, 'registry', `unknown agent ${JSON.stringify(c.actorName)}`);
  if (c.proxy) return proxiedTarget(c, actor, c.proxy);
  const service = c.service;
  if (!service) return refuse(403, 'registry', 'no target named');
  const target = reg.get(service);
  if (!target) return refuse(403, 'registry', `unknown target ${JSON.stringify(service)}`);
  return registryTarget(c, actor, target, service);
}

/** Through the proxy: the registry entry served at host:port, else an external host (allowed here only on a listed or CONNECT port). */
function proxiedTarget(c: Readonly<EgressContext>, actor: Service, hop: ProxyHop): V {
  const connectPorts = c.snap.settings.connectPorts;
  const target = resolveUpstream(c.snap.registry, hop.hostPort, actor);
  if (target) return registryTarget(c, actor, target, target.name);
  const external = externalAllowEntry(actor, hop, c.snap.registry, connectPorts);
  const service = external ?? EXTERNAL;
  if (hop.connect && !external && !connectPorts.has(hop.port)) {
    const why = `CONNECT to port ${hop.port} is not allowed for ${hop.host} (not a registry upstream, not in egressAllow)`;
    return refuse(403, 'inline', why, { adds: { service }, at: 'inline' });
  }
  return pass({ actor, service, external });
}

/** A registry target: its kind must be the one the request names, if it names one. */
function registryTarget(c: Readonly<EgressContext>, actor: Service, target: Service, service: string): V {
  const kind = c.kind;
  if (kind && target.kind && target.kind !== kind) {
    return refuse(403, 'registry', `target kind mismatch: request says ${kind}, registry says ${target.kind}`, { adds: { target, service } });
  }
  return pass({ actor, target, service, kind: kind ?? target.kind ?? '' });
}

/** Allowlist of the target's kind (deny by default); an unlisted external host is a human's question (approval). */
function allowlist(c: Readonly<EgressContext>): V {
  // Repeated scoping headers reach here joined ("acct/1, other/2"): the call would be decided
  // on one reading and the upstream may act on another.
  if (c.facts.repeated) return refuse(403, 'inline', `${c.facts.repeated} sent more than once: the call is scoped by one value`);
  const { actor, target } = c;
  if (!target) return pass();
  const { list, field } = allowListFor(actor!, c.kind ?? '');
  // An MCP service is reached by an entry naming it whole or in part; the tool layer decides the rest.
  const listed = isMcp(target) && c.kind === 'tool' ? reaches(actor!, target.name) : list.includes(target.name);
  return listed ? pass() : refuse(403, 'inline', `${target.name} is not in ${actor!.name}.${field}`);
}

export const egressRegistry: PolicyLayer<EgressContext> = {
  name: 'registry',
  decide: registry,
  why: (c) => (c.target ? `target ${c.target.name}` : c.external ? `external ${c.proxy!.hostPort} listed as ${c.external}` : `external ${c.proxy!.hostPort}`),
};

export const allowlistLayer: PolicyLayer<EgressContext> = {
  name: 'inline',
  decide: allowlist,
  why(c) {
    const actor = c.actor!;
    if (c.target) return `${c.target.name} is in ${actor.name}.${allowListFor(actor, c.kind ?? '').field}`;
    return c.external ? `${c.external} is in ${actor.name}.egressAllow` : 'unlisted external host';
  },
};
