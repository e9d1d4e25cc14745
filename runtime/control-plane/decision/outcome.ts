/** Small constructors shared by the ingress and egress paths. */
import type { AuditAction, AuditEntry, Decision, Rule, Service } from '../types.js';
import type { RegistryView } from './types.js';

export const UNKNOWN_LABEL = 'unknown';
export const ANONYMOUS = 'anonymous';

export function deny(status: 401 | 403, rule: Rule, reason: string, extra: Partial<Decision> = {}): Decision {
  return { allow: false, status, reason, rule, headers: {}, ...extra };
}

export function allow(rule: Rule, reason: string, headers: Record<string, string>): Decision {
  return { allow: true, status: 200, reason, rule, headers };
}

/** The audit row of a decision: only the fields that are set, so rows stay small. */
export function auditOf(action: AuditAction, d: Decision, who: { subject?: string; actor?: string; task?: string; service?: string }): AuditEntry {
  const e: AuditEntry = { action, allow: d.allow, reason: d.reason, rule: d.rule };
  if (who.subject) e.subject = who.subject;
  if (who.actor) e.actor = who.actor;
  if (who.task) e.task = who.task;
  if (who.service) e.service = who.service;
  return e;
}

export function byUpstream(registry: RegistryView, hostPort: string): Service | undefined {
  if (registry.findByUpstream) return registry.findByUpstream(hostPort);
  return registry.list().find((s) => s.upstream.toLowerCase() === hostPort);
}

/**
 * Ingress target from the request's host (x-forwarded-host or host): a registry name equal to
 * the host name (with or without port), else a service whose upstream is that host:port, else
 * the single service whose upstream host is that host name.
 */
export function resolveHost(registry: RegistryView, rawHost: string): Service | undefined {
  const host = (rawHost.split(',')[0] ?? '').trim().toLowerCase();
  if (!host) return undefined;
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(host);
  if (!m) return undefined;
  const hostname = m[1] ?? '';
  const direct = registry.get(hostname) ?? (m[2] ? registry.get(host) : undefined);
  if (direct) return direct;
  if (m[2]) return byUpstream(registry, host);
  // No port given: accept an upstream on this host only when it is unambiguous.
  const hits = registry.list().filter((s) => s.upstream.toLowerCase().startsWith(hostname + ':'));
  return hits.length === 1 ? hits[0] : undefined;
}
