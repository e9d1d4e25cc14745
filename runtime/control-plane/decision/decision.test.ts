/**
 * Table tests of the decision (SPEC 4.1 and the choices in ../README.md). The pure `evaluate`
 * is tested with plain answers; the rows further down run the whole gather -> evaluate -> commit
 * through `authorize` with ports that are answer tables (a VP token -> its verification, a
 * token -> its claims), the in-memory budget meter and an injected clock.
 */
import { describe, expect, it } from 'vitest';
import { H } from '../../lib/brand.js';
import type { DelegationAnswer, IdentityPort, PresentationAnswer } from '../identity-port.js';
import type { AuditEntry, Service } from '../types.js';
import { createBudgetMeter, HOUR_MS, type BudgetMeter } from '../budget.js';
import { authorize } from './engine.js';
import { factsFromHeaders, proxyFacts } from './facts.js';
import { bearerToken, hasScopes, isVpJwt } from './credentials.js';
import { engineOf } from './testkit.js';
import { type DecisionSettings, type EgressFacts, type Evaluation, type IngressFacts, type OidcPort, type OpaPort } from './types.js';

const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
const NOT_AFTER = Math.floor(T0 / 1000) + 3600;

const SERVICES: Service[] = [
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
const VPS: Record<string, PresentationAnswer> = {
  'vp-bot': { ok: true, agentName: 'bot', agentDid: 'did:key:zBot', reason: 'ok' },
  'vp-helper': { ok: true, agentName: 'helper', agentDid: 'did:key:zHelper', reason: 'ok' },
  'vp-revoked': { ok: false, reason: 'membership VC revoked' },
};

type DelegationMode = 'ok' | 'no' | 'error' | 'hang' | 'expired' | 'down';
const DELEGATIONS: Record<Exclude<DelegationMode, 'error' | 'hang'>, DelegationAnswer> = {
  ok: { ok: true, reason: 'ok', delegationId: 'del-1', vcJti: 'jti-1', notAfter: NOT_AFTER },
  no: { ok: false, reason: 'no approved delegation' },
  expired: { ok: true, reason: 'ok', vcJti: 'jti-1', notAfter: Math.floor(T0 / 1000) - 1 },
  down: { ok: false, unavailable: true, reason: 'identity authority unreachable: connect ECONNREFUSED' },
};

function identityFake(mode: DelegationMode = 'ok', seen: unknown[] = []): IdentityPort {
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
const oidcFake: OidcPort = {
  async verify(token) {
    const c = CLAIMS[token];
    return c ? { ok: true, subject: String(c.sub), claims: c } : { ok: false, reason: 'bad signature' };
  },
};

const opa = (allow: boolean | 'throw'): OpaPort => ({
  async evaluate() {
    if (allow === 'throw') throw new Error('boom');
    return { allow, reason: allow ? 'policy allowed' : 'policy denied' };
  },
});

interface Over {
  identity?: IdentityPort;
  oidc?: OidcPort;
  opa?: OpaPort;
  identityMode?: DecisionSettings['identityMode'];
  services?: Service[];
  budget?: BudgetMeter;
  now?: () => number;
}

/** Gather, evaluate and commit one decision against an engine built from `over`. */
async function run(facts: IngressFacts | EgressFacts, over: Over = {}): Promise<Evaluation> {
  const e = engineOf(over.services ?? SERVICES, {
    identity: over.identity,
    oidc: over.oidc,
    opa: over.opa,
    settings: over.identityMode ? { identityMode: over.identityMode } : {},
    now: over.now ?? (() => T0),
    budget: over.budget,
  });
  return authorize(e, facts);
}

interface Expect {
  status: 200 | 401 | 403;
  rule: string;
  reason?: RegExp;
  headers?: Record<string, string | undefined>;
  action?: string;
  audit?: Partial<AuditEntry>;
  label?: string;
}

function check(out: Evaluation, e: Expect) {
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

// ---------------------------------------------------------------- ingress

interface IngressRow {
  name: string;
  facts: Omit<IngressFacts, 'kind'>;
  deps?: Over;
  expect: Expect;
}

const OIDC = { oidc: oidcFake };
const ingressRows: IngressRow[] = [
  {
    name: 'public service, no credentials -> 200',
    facts: { service: 'web' },
    expect: {
      status: 200,
      rule: 'inline',
      headers: { [H.subject]: 'anonymous', [H.upstream]: 'web.default.svc:80' },
      action: 'authz',
      audit: { service: 'web', subject: 'anonymous' },
      label: 'web',
    },
  },
  { name: 'public service, OIDC on, no credentials -> 200', facts: { service: 'web' }, deps: OIDC, expect: { status: 200, rule: 'inline' } },
  {
    name: 'public service, OIDC on, invalid token -> 401',
    facts: { service: 'web', authorization: 'Bearer forged' },
    deps: OIDC,
    expect: { status: 401, rule: 'identity', reason: /invalid credential/ },
  },
  {
    name: 'private service, no credentials, OIDC off -> 403',
    facts: { service: 'orders' },
    expect: { status: 403, rule: 'inline', reason: /needs credentials/ },
  },
  { name: 'private service, no credentials, OIDC on -> 401', facts: { service: 'orders' }, deps: OIDC, expect: { status: 401, rule: 'identity' } },
  {
    name: 'private service, bad token, OIDC on -> 401',
    facts: { service: 'orders', authorization: 'Bearer nope' },
    deps: OIDC,
    expect: { status: 401, rule: 'identity' },
  },
  {
    name: 'private service, non-bearer credential, OIDC on -> 401',
    facts: { service: 'orders', authorization: 'Basic dTpw' },
    deps: OIDC,
    expect: { status: 401, rule: 'identity', reason: /not a bearer/ },
  },
  {
    name: 'private service, valid token, OIDC on -> 200 with subject',
    facts: { service: 'orders', authorization: 'Bearer tok-plain' },
    deps: OIDC,
    expect: { status: 200, rule: 'inline', headers: { [H.subject]: 'alice', [H.upstream]: 'orders.default.svc:8080' }, audit: { subject: 'alice' } },
  },
  {
    name: 'private service, any bearer, OIDC off -> 200 anonymous',
    facts: { service: 'orders', authorization: 'Bearer whatever' },
    expect: { status: 200, rule: 'inline', headers: { [H.subject]: 'anonymous' } },
  },
  {
    name: 'private service, Basic credential, OIDC off -> 403',
    facts: { service: 'orders', authorization: 'Basic dTpw' },
    expect: { status: 403, rule: 'inline' },
  },
  {
    name: 'requireScope, OIDC off -> 403 fail closed',
    facts: { service: 'payroll', authorization: 'Bearer x' },
    expect: { status: 403, rule: 'inline', reason: /cannot be verified/ },
  },
  {
    name: 'requireScope missing from token -> 403',
    facts: { service: 'payroll', authorization: 'Bearer tok-plain' },
    deps: OIDC,
    expect: { status: 403, rule: 'inline', reason: /missing required scope/ },
  },
  {
    name: 'requireScope in `scope` -> 200',
    facts: { service: 'payroll', authorization: 'Bearer tok-scope' },
    deps: OIDC,
    expect: { status: 200, rule: 'inline', headers: { [H.subject]: 'bob' } },
  },
  {
    name: 'requireScope in `scp` string -> 200',
    facts: { service: 'payroll', authorization: 'Bearer tok-scp-str' },
    deps: OIDC,
    expect: { status: 200, rule: 'inline' },
  },
  {
    name: 'requireScope in `scp` array -> 200',
    facts: { service: 'payroll', authorization: 'Bearer tok-scp-arr' },
    deps: OIDC,
    expect: { status: 200, rule: 'inline' },
  },
  {
    name: 'unknown service -> 403 registry',
    facts: { service: 'nope' },
    expect: { status: 403, rule: 'registry', reason: /unknown service "nope"/, label: 'unknown', audit: { service: 'nope' } },
  },
  { name: 'no service and no host -> 403 registry', facts: {}, expect: { status: 403, rule: 'registry' } },
  {
    name: 'bad token beats unknown service (identity first) -> 401',
    facts: { service: 'nope', authorization: 'Bearer forged' },
    deps: OIDC,
    expect: { status: 401, rule: 'identity' },
  },
  { name: 'host matches a registry name', facts: { host: 'web' }, expect: { status: 200, rule: 'inline', audit: { service: 'web' } } },
  { name: 'host:port matches a registry name', facts: { host: 'web:8080' }, expect: { status: 200, rule: 'inline' } },
  { name: 'host matches an upstream host:port', facts: { host: 'web.default.svc:80' }, expect: { status: 200, rule: 'inline', audit: { service: 'web' } } },
  { name: 'host without port matches one upstream host', facts: { host: 'WEB.default.svc' }, expect: { status: 200, rule: 'inline' } },
  { name: 'unknown host -> 403 registry', facts: { host: 'evil.example:443' }, expect: { status: 403, rule: 'registry', reason: /evil/ } },
  { name: 'X-Writ-Service wins over host', facts: { service: 'orders', host: 'web' }, expect: { status: 403, rule: 'inline' } },
  { name: 'OPA allows', facts: { service: 'web' }, deps: { opa: opa(true) }, expect: { status: 200, rule: 'inline' } },
  { name: 'OPA vetoes -> 403 opa', facts: { service: 'web' }, deps: { opa: opa(false) }, expect: { status: 403, rule: 'opa', reason: /policy denied/ } },
  {
    name: 'OPA throws -> 403 opa (fail closed)',
    facts: { service: 'web' },
    deps: { opa: opa('throw') },
    expect: { status: 403, rule: 'opa', reason: /decision error: OPA failed: boom/ },
  },
  { name: 'OPA not consulted when inline denies', facts: { service: 'orders' }, deps: { opa: opa(true) }, expect: { status: 403, rule: 'inline' } },
  {
    name: 'OIDC subject that is not a header value -> 401, never an allow without X-Writ-Subject',
    facts: { service: 'orders', authorization: 'Bearer tok-crlf' },
    deps: OIDC,
    expect: { status: 401, rule: 'identity', reason: /not a valid header value/ },
  },
];

describe('ingress (SPEC 4.1)', () => {
  it.each(ingressRows)('$name', async (row) => {
    check(await run({ kind: 'ingress', ...row.facts }, row.deps), row.expect);
  });

  it('OPA sees the facts, not the credential', async () => {
    let input: Record<string, unknown> = {};
    await run(
      { kind: 'ingress', service: 'orders', authorization: 'Bearer tok-plain', method: 'GET', requestPath: '/x' },
      { oidc: oidcFake, opa: { evaluate: async (i) => ((input = i), { allow: true, reason: '' }) } },
    );
    expect(input).toMatchObject({ path: 'ingress', service: 'orders', subject: 'alice', method: 'GET', requestPath: '/x' });
    expect(JSON.stringify(input)).not.toContain('tok-plain');
  });
});

// ---------------------------------------------------------------- egress

interface EgressRow {
  name: string;
  facts: Partial<EgressFacts>;
  deps?: Over;
  expect: Expect;
}

const ID = { identity: identityFake() };
const base: EgressFacts = {
  kind: 'egress',
  via: 'authz',
  actor: 'bot',
  onBehalfOf: 'alice@example.com',
  task: 't-1',
  target: 'search',
  action: 'search:query',
  resource: 'index/a',
};
const fakeVpJwt = (claims: Record<string, unknown>) =>
  `${Buffer.from('{"alg":"EdDSA"}').toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.c2ln`;
const egressRows: EgressRow[] = [
  {
    name: 'tool in allowTools -> 200, audit tool.read',
    facts: {},
    expect: {
      status: 200,
      rule: 'inline',
      action: 'tool.read',
      headers: { [H.subject]: 'alice@example.com', [H.upstream]: 'search.tools.svc:8080', [H.actor]: 'bot', [H.agentDid]: undefined },
      audit: { actor: 'bot', subject: 'alice@example.com', task: 't-1', service: 'search' },
      label: 'search',
    },
  },
  { name: 'model in allowModels -> 200, audit model.invoke', facts: { target: 'gpt' }, expect: { status: 200, rule: 'inline', action: 'model.invoke' } },
  { name: 'agent in allowAgents -> 200, audit agent.invoke', facts: { target: 'helper' }, expect: { status: 200, rule: 'inline', action: 'agent.invoke' } },
  { name: 'service in egressAllow -> 200, audit egress', facts: { target: 'orders' }, expect: { status: 200, rule: 'inline', action: 'egress' } },
  {
    name: 'tool not in allowTools -> 403 inline',
    facts: { target: 'notes' },
    expect: { status: 403, rule: 'inline', reason: /notes is not in bot.allowTools/, action: 'tool.read' },
  },
  {
    name: 'model not in allowModels -> 403 inline',
    facts: { actor: 'helper', target: 'gpt' },
    expect: { status: 403, rule: 'inline', reason: /allowModels/, action: 'model.invoke' },
  },
  {
    name: 'agent not in allowAgents -> 403 inline',
    facts: { actor: 'helper', target: 'bot' },
    expect: { status: 403, rule: 'inline', reason: /allowAgents/, action: 'agent.invoke' },
  },
  {
    name: 'service not in egressAllow -> 403 inline',
    facts: { target: 'web' },
    expect: { status: 403, rule: 'inline', reason: /egressAllow/, action: 'egress' },
  },
  {
    name: 'header kind used when registry kind is empty',
    facts: { target: 'kindless', targetKind: 'tool' },
    expect: { status: 403, rule: 'inline', reason: /allowTools/, action: 'tool.read' },
  },
  {
    name: 'header kind contradicting the registry -> 403 registry',
    facts: { target: 'gpt', targetKind: 'tool' },
    expect: { status: 403, rule: 'registry', reason: /kind mismatch/ },
  },
  {
    name: 'no X-Writ-On-Behalf-Of: subject is the actor',
    facts: { onBehalfOf: undefined },
    expect: { status: 200, rule: 'inline', headers: { [H.subject]: 'bot' } },
  },
  { name: 'unknown actor -> 403 registry', facts: { actor: 'ghost' }, expect: { status: 403, rule: 'registry', reason: /unknown agent "ghost"/ } },
  { name: 'actor that is not an agent -> 403 registry', facts: { actor: 'orders' }, expect: { status: 403, rule: 'registry', reason: /unknown agent/ } },
  { name: 'empty actor -> 403 identity', facts: { actor: ' ' }, expect: { status: 403, rule: 'identity' } },
  {
    name: 'unknown target -> 403 registry',
    facts: { target: 'nowhere' },
    expect: { status: 403, rule: 'registry', reason: /unknown target "nowhere"/, label: 'unknown', action: 'egress' },
  },
  { name: 'no target -> 403 registry', facts: { target: undefined }, expect: { status: 403, rule: 'registry', reason: /no target/ } },
  // header identity mode
  {
    name: 'header mode: valid VP stamps the DID',
    facts: { vp: 'vp-bot' },
    deps: ID,
    expect: { status: 200, rule: 'inline', headers: { [H.agentDid]: 'did:key:zBot', [H.actor]: 'bot' } },
  },
  {
    name: 'header mode: invalid VP present -> 403 identity',
    facts: { vp: 'garbage' },
    deps: ID,
    expect: { status: 403, rule: 'identity', reason: /invalid agent VP/ },
  },
  {
    name: 'header mode: VP of another agent -> 403 identity',
    facts: { vp: 'vp-helper' },
    deps: ID,
    expect: { status: 403, rule: 'identity', reason: /not "bot"/ },
  },
  {
    name: 'header mode: VP present, no identity authority -> 403 identity',
    facts: { vp: 'vp-bot' },
    expect: { status: 403, rule: 'identity', reason: /no identity authority/ },
  },
  { name: 'header mode: opaque bearer token is not a VP', facts: { authorization: 'Bearer opaque-token' }, expect: { status: 200, rule: 'inline' } },
  // vc identity mode
  {
    name: 'vc mode: no identity authority denies everything',
    facts: { vp: 'vp-bot' },
    deps: { identityMode: 'vc' },
    expect: { status: 403, rule: 'identity', reason: /vc identity mode needs/ },
  },
  {
    name: 'vc mode: missing VP -> 403 identity',
    facts: {},
    deps: { identityMode: 'vc', ...ID },
    expect: { status: 403, rule: 'identity', reason: /VP required/ },
  },
  {
    name: 'vc mode: opaque bearer does not satisfy the VP requirement',
    facts: { authorization: 'Bearer opaque' },
    deps: { identityMode: 'vc', ...ID },
    expect: { status: 403, rule: 'identity' },
  },
  {
    name: 'vc mode: revoked VP -> 403 identity',
    facts: { vp: 'vp-revoked' },
    deps: { identityMode: 'vc', ...ID },
    expect: { status: 403, rule: 'identity', reason: /revoked/ },
  },
  {
    name: 'vc mode: actor mismatch -> 403 identity',
    facts: { vp: 'vp-helper' },
    deps: { identityMode: 'vc', ...ID },
    expect: { status: 403, rule: 'identity', reason: /helper/ },
  },
  {
    name: 'vc mode: valid VP -> 200 with DID',
    facts: { vp: 'vp-bot' },
    deps: { identityMode: 'vc', ...ID },
    expect: { status: 200, rule: 'inline', headers: { [H.agentDid]: 'did:key:zBot', [H.actor]: 'bot' } },
  },
  {
    name: 'vc mode: identity checked before registry (unknown target still 403 identity)',
    facts: { target: 'nowhere' },
    deps: { identityMode: 'vc', ...ID },
    expect: { status: 403, rule: 'identity' },
  },
  {
    name: 'vc mode: VP-shaped bearer agent token is verified as the VP',
    facts: { authorization: `Bearer ${fakeVpJwt({ vp: {} })}` },
    deps: { identityMode: 'vc', identity: { ...identityFake(), verifyPresentation: async () => VPS['vp-bot']! } },
    expect: { status: 200, rule: 'inline', headers: { [H.agentDid]: 'did:key:zBot' } },
  },
  {
    name: 'VP verification hanging -> 403 identity (timeout)',
    facts: { vp: 'vp-bot' },
    deps: { identity: { ...identityFake(), verifyPresentation: () => new Promise(() => {}) } },
    expect: { status: 403, rule: 'identity', reason: /timed out/ },
  },
  // regulated targets
  {
    name: 'regulated, no identity authority -> 403 delegation (fail closed)',
    facts: { target: 'ledger' },
    expect: { status: 403, rule: 'delegation', reason: /fail closed/, action: 'tool.read' },
  },
  {
    name: 'regulated, delegation ok -> 200 rule delegation',
    facts: { target: 'ledger' },
    deps: ID,
    expect: { status: 200, rule: 'delegation', audit: { delegationId: 'del-1', delegationExp: NOT_AFTER, action: 'tool.read' } },
  },
  {
    name: 'regulated, no delegation -> 401 needs approval',
    facts: { target: 'ledger' },
    deps: { identity: identityFake('no') },
    expect: { status: 401, rule: 'delegation', reason: /needs approval: no approved delegation/, headers: { [H.needsApproval]: 'true' } },
  },
  {
    name: 'regulated, expired delegation -> 401 needs approval',
    facts: { target: 'ledger' },
    deps: { identity: identityFake('expired') },
    expect: { status: 401, rule: 'delegation', reason: /expired/, headers: { [H.needsApproval]: 'true' } },
  },
  {
    name: 'regulated, delegation check error -> 403 delegation',
    facts: { target: 'ledger' },
    deps: { identity: identityFake('error') },
    expect: { status: 403, rule: 'delegation', reason: /connection refused/ },
  },
  {
    name: 'regulated, delegation check hangs -> 403 delegation',
    facts: { target: 'ledger' },
    deps: { identity: identityFake('hang') },
    expect: { status: 403, rule: 'delegation', reason: /timed out/ },
  },
  {
    name: 'regulated, no task -> 403 delegation',
    facts: { target: 'ledger', task: undefined },
    deps: ID,
    expect: { status: 403, rule: 'delegation', reason: /needs task/ },
  },
  { name: 'regulated, allowlist still applies first', facts: { actor: 'helper', target: 'ledger' }, deps: ID, expect: { status: 403, rule: 'inline' } },
  // OPA veto
  { name: 'OPA allows -> 200', facts: {}, deps: { opa: opa(true) }, expect: { status: 200, rule: 'inline' } },
  { name: 'OPA vetoes -> 403 opa', facts: {}, deps: { opa: opa(false) }, expect: { status: 403, rule: 'opa', reason: /opa: policy denied/ } },
  { name: 'OPA throws -> 403 opa', facts: {}, deps: { opa: opa('throw') }, expect: { status: 403, rule: 'opa' } },
  {
    name: 'OPA vetoes a delegated call -> 403 opa, no delegation on the audit row',
    facts: { target: 'ledger' },
    deps: { ...ID, opa: opa(false) },
    expect: { status: 403, rule: 'opa', audit: { delegationId: undefined } },
  },
  // proxy reuse
  {
    name: 'regulated, identity authority down -> 403 (an outage is not an approval question)',
    facts: { target: 'ledger' },
    deps: { identity: identityFake('down') },
    expect: { status: 403, rule: 'delegation', reason: /unreachable/ },
  },
  {
    name: 'ingress-style header injection in on-behalf-of -> 403 identity',
    facts: { onBehalfOf: 'a\r\nb' },
    expect: { status: 403, rule: 'identity', reason: /header value/ },
  },
  {
    name: 'two on-behalf-of headers (joined "a, b") -> 403 identity, on an unregulated target too',
    facts: { onBehalfOf: 'alice@example.com, mallory@example.com' },
    expect: { status: 403, rule: 'identity', reason: /more than one .*on-behalf-of/i },
  },
  {
    name: 'a scoping header sent twice (resource "index/a, secret/b") -> 403 inline, before the delegation is asked',
    facts: { target: 'ledger', resource: 'index/a, secret/b', repeated: H.resource },
    deps: ID,
    expect: { status: 403, rule: 'inline', reason: /x-writ-resource sent more than once/ },
  },
];

describe('egress (SPEC 4.1)', () => {
  it.each(egressRows)('$name', async (row) => {
    check(await run({ ...base, ...row.facts }, row.deps), row.expect);
  });

  it('asks for the delegation with actor, task, action, resource and the VP with the default audience', async () => {
    const seen: unknown[] = [];
    await run({ ...base, target: 'ledger', vp: 'vp-bot' }, { identity: identityFake('ok', seen) });
    expect(seen).toEqual([
      { vp: 'vp-bot', audience: 'writ-egress' },
      { actor: 'bot', task: 't-1', action: 'search:query', resource: 'index/a' },
    ]);
  });

  it('checks the delegation on every regulated call (no caching)', async () => {
    const seen: unknown[] = [];
    for (let i = 0; i < 3; i++) expect((await run({ ...base, target: 'ledger' }, { identity: identityFake('ok', seen) })).decision.status).toBe(200);
    expect(seen).toHaveLength(3);
  });
});

describe('budgets in the egress decision', () => {
  const withBudget = (budget: Service['budget']) => SERVICES.map((s) => (s.name === 'bot' ? { ...s, budget } : s));

  it('calls per hour: each allowed decision counts, denied ones do not, the window slides', async () => {
    let now = T0;
    const budget = createBudgetMeter();
    const d = { services: withBudget({ callsPerHour: 2 }), budget, now: () => now };
    expect((await run({ ...base, target: 'notes' }, d)).decision.status).toBe(403); // not allowlisted: not counted
    expect((await run(base, d)).decision.status).toBe(200);
    expect((await run(base, d)).decision.status).toBe(200);
    const over = await run(base, d);
    check(over, { status: 403, rule: 'inline', reason: /call budget exceeded: 2 of 2 calls per hour/ });
    now = T0 + HOUR_MS - 1;
    expect((await run(base, d)).decision.status).toBe(403);
    now = T0 + HOUR_MS + HOUR_MS / 60 + 1;
    expect((await run(base, d)).decision.status).toBe(200);
  });

  it('a call denied by a later layer (OPA) is not counted', async () => {
    const budget = createBudgetMeter();
    const d = { services: withBudget({ callsPerHour: 1 }), budget };
    expect((await run(base, { ...d, opa: opa(false) })).decision.status).toBe(403);
    expect(budget.usage('bot', T0).callsLastHour).toBe(0);
    expect((await run(base, d)).decision.status).toBe(200);
    expect(budget.usage('bot', T0).callsLastHour).toBe(1);
  });

  it('tokens per hour from usage reports, with expiry', async () => {
    let now = T0;
    const budget = createBudgetMeter();
    const d = { services: withBudget({ tokensPerHour: 1000 }), budget, now: () => now };
    budget.recordUsage('bot', 999, 0, now);
    expect((await run(base, d)).decision.status).toBe(200);
    budget.recordUsage('bot', 1, 0, now);
    check(await run(base, d), { status: 403, rule: 'inline', reason: /token budget exceeded: 1000 of 1000/ });
    now += HOUR_MS + 2 * 60_000;
    expect((await run(base, d)).decision.status).toBe(200);
  });

  it('USD per day from usage reports, with expiry', async () => {
    let now = T0;
    const budget = createBudgetMeter();
    const d = { services: withBudget({ costUsdPerDay: 2.5 }), budget, now: () => now };
    budget.recordUsage('bot', 10, 2.5, now);
    check(await run(base, d), { status: 403, rule: 'inline', reason: /cost budget exceeded: 2.5 of 2.5 USD per day/ });
    now += 23 * HOUR_MS;
    expect((await run(base, d)).decision.status).toBe(403);
    now = T0 + 24 * HOUR_MS + 16 * 60_000;
    expect((await run(base, d)).decision.status).toBe(200);
  });

  it('zero ceilings are no limit', async () => {
    const budget = createBudgetMeter();
    budget.recordUsage('bot', 1e9, 1e9, T0);
    const d = { services: withBudget({ tokensPerHour: 0, callsPerHour: 0, costUsdPerDay: 0 }), budget };
    expect((await run(base, d)).decision.status).toBe(200);
  });

  it('budget is checked after the allowlist', async () => {
    const budget = createBudgetMeter();
    budget.recordUsage('bot', 5000, 0, T0);
    const d = { services: withBudget({ tokensPerHour: 10 }), budget };
    expect((await run({ ...base, target: 'notes' }, d)).decision.reason).toMatch(/allowTools/);
  });
});

describe('commit: audit then metrics', () => {
  it('appends the audit row and observes the decision', async () => {
    const observed: unknown[] = [];
    const e = engineOf(SERVICES, { now: () => T0 });
    const withMeter = { ...e, sinks: { ...e.sinks, meter: { observeDecision: (...a: unknown[]) => observed.push(a.slice(0, 3)) } } };
    await authorize(withMeter, { kind: 'ingress', service: 'web' });
    await authorize(withMeter, { ...base, target: 'nowhere' });
    expect(e.audit.map((r) => [r.action, r.allow])).toEqual([
      ['authz', true],
      ['egress', false],
    ]);
    expect(observed).toEqual([
      ['web', true, 'inline'],
      ['unknown', false, 'registry'],
    ]);
  });

  it('an audit failure turns an allow into a deny', async () => {
    const e = engineOf(SERVICES);
    const failing = {
      ...e,
      sinks: {
        ...e.sinks,
        audit: {
          append: () => {
            throw new Error('disk full');
          },
        },
      },
    };
    const out = await authorize(failing, { kind: 'ingress', service: 'web' });
    expect(out.decision).toMatchObject({ allow: false, status: 403 });
    expect(out.decision.reason).toMatch(/audit unavailable: disk full/);
    expect(out.decision.headers).toEqual({});
  });
});

describe('facts and credentials', () => {
  it('X-Writ-Actor selects egress, everything else is ingress', () => {
    const e = factsFromHeaders({ [H.actor]: 'bot', [H.service]: 'gpt', [H.targetKind]: 'model', authorization: 'Bearer x', host: 'h' });
    expect(e).toMatchObject({ kind: 'egress', actor: 'bot', target: 'gpt', targetKind: 'model', authorization: 'Bearer x', via: 'authz' });
    const trusted = factsFromHeaders({ host: 'web:80', 'x-forwarded-host': 'orders' }, { method: 'GET', path: '/a', trustedPeer: true });
    expect(trusted).toEqual({ kind: 'ingress', service: undefined, host: 'orders', authorization: undefined, method: 'GET', requestPath: '/a' });
    // From anyone else a forwarded host is ignored: it cannot pick the target.
    expect(factsFromHeaders({ host: 'orders', 'x-forwarded-host': 'web' })).toMatchObject({ kind: 'ingress', host: 'orders' });
    expect(factsFromHeaders({ [H.actor]: '' }).kind).toBe('egress');
  });

  it('a repeated scoping header is told from a value with a comma by the raw header lines', () => {
    const joined = { [H.actor]: 'bot', [H.task]: 't-1', [H.resource]: 'index/a, secret/b' };
    const twice = ['X-Writ-Actor', 'bot', 'X-Writ-Task', 't-1', 'X-Writ-Resource', 'index/a', 'x-writ-resource', 'secret/b'];
    expect(factsFromHeaders(joined, { rawHeaders: twice })).toMatchObject({ kind: 'egress', repeated: H.resource });
    const once = ['X-Writ-Actor', 'bot', 'X-Writ-Task', 't-1', 'X-Writ-Resource', 'index/a, secret/b'];
    expect(factsFromHeaders(joined, { rawHeaders: once })).not.toHaveProperty('repeated');
    // gRPC: no raw lines, nothing to tell a repeat by.
    expect(factsFromHeaders(joined)).not.toHaveProperty('repeated');
    expect(
      proxyFacts({ [H.task]: 'a, b' }, { host: 'h', port: 80, hostPort: 'h:80', connect: false }, 'GET', 'http://h/', ['X-Writ-Task', 'a', 'X-Writ-Task', 'b']),
    ).toMatchObject({
      repeated: H.task,
    });
  });

  it('bearer parsing, VP shape and scopes', () => {
    expect(bearerToken('Bearer abc')).toBe('abc');
    expect(bearerToken('bearer  abc ')).toBe('abc');
    expect(bearerToken('Basic abc')).toBeUndefined();
    expect(bearerToken('Bearer a b')).toBeUndefined();
    expect(isVpJwt(fakeVpJwt({ vp: {} }))).toBe(true);
    expect(isVpJwt(fakeVpJwt({ sub: 'x' }))).toBe(false);
    expect(isVpJwt('a.b')).toBe(false);
    expect(hasScopes({ scope: 'a b' }, 'b a')).toBe(true);
    expect(hasScopes({ scp: ['a'] }, 'a b')).toBe(false);
    expect(hasScopes({}, '')).toBe(true);
    expect(hasScopes({}, 'a')).toBe(false);
  });
});
