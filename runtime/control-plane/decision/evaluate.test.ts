/**
 * The pure `evaluate(facts, snapshot, answers, now)` with plain answers: governance standings,
 * the forward proxy's target resolution and holds, call tickets, the questions it asks, and the
 * dry-run deciding exactly as the live path for each row and for a grid of fact sets.
 */
import { describe, expect, it } from 'vitest';
import { H } from '../../lib/brand.js';
import type { GovernanceStanding } from '../identity-port.js';
import type { Service } from '../types.js';
import { authorize, dryRun } from './engine.js';
import { evaluate } from './evaluate.js';
import { checkExplained } from './table-testing.js';
import { engineOf, policyOf } from './testkit.js';
import { isQuestion, type Answers, type EgressFacts, type Evaluation, type Facts, type PolicySnapshot, type Step } from './types.js';

const NOW = Date.UTC(2026, 5, 1, 9, 0, 0);
const SERVICES: Service[] = [
  {
    name: 'bot',
    upstream: 'bot.agents.svc:8080',
    kind: 'agent',
    allowModels: ['gpt', 'gpt-b'],
    allowTools: ['ledger', 'search'],
    egressAllow: ['orders', 'api.example.com', 'files.example.com:8443'],
    budget: { callsPerHour: 10 },
  },
  { name: 'gpt', upstream: 'broker.writ.svc:8080', kind: 'model' },
  { name: 'gpt-b', upstream: 'broker.writ.svc:8080', kind: 'model' },
  { name: 'orders', upstream: 'orders.svc:8080' },
  { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' },
  { name: 'ledger', upstream: 'ledger.tools.svc:8080', kind: 'tool', dataClass: 'regulated' },
];
const standing = (agents: Record<string, string>, fetchedAt = NOW): GovernanceStanding => ({ agents: new Map(Object.entries(agents)), fetchedAt });
const USAGE = { tokensLastHour: 0, callsLastHour: 0, costUsdLastDay: 0 };
const authz = (over: Partial<EgressFacts> = {}): EgressFacts => ({
  kind: 'egress',
  via: 'authz',
  actor: 'bot',
  target: 'search',
  task: 't',
  action: 'a',
  resource: 'r',
  ...over,
});
const proxied = (host: string, port: number, over: Partial<EgressFacts> = {}): EgressFacts => ({
  kind: 'egress',
  via: 'proxy',
  vp: 'vp-bot',
  action: 'http:get',
  resource: `http://${host}:${port}/`,
  hop: { host, port, hostPort: `${host}:${port}`, connect: false },
  ...over,
});
const VP_BOT: Answers['vps'] = [['vp-bot', { ok: true, agentName: 'bot', agentDid: 'did:key:zBot', reason: 'ok' }]];

function done(step: Step): Evaluation {
  if (isQuestion(step)) throw new Error(`evaluation asked ${JSON.stringify(step.question)}`);
  return step;
}

describe('governance standing reaches the decision (rule identity)', () => {
  const rows: { name: string; gov?: GovernanceStanding; requireGoverned?: boolean; status: number; reason?: RegExp }[] = [
    { name: 'active governed agent -> allowed', gov: standing({ bot: 'active' }), status: 200 },
    { name: 'suspended -> 403 naming the status', gov: standing({ bot: 'suspended' }), status: 403, reason: /"bot" is suspended \(governance\)/ },
    { name: 'quarantined -> 403', gov: standing({ bot: 'quarantined' }), status: 403, reason: /quarantined/ },
    { name: 'retired -> 403', gov: standing({ bot: 'retired' }), status: 403, reason: /retired/ },
    { name: 'draft -> 403', gov: standing({ bot: 'draft' }), status: 403, reason: /draft/ },
    { name: 'approved but not active -> 403', gov: standing({ bot: 'approved' }), status: 403, reason: /approved/ },
    { name: 'not governed, governance not required -> allowed', gov: standing({ other: 'active' }), status: 200 },
    { name: 'not governed, governance required -> 403', gov: standing({ other: 'active' }), requireGoverned: true, status: 403, reason: /no governed record/ },
    {
      name: 'governed, standing stale (authority unreachable) -> 403 fail closed',
      gov: standing({ bot: 'active' }, NOW - 60_000),
      status: 403,
      reason: /unknown: identity authority unreachable/,
    },
    { name: 'never fetched, governance required -> 403', requireGoverned: true, status: 403, reason: /unknown/ },
    { name: 'never fetched, not required -> allowed', status: 200 },
  ];
  it.each(rows)('$name', (row) => {
    const snap = policyOf(SERVICES, { requireGoverned: row.requireGoverned ?? false }, row.gov);
    const ev = done(evaluate(authz(), snap, { usage: USAGE }, NOW, true));
    expect(ev.decision.status).toBe(row.status);
    if (row.status !== 200) {
      expect(ev.decision.rule).toBe('identity');
      expect(ev.decision.reason).toMatch(row.reason!);
      expect(ev.layers.at(-1)).toMatchObject({ layer: 'governance', verdict: 'deny' });
      expect(ev.effects.reserveCall).toBeUndefined();
    }
  });
  it.each(rows)('dry-run layers equal the live decision: $name', (row) => {
    const snap = policyOf(SERVICES, { requireGoverned: row.requireGoverned ?? false }, row.gov);
    const live = done(evaluate(authz(), snap, { usage: USAGE }, NOW));
    expect(live.decision.status).toBe(row.status);
    checkExplained('egress', live, done(evaluate(authz(), snap, { usage: USAGE }, NOW, true)));
  });
});

describe('the forward proxy through the same evaluation', () => {
  const snap = policyOf(SERVICES, { identityAuthority: true });
  const a = (extra: Answers = {}): Answers => ({ vps: VP_BOT, usage: USAGE, ...extra });
  const rows: { name: string; facts: EgressFacts; answers?: Answers; status?: number; ask?: string; reason?: RegExp; service?: string }[] = [
    { name: 'no Proxy-Authorization -> challenge', facts: proxied('orders.svc', 8080, { vp: undefined }), status: 403, reason: /missing Proxy-Authorization/ },
    { name: 'asks the VP first', facts: proxied('orders.svc', 8080), answers: {}, ask: 'vp' },
    {
      name: 'invalid VP -> 403 identity',
      facts: proxied('orders.svc', 8080),
      answers: { vps: [['vp-bot', { ok: false, reason: 'revoked' }]] },
      status: 403,
      reason: /invalid agent VP: revoked/,
    },
    { name: 'registry upstream in egressAllow -> allowed', facts: proxied('orders.svc', 8080), status: 200, service: 'orders' },
    { name: 'registry tool upstream in allowTools -> allowed', facts: proxied('search.tools.svc', 8080), status: 200, service: 'search' },
    { name: 'shared upstream resolves to the model the agent may use', facts: proxied('broker.writ.svc', 8080), status: 200, service: 'gpt' },
    { name: 'external host listed bare, port 80 -> allowed', facts: proxied('api.example.com', 80), status: 200, service: 'api.example.com' },
    { name: 'external host listed bare, other port, plain HTTP -> held (never any port)', facts: proxied('api.example.com', 8080), ask: 'hold' },
    { name: 'registry name used as a bare host name -> held, not allowed', facts: proxied('orders', 80), ask: 'hold' },
    { name: 'external host:port listed exactly -> allowed', facts: proxied('files.example.com', 8443), status: 200 },
    { name: 'unlisted external host -> held for a human', facts: proxied('evil.example', 80), ask: 'hold' },
    {
      name: 'CONNECT to an unlisted external host on 443 -> held',
      facts: proxied('evil.example', 443, { hop: { host: 'evil.example', port: 443, hostPort: 'evil.example:443', connect: true } }),
      ask: 'hold',
    },
    {
      name: 'CONNECT to a non-TLS port outside the registry -> 403',
      facts: proxied('evil.example', 25, { hop: { host: 'evil.example', port: 25, hostPort: 'evil.example:25', connect: true } }),
      status: 403,
      reason: /CONNECT to port 25/,
    },
    {
      name: 'held, approved -> allowed by a human (rule delegation)',
      facts: proxied('evil.example', 80),
      answers: a({ hold: { result: 'approved', id: 'r1', detail: 'ops@x' } }),
      status: 200,
      reason: /egress request r1 approved by ops@x/,
    },
    {
      name: 'held, denied -> 403',
      facts: proxied('evil.example', 80),
      answers: a({ hold: { result: 'denied', id: 'r1', detail: 'no' } }),
      status: 403,
      reason: /r1 denied: no/,
    },
    {
      name: 'held, expired -> 403',
      facts: proxied('evil.example', 80),
      answers: a({ hold: { result: 'expired', id: 'r1', detail: '' } }),
      status: 403,
      reason: /expired/,
    },
    {
      name: 'held, queue unavailable -> 403',
      facts: proxied('evil.example', 80),
      answers: a({ hold: { result: 'unavailable', detail: 'down' } }),
      status: 403,
      reason: /queue is unavailable/,
    },
    {
      name: 'regulated registry target without delegation -> held',
      facts: proxied('ledger.tools.svc', 8080, { task: 't', resource: 'r' }),
      answers: a({ delegation: { ok: false, reason: 'no approved delegation' } }),
      ask: 'hold',
    },
    {
      name: 'regulated, identity authority down -> 403, not a hold',
      facts: proxied('ledger.tools.svc', 8080, { task: 't', resource: 'r' }),
      answers: a({ delegation: { ok: false, unavailable: true, reason: 'unreachable' } }),
      status: 403,
      reason: /unreachable/,
    },
  ];
  it.each(rows)('$name', (row) => {
    const step = evaluate(row.facts, snap, row.answers ?? a(), NOW);
    if (row.ask) {
      expect(isQuestion(step) && step.question.kind).toBe(row.ask);
      return;
    }
    const ev = done(step);
    expect(ev.decision.status).toBe(row.status);
    expect(ev.effects.audit.action).toBe('egress.proxy');
    if (row.reason) expect(ev.decision.reason).toMatch(row.reason);
    if (row.service) expect(ev.effects.audit.service).toBe(row.service);
    if (row.facts.vp === undefined) expect(ev.decision.challenge).toBe(true);
  });
  it.each(rows)('dry-run layers equal the live decision: $name', (row) => {
    const live = evaluate(row.facts, snap, row.answers ?? a(), NOW);
    const explained = evaluate(row.facts, snap, row.answers ?? a(), NOW, true);
    if (row.ask) {
      expect(isQuestion(live) && live.question.kind).toBe(row.ask);
      expect(explained).toStrictEqual(live);
      return;
    }
    expect(done(live).decision.status).toBe(row.status);
    checkExplained('egress', done(live), done(explained));
  });
  it('a registry target served with a model (a broker) gets a call ticket effect; another or an external one does not', () => {
    expect(done(evaluate(proxied('broker.writ.svc', 8080), snap, a(), NOW)).effects.ticket).toEqual({ actor: 'bot', upstream: 'broker.writ.svc:8080' });
    const orders = done(evaluate(proxied('orders.svc', 8080), snap, a(), NOW));
    expect(orders.decision.allow).toBe(true);
    expect(orders.effects.ticket).toBeUndefined();
    expect(done(evaluate(proxied('api.example.com', 80), snap, a(), NOW)).effects.ticket).toBeUndefined();
  });
});

describe("the dry-run's layers: each layer that applies, in order, with its verdict and why", () => {
  const OPA_OK: Answers['opa'] = { allow: true, reason: 'org policy allows' };
  const rows: { name: string; facts: Facts; answers?: Answers; settings?: Parameters<typeof policyOf>[1]; gov?: GovernanceStanding; layers: string[] }[] = [
    {
      name: 'an allowed tool call',
      facts: authz(),
      layers: [
        'identity pass agent bot (header identity)',
        'governance pass not governed',
        'registry pass target search',
        'inline pass search is in bot.allowTools',
        'budget pass within budget',
        'delegation pass allowed by registry allowlist and budget',
      ],
    },
    {
      name: 'with OPA: its verdict last',
      facts: authz({ target: 'orders' }),
      settings: { opa: true },
      answers: { usage: USAGE, opa: OPA_OK },
      gov: standing({ bot: 'active' }),
      layers: [
        'identity pass agent bot (header identity)',
        'governance pass governed agent is active',
        'registry pass target orders',
        'inline pass orders is in bot.egressAllow',
        'budget pass within budget',
        'delegation pass allowed by registry allowlist and budget',
        'opa pass org policy allows',
      ],
    },
    {
      name: 'a suspended agent: governance denies',
      facts: authz(),
      gov: standing({ bot: 'suspended' }),
      layers: ['identity pass agent bot (header identity)', 'governance deny agent "bot" is suspended (governance)'],
    },
    {
      name: 'a regulated target without delegation at /authz: needs approval',
      facts: authz({ target: 'ledger' }),
      settings: { identityAuthority: true },
      answers: { usage: USAGE, delegation: { ok: false, reason: 'no approved delegation' } },
      layers: [
        'identity pass agent bot (header identity)',
        'governance pass not governed',
        'registry pass target ledger',
        'inline pass ledger is in bot.allowTools',
        'budget pass within budget',
        'delegation needs-approval needs approval: no approved delegation',
      ],
    },
    {
      name: 'an unlisted external host approved by a human: approval, no delegation layer',
      facts: proxied('evil.example', 80),
      settings: { identityAuthority: true },
      answers: { vps: VP_BOT, usage: USAGE, hold: { result: 'approved', id: 'r1', detail: 'ops@x' } },
      layers: [
        'identity pass agent bot proved by VP (did:key:zBot)',
        'governance pass not governed',
        'registry pass external evil.example:80',
        'inline pass unlisted external host',
        'budget pass within budget',
        'approval pass egress request r1 approved by ops@x',
      ],
    },
    {
      name: 'CONNECT to a port outside the registry: denied before the registry passes',
      facts: proxied('evil.example', 25, { hop: { host: 'evil.example', port: 25, hostPort: 'evil.example:25', connect: true } }),
      settings: { identityAuthority: true },
      answers: { vps: VP_BOT },
      layers: [
        'identity pass agent bot proved by VP (did:key:zBot)',
        'governance pass not governed',
        'inline deny CONNECT to port 25 is not allowed for evil.example (not a registry upstream, not in egressAllow)',
      ],
    },
    {
      name: 'ingress to a public service',
      facts: { kind: 'ingress', service: 'web' },
      layers: ['identity pass anonymous', 'registry pass service web', 'inline pass public service'],
    },
  ];
  const services: Service[] = [...SERVICES, { name: 'web', upstream: 'web.svc:80', public: true }];
  it.each(rows)('$name', (row) => {
    const snap = policyOf(services, row.settings ?? {}, row.gov);
    const ev = done(evaluate(row.facts, snap, row.answers ?? { usage: USAGE }, NOW, true));
    expect(ev.layers.map((l) => `${l.layer} ${l.verdict} ${l.reason}`)).toEqual(row.layers);
  });
});

describe('one completion is one call (call tickets)', () => {
  const snap = policyOf(SERVICES);
  const full = { tokensLastHour: 0, callsLastHour: 10, costUsdLastDay: 0 };
  it('asks about a presented ticket, bound to actor and upstream', () => {
    const step = evaluate(authz({ target: 'gpt', ticket: 'v1.x.y' }), snap, { usage: full }, NOW);
    expect(isQuestion(step) && step.question).toEqual({ kind: 'ticket', ticket: 'v1.x.y', actor: 'bot', upstream: 'broker.writ.svc:8080' });
  });
  it('a valid ticket: the call is not counted again, even at the ceiling', () => {
    const ev = done(evaluate(authz({ target: 'gpt', ticket: 'v1.x.y' }), snap, { usage: full, ticket: true }, NOW));
    expect(ev.decision.status).toBe(200);
    expect(ev.effects.reserveCall).toBeUndefined();
  });
  it('an invalid ticket counts like no ticket (and the ceiling applies)', () => {
    const ev = done(evaluate(authz({ target: 'gpt', ticket: 'forged' }), snap, { usage: full, ticket: false }, NOW));
    expect(ev.decision.status).toBe(403);
    expect(ev.decision.reason).toMatch(/call budget exceeded/);
  });
  it('no ticket: one call reserved', () => {
    expect(done(evaluate(authz({ target: 'gpt' }), snap, { usage: USAGE }, NOW)).effects.reserveCall).toMatchObject({ agent: 'bot' });
  });
});

describe('every answer a live decision gathers, the dry-run gathers too', () => {
  const facts: Facts[] = [];
  const hosts: [string, number][] = [
    ['orders.svc', 8080],
    ['broker.writ.svc', 8080],
    ['api.example.com', 80],
    ['api.example.com', 81],
    ['ledger.tools.svc', 8080],
    ['search.tools.svc', 8080],
  ];
  for (const target of ['search', 'gpt', 'gpt-b', 'orders', 'ledger', 'nope', '']) {
    for (const actor of ['bot', 'gpt', 'ghost']) {
      for (const kind of [undefined, 'tool', 'model']) facts.push(authz({ actor, target, targetKind: kind }));
    }
  }
  for (const [h, p] of hosts) facts.push(proxied(h, p, { vp: 'vp-bot' }));
  for (const svc of ['web', 'orders', 'nope']) facts.push({ kind: 'ingress', service: svc }, { kind: 'ingress', service: svc, authorization: 'Bearer x' });
  const services: Service[] = [...SERVICES, { name: 'web', upstream: 'web.svc:80', public: true }];

  it(`dry-run equals live for ${facts.length} fact sets, and writes nothing`, async () => {
    expect(facts.length).toBeGreaterThanOrEqual(50);
    const identity = {
      verifyPresentation: async () => ({ ok: true, agentName: 'bot', agentDid: 'did:key:zBot', reason: 'ok' }),
      checkDelegation: async () => ({ ok: true, reason: 'ok', delegationId: 'd1', notAfter: Math.floor(NOW / 1000) + 60 }),
    };
    const e = engineOf(services, { identity, now: () => NOW });
    for (const f of facts) {
      const before = { audit: e.audit.length, calls: e.budget.usage('bot', NOW).callsLastHour };
      const dry = await dryRun(e, f);
      expect({ audit: e.audit.length, calls: e.budget.usage('bot', NOW).callsLastHour }).toEqual(before);
      const live = await authorize(e, f);
      expect(dry.decision, JSON.stringify(f)).toEqual(live.decision);
      // The dry-run explains (every layer in order, the last one deciding); a live decision does not.
      expect(dry.layers.length).toBeGreaterThan(0);
      expect(live.layers).toEqual([]);
      if (!dry.decision.allow) expect(dry.layers.at(-1)!.verdict).not.toBe('pass');
      expect(e.audit.length).toBe(before.audit + 1);
    }
  });

  it('answers carry the policy version; the header is the snapshot version', () => {
    const snap: PolicySnapshot = policyOf(SERVICES, {}, undefined, 42);
    const ev = done(evaluate(authz(), snap, { usage: USAGE }, NOW));
    expect(ev.version).toBe(42);
    expect(ev.decision.headers[H.subject]).toBe('bot');
  });
});
