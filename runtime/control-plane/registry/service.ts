/**
 * Pure registry rules: validation of an incoming service (ServiceSchema, strict) and the stored
 * shape (SPEC 2.1): the north-south block always present, the agent-governance block
 * (kind, allow lists, egressAllow, budget, dataClass) omitted when empty.
 */
import type { ZodError } from 'zod';
import { zodDetail, type ValidationDetail } from '../../lib/errors.js';
import { ServiceSchema, type Budget, type Service } from '../types.js';

/** An upsert body that does not satisfy ServiceSchema; `issues` name the offending fields. */
export class RegistryValidationError extends Error {
  constructor(readonly issues: ValidationDetail[]) {
    super(`invalid service: ${issues.map(describe).join('; ')}`);
    this.name = 'RegistryValidationError';
  }
}

/** A write to an entry that another producer owns (apply never takes an entry over). */
export class RegistryConflictError extends Error {
  constructor(
    readonly entry: string,
    readonly owner: string,
  ) {
    super(`service ${JSON.stringify(entry)} is managed by ${JSON.stringify(owner)}`);
    this.name = 'RegistryConflictError';
  }
}

function describe(d: ValidationDetail): string {
  const path = d.loc.slice(1).join('.');
  return path ? `${path}: ${d.msg}` : d.msg;
}

/** Zero values of registeredAt that mean "let the store set it" (empty, Go's zero time). */
const ZERO_TIMES = new Set(['', '0001-01-01T00:00:00Z']);

/** Validates an upsert body; throws RegistryValidationError. Does not touch any state. */
export function parseService(input: unknown): Service {
  let body = input;
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    const o = body as Record<string, unknown>;
    if (typeof o.registeredAt === 'string' && ZERO_TIMES.has(o.registeredAt)) {
      const { registeredAt: _zero, ...rest } = o;
      body = rest;
    }
  }
  const r = ServiceSchema.safeParse(body);
  if (!r.success) throw new RegistryValidationError(zodDetail(r.error as ZodError, 'body'));
  return r.data;
}

function budgetOrUndefined(b: Budget | undefined): Budget | undefined {
  if (!b) return undefined;
  const any = (b.tokensPerHour ?? 0) > 0 || (b.callsPerHour ?? 0) > 0 || (b.costUsdPerDay ?? 0) > 0;
  if (!any) return undefined; // zero everywhere = no limit = empty block
  const out: Budget = {};
  if (b.tokensPerHour !== undefined) out.tokensPerHour = b.tokensPerHour;
  if (b.callsPerHour !== undefined) out.callsPerHour = b.callsPerHour;
  if (b.costUsdPerDay !== undefined) out.costUsdPerDay = b.costUsdPerDay;
  if (b.mode !== undefined) out.mode = b.mode;
  return out;
}

/**
 * The stored and served shape, in the spec's field order. `registeredAt` is given by the
 * caller (the store decides it). Also used to re-order documents read back from jsonb.
 */
export function storedShape(s: Service, registeredAt: string): Service {
  const out: Service = {
    name: s.name,
    upstream: s.upstream,
    owner: s.owner ?? '',
    requireScope: s.requireScope ?? '',
    public: s.public ?? false,
    registeredAt,
  };
  if (s.kind) out.kind = s.kind;
  if (s.allowModels?.length) out.allowModels = [...s.allowModels];
  if (s.allowTools?.length) out.allowTools = [...s.allowTools];
  if (s.allowAgents?.length) out.allowAgents = [...s.allowAgents];
  if (s.egressAllow?.length) out.egressAllow = [...s.egressAllow];
  const budget = budgetOrUndefined(s.budget);
  if (budget) out.budget = budget;
  if (s.dataClass) out.dataClass = s.dataClass;
  if (s.protocol) out.protocol = s.protocol;
  if (s.path !== undefined) out.path = s.path;
  if (s.oauthResource !== undefined) out.oauthResource = s.oauthResource;
  if (s.upstreamAuth) out.upstreamAuth = { ...s.upstreamAuth, ...(s.upstreamAuth.secretRef ? { secretRef: { ...s.upstreamAuth.secretRef } } : {}) };
  if (s.toolRules?.length) out.toolRules = s.toolRules.map((r) => ({ ...r }));
  if (s.tools?.length) out.tools = s.tools.map((t) => ({ name: t.name, costUsd: t.costUsd }));
  return out;
}

export function deepFreeze<T>(v: T): T {
  if (v && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v as object)) deepFreeze(x);
  }
  return v;
}
