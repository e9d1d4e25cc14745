/**
 * Table tests of the egress decision (SPEC 4.1 and the choices in ../README.md): each row runs
 * the whole gather -> evaluate -> commit through `authorize` with ports that are answer tables
 * (table-testing.ts): the allowlists by target kind, the agent's VP in header and vc identity
 * modes, delegations for regulated targets, the OPA veto, repeated and injected headers; and every
 * row again as the dry-run explains it (the same decision, its layers ending in the one that decided).
 */
import { describe, expect, it } from 'vitest';
import { H } from '../../lib/brand.js';
import { base, check, checkExplained, fakeVpJwt, identityFake, liveAndExplained, NOT_AFTER, opa, run, VPS, type Expect, type Over } from './table-testing.js';
import type { EgressFacts } from './types.js';

interface EgressRow {
  name: string;
  facts: Partial<EgressFacts>;
  deps?: Over;
  expect: Expect;
}

const ID = { identity: identityFake() };
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
    expect: { status: 403, rule: 'identity', reason: /VP or access token required/ },
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
    name: 'a credential header sent twice -> 403 identity, before any VP is verified',
    facts: { repeatedCredential: 'authorization' },
    deps: ID,
    expect: { status: 403, rule: 'identity', reason: /authorization sent more than once/ },
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

  it.each(egressRows)('dry-run layers equal the live decision: $name', async (row) => {
    const { live, explained } = await liveAndExplained({ ...base, ...row.facts }, row.deps);
    expect([live.decision.status, live.decision.rule]).toEqual([row.expect.status, row.expect.rule]);
    checkExplained('egress', live, explained);
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
