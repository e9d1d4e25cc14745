/**
 * Test helpers for the decision's table tests (decision-*.test.ts): a registry of plain services,
 * ports that are answer tables (a VP token -> its verification, a token -> its claims, a fixed
 * delegation answer or failure, an OPA that allows, denies or throws), `run` (the whole gather ->
 * evaluate -> commit through `authorize`, the in-memory budget meter and an injected clock),
 * `check` (the decision and its audit row against an expected row), and `liveAndExplained` with
 * `checkExplained` (the dry-run's layers against the live decision, for every row).
 */
import { expect } from 'vitest';
import { H } from '../../lib/brand.js';
import type { DelegationAnswer, IdentityPort, PresentationAnswer } from '../identity-port.js';
import type { AuditEntry, Rule, Service } from '../types.js';
import type { BudgetMeter } from '../budget/ports.js';
import { decide } from './decide.js';
import { authorize } from './engine.js';
import { engineOf } from './testkit.js';
import type { DecisionSettings, EgressFacts, Evaluation, Facts, IngressFacts, LayerName, OidcPort, OpaPort } from './types.js';

export const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
export const NOT_AFTER = Math.floor(T0 / 1000) + 3600;

export const SERVICES: Service[] = [
  { name: 'web', upstream: 'web.default.svc:80', public: true, kind: 'service' },
  { name: 'orders', upstream: 'orders.default.svc:8080' },
  { name: 'payroll', upstream: 'payroll.default.svc:8080', requireScope: 'payroll.read' },
  {
    name: 'bot',
    upstream: 'bot.agents.svc:8080',
    kind: 'agent',
    allowModels: ['gpt'],
    allowTools: ['search', 'ledger'],
    allowAgents: ['helper'],
    egressAllow: ['orders', 'api.example.com', 'files.example.com:8443'],
  },
  { name: 'helper', upstream: 'helper.agents.svc:8080', kind: 'agent' },
  { name: 'gpt', upstream: 'broker.writ.svc:8080', kind: 'model' },
  { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' },
  { name: 'notes', upstream: 'notes.tools.svc:8080', kind: 'tool' },
  { name: 'ledger', upstream: 'ledger.tools.svc:8080', kind: 'tool', dataClass: 'regulated' },
  { name: 'kindless', upstream: 'kindless.svc:80' },
];

/** VP strings and their verification: an answer table. */
export const VPS: Record<string, PresentationAnswer> = {
  'vp-bot': { ok: true, agentName: 'bot', agentDid: 'did:key:zBot', reason: 'ok' },
  'vp-helper': { ok: true, agentName: 'helper', agentDid: 'did:key:zHelper', reason: 'ok' },
  'vp-revoked': { ok: false, reason: 'membership VC revoked' },
};

export type DelegationMode = 'ok' | 'no' | 'error' | 'hang' | 'expired' | 'down';
const DELEGATIONS: Record<Exclude<DelegationMode, 'error' | 'hang'>, DelegationAnswer> = {
  ok: { ok: true, reason: 'ok', delegationId: 'del-1', vcJti: 'jti-1', notAfter: NOT_AFTER },
  no: { ok: false, reason: 'no approved delegation' },
  expired: { ok: true, reason: 'ok', vcJti: 'jti-1', notAfter: Math.floor(T0 / 1000) - 1 },
  down: { ok: false, unavailable: true, reason: 'identity authority unreachable: connect ECONNREFUSED' },
};

export function identityFake(mode: DelegationMode = 'ok', seen: unknown[] = []): IdentityPort {
  return {
    async verifyPresentation(vp, audience) {
      seen.push({ vp, audience });
      return VPS[vp] ?? { ok: false, reason: 'bad signature' };
    },
    async checkDelegation(q) {
      seen.push(q);
      if (mode === 'error') throw new Error('connection refused');
      if (mode === 'hang') return new Promise(() => {});
      return DELEGATIONS[mode];
    },
  };
}

const CLAIMS: Record<string, Record<string, unknown>> = {
  'tok-plain': { sub: 'alice' },
  'tok-scope': { sub: 'bob', scope: 'openid payroll.read' },
  'tok-scp-str': { sub: 'carol', scp: 'payroll.read other' },
  'tok-scp-arr': { sub: 'dave', scp: ['x', 'payroll.read'] },
  'tok-crlf': { sub: 'mallory\r\nX-Writ-Subject: admin' },
};
export const oidcFake: OidcPort = {
  async verify(token) {
    const c = CLAIMS[token];
    return c ? { ok: true, subject: String(c.sub), claims: c } : { ok: false, reason: 'bad signature' };
  },
};

export const opa = (allow: boolean | 'throw'): OpaPort => ({
  async evaluate() {
    if (allow === 'throw') throw new Error('boom');
    return { allow, reason: allow ? 'policy allowed' : 'policy denied' };
  },
});

export interface Over {
  identity?: IdentityPort;
  oidc?: OidcPort;
  opa?: OpaPort;
  identityMode?: DecisionSettings['identityMode'];
  services?: Service[];
  budget?: BudgetMeter;
  now?: () => number;
}

const engineFor = (over: Over) =>
  engineOf(over.services ?? SERVICES, {
    identity: over.identity,
    oidc: over.oidc,
    opa: over.opa,
    settings: over.identityMode ? { identityMode: over.identityMode } : {},
    now: over.now ?? (() => T0),
    budget: over.budget,
  });

/** Gather, evaluate and commit one decision against an engine built from `over`. */
export async function run(facts: IngressFacts | EgressFacts, over: Over = {}): Promise<Evaluation> {
  return authorize(engineFor(over), facts);
}

/** Gather and evaluate one decision twice, live and explained (the dry-run), against an engine built from `over`. */
export async function liveAndExplained(facts: IngressFacts | EgressFacts, over: Over = {}): Promise<{ live: Evaluation; explained: Evaluation }> {
  const e = engineFor(over);
  const live = await decide(facts, () => e.policy.current(), e.gather, e.now);
  const explained = await decide(facts, () => e.policy.current(), e.gather, e.now, true);
  return { live, explained };
}

/** Each path's layers in order, as the dry-run names them. */
const ORDER: Record<Facts['kind'], readonly LayerName[]> = {
  ingress: ['identity', 'registry', 'inline', 'opa'],
  egress: ['identity', 'governance', 'registry', 'token', 'inline', 'budget', 'delegation', 'approval', 'opa'],
};
/** The layers that may end an allow, and those a deny of each rule may come from. */
const ALLOWED_AT: readonly LayerName[] = ['inline', 'delegation', 'approval', 'opa'];
const DENIED_AT: Record<Rule, readonly LayerName[]> = {
  identity: ['identity', 'governance', 'token', 'inline'],
  registry: ['registry'],
  inline: ['inline', 'budget'],
  delegation: ['delegation', 'approval'],
  opa: ['opa'],
};

/**
 * The dry-run's contract: explaining changes nothing (the same decision and effects as live, and
 * a live decision records no layer), and the explained layers are in the path's order, every one
 * a pass but the last, which is the layer that decided (a deny's verdict and reason).
 */
export function checkExplained(kind: Facts['kind'], live: Evaluation, explained: Evaluation) {
  expect(explained.decision).toStrictEqual(live.decision);
  expect(explained.effects).toStrictEqual(live.effects);
  expect({ ...explained, layers: [] }).toStrictEqual(live);
  const names = explained.layers.map((l) => l.layer);
  const at = names.map((n) => ORDER[kind].indexOf(n));
  expect(
    at.every((i, k) => i >= 0 && (k === 0 || i > at[k - 1]!)),
    names.join(' '),
  ).toBe(true);
  const last = explained.layers.at(-1)!;
  for (const l of explained.layers.slice(0, -1)) expect(l.verdict).toBe('pass');
  const d = explained.decision;
  if (d.allow) {
    expect(last.verdict).toBe('pass');
    expect(ALLOWED_AT).toContain(last.layer);
  } else {
    expect(last).toMatchObject({ verdict: d.needsApproval ? 'needs-approval' : 'deny', reason: d.reason });
    expect(DENIED_AT[d.rule]).toContain(last.layer);
  }
}

export interface Expect {
  status: 200 | 401 | 403;
  rule: string;
  reason?: RegExp;
  headers?: Record<string, string | undefined>;
  action?: string;
  audit?: Partial<AuditEntry>;
  label?: string;
}

export function check(out: Evaluation, e: Expect) {
  const audit = out.effects.audit;
  expect(out.decision.status).toBe(e.status);
  expect(out.decision.allow).toBe(e.status === 200);
  expect(out.decision.rule).toBe(e.rule);
  expect(audit.allow).toBe(e.status === 200);
  expect(audit.rule).toBe(e.rule);
  expect(audit.reason).toBe(out.decision.reason);
  if (e.reason) expect(out.decision.reason).toMatch(e.reason);
  for (const [k, v] of Object.entries(e.headers ?? {})) expect(out.decision.headers[k]).toBe(v);
  if (e.status !== 200) {
    expect(out.decision.headers[H.subject]).toBeUndefined();
    expect(out.decision.headers[H.upstream]).toBeUndefined();
  }
  if (e.action) expect(audit.action).toBe(e.action);
  for (const [k, v] of Object.entries(e.audit ?? {})) {
    if (v === undefined) expect(audit).not.toHaveProperty(k);
    else expect((audit as unknown as Record<string, unknown>)[k]).toEqual(v);
  }
  if (e.label) expect(out.effects.serviceLabel).toBe(e.label);
}

/** The egress facts every egress row starts from: bot calls the search tool for alice. */
export const base: EgressFacts = {
  kind: 'egress',
  via: 'authz',
  actor: 'bot',
  onBehalfOf: 'alice@example.com',
  task: 't-1',
  target: 'search',
  action: 'search:query',
  resource: 'index/a',
};
export const fakeVpJwt = (claims: Record<string, unknown>) =>
  `${Buffer.from('{"alg":"EdDSA"}').toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.c2ln`;
