/**
 * Table tests of the ingress decision (SPEC 4.1 and the choices in ../README.md): each row runs
 * the whole gather -> evaluate -> commit through `authorize` with ports that are answer tables
 * (table-testing.ts): public and private services, OIDC tokens and scopes, the registry lookup by
 * service or host, the OPA veto; and every row again as the dry-run explains it (the same decision,
 * its layers ending in the one that decided).
 */
import { describe, expect, it } from 'vitest';
import { H } from '../../lib/brand.js';
import { check, checkExplained, liveAndExplained, oidcFake, opa, run, type Expect, type Over } from './table-testing.js';
import type { IngressFacts } from './types.js';

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

  it.each(ingressRows)('dry-run layers equal the live decision: $name', async (row) => {
    const { live, explained } = await liveAndExplained({ kind: 'ingress', ...row.facts }, row.deps);
    expect([live.decision.status, live.decision.rule]).toEqual([row.expect.status, row.expect.rule]);
    checkExplained('ingress', live, explained);
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
