/**
 * Writ access tokens at /authz egress and through the forward proxy (issue 43 item 5, SPEC 4.1
 * step 1 "verify the agent token"): real tokens signed by a throwaway issuer key, checked offline
 * by the real verifier (identity/oauth/verifier.ts) behind a table identity port. A Writ token that
 * does not verify, or is not for this agent and target, denies 401; a token whose delegation covers
 * a regulated call satisfies the delegation requirement without asking the identity authority; a
 * bearer token of another issuer is no credential. Each row runs live and as the dry-run explains it.
 */
import { describe, expect, it } from 'vitest';
import { generateKeyPairSync } from 'node:crypto';
import { SignJWT } from 'jose';
import { H } from '../../lib/brand.js';
import type { AccessTokenClaims } from '../../lib/access-token.js';
import { mintAccessToken } from '../../identity/oauth/token.js';
import { createTokenVerifier } from '../../identity/oauth/verifier.js';
import { makeIssuer } from '../../identity/testkit.js';
import type { IdentityPort } from '../identity-port.js';
import { base, check, checkExplained, identityFake, liveAndExplained, T0, type Expect } from './table-testing.js';
import type { EgressFacts } from './types.js';

const ISS = 'http://idp.test';
const NOW = Math.floor(T0 / 1000);
const issuer = makeIssuer('idp.test');
const revoked = new Set<string>(['urn:uuid:revoked']);

const claims = (over: Partial<AccessTokenClaims> = {}): AccessTokenClaims => ({
  iss: ISS,
  sub: 'alice@example.com',
  aud: 'ledger',
  act: { sub: 'did:key:zBot', name: 'bot' },
  client_id: 'bot',
  membership_jti: 'urn:uuid:membership-bot',
  scope: 'ledger:read',
  jti: 'urn:uuid:tok-1',
  iat: NOW - 10,
  exp: NOW + 290,
  delegation: { id: 'del-7', vc_jti: 'urn:uuid:vc-7', task: 't-1', action: 'ledger:read', resource: 'acct/*' },
  ...over,
});

const TOK = {
  good: await mintAccessToken(issuer, claims()),
  search: await mintAccessToken(issuer, claims({ aud: 'search', delegation: undefined, sub: 'did:key:zBot' })),
  expired: await mintAccessToken(issuer, claims({ exp: NOW - 60 })),
  revoked: await mintAccessToken(issuer, claims({ jti: 'urn:uuid:revoked' })),
  helper: await mintAccessToken(issuer, claims({ act: { sub: 'did:key:zHelper', name: 'helper' } })),
  otherIssuer: await mintAccessToken(issuer, claims({ iss: 'https://login.other.test' })),
  otherKey: await mintAccessToken(makeIssuer('idp.test'), claims()),
  none: '',
};
const [h, p] = TOK.good.split('.');
TOK.none = `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'at+jwt', kid: issuer.kid })).toString('base64url')}.${p}.`;
const altered = `${h}.${p}.${'A'.repeat(86)}`;
const foreign = await new SignJWT({ act: { sub: 'x', name: 'bot' } })
  .setProtectedHeader({ alg: 'EdDSA', typ: 'at+jwt' })
  .setIssuer('https://login.other.test')
  .setAudience('search')
  .sign(generateKeyPairSync('ed25519').privateKey);

/** The table identity port, with the real offline verifier (clock T0) as its token follower. */
function withTokens(delegation: 'ok' | 'no' = 'no'): IdentityPort {
  const verifier = createTokenVerifier({
    issuer: ISS,
    keyFor: (kid) => (kid === issuer.kid ? issuer.publicKey : undefined),
    now: () => T0,
    state: { isRevoked: (j) => revoked.has(j), agentDenial: () => undefined },
  });
  return { ...identityFake(delegation), tokens: () => verifier };
}

const regulated: Partial<EgressFacts> = { target: 'ledger', task: 't-1', action: 'ledger:read', resource: 'acct/42' };
const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

interface Row {
  name: string;
  facts: Partial<EgressFacts>;
  identity?: IdentityPort;
  mode?: 'vc';
  expect: Expect;
}

const rows: Row[] = [
  {
    name: 'covering token satisfies the regulated delegation without asking (identity says no)',
    facts: { ...regulated, ...bearer(TOK.good) },
    expect: { status: 200, rule: 'delegation', reason: /approved delegation \(access token\)/, headers: { [H.agentDid]: 'did:key:zBot', [H.actor]: 'bot' } },
  },
  {
    name: 'vc mode: the token is the agent credential (no VP)',
    facts: { ...regulated, ...bearer(TOK.good) },
    mode: 'vc',
    expect: { status: 200, rule: 'delegation' },
  },
  {
    name: 'delegated token: the subject is its human when no on-behalf-of is sent',
    facts: { ...regulated, ...bearer(TOK.good), onBehalfOf: undefined },
    expect: { status: 200, rule: 'delegation', headers: { [H.subject]: 'alice@example.com' } },
  },
  {
    name: 'on behalf of someone else -> 401',
    facts: { ...regulated, ...bearer(TOK.good), onBehalfOf: 'mallory' },
    expect: { status: 401, rule: 'identity', reason: /not on behalf of "mallory"/ },
  },
  {
    name: 'another task: the token does not cover it, the identity authority is asked (no) -> 401 needs approval',
    facts: { ...regulated, ...bearer(TOK.good), task: 't-2' },
    expect: { status: 401, rule: 'delegation', reason: /needs approval/ },
  },
  {
    name: 'another resource: not covered -> 401 needs approval',
    facts: { ...regulated, ...bearer(TOK.good), resource: 'hr/1' },
    expect: { status: 401, rule: 'delegation', reason: /needs approval/ },
  },
  {
    name: 'wrong audience -> 401',
    facts: { ...bearer(TOK.good) },
    expect: { status: 401, rule: 'identity', reason: /audience "ledger" is not the target "search"/ },
  },
  { name: 'client_credentials token for its entry -> 200', facts: { ...bearer(TOK.search) }, expect: { status: 200, rule: 'inline' } },
  { name: 'expired -> 401', facts: { ...regulated, ...bearer(TOK.expired) }, expect: { status: 401, rule: 'identity', reason: /token expired/ } },
  { name: 'revoked -> 401', facts: { ...regulated, ...bearer(TOK.revoked) }, expect: { status: 401, rule: 'identity', reason: /token revoked/ } },
  { name: 'altered signature -> 401', facts: { ...regulated, ...bearer(altered) }, expect: { status: 401, rule: 'identity', reason: /signature invalid/ } },
  { name: 'alg none -> 401', facts: { ...regulated, ...bearer(TOK.none) }, expect: { status: 401, rule: 'identity', reason: /algorithm not accepted/ } },
  {
    name: 'signed by another key -> 401',
    facts: { ...regulated, ...bearer(TOK.otherKey) },
    expect: { status: 401, rule: 'identity', reason: /signature invalid/ },
  },
  {
    name: "another agent's token -> 401",
    facts: { ...regulated, ...bearer(TOK.helper) },
    expect: { status: 401, rule: 'identity', reason: /is for agent "helper", not "bot"/ },
  },
  {
    name: 'wrong issuer: not a Writ token, ignored; the regulated call asks the identity authority',
    facts: { ...regulated, ...bearer(TOK.otherIssuer) },
    identity: withTokens('ok'),
    expect: { status: 200, rule: 'delegation', reason: /^approved delegation$/ },
  },
  {
    name: "someone else's token is no credential (vc mode still needs a VP)",
    facts: { ...bearer(foreign) },
    mode: 'vc',
    expect: { status: 403, rule: 'identity', reason: /VP or access token required/ },
  },
  { name: "someone else's token in header mode: header identity", facts: { ...bearer(foreign) }, expect: { status: 200, rule: 'inline' } },
  {
    name: 'token and a VP of another agent -> 403',
    facts: { ...regulated, ...bearer(TOK.good), vp: 'vp-helper' },
    expect: { status: 403, rule: 'identity', reason: /not "bot"/ },
  },
  {
    name: 'forward proxy: token in Proxy-Authorization for the registry upstream -> 200',
    facts: {
      via: 'proxy',
      vp: TOK.search,
      actor: undefined,
      target: undefined,
      hop: { host: 'search.tools.svc', port: 8080, hostPort: 'search.tools.svc:8080', connect: false },
    },
    expect: { status: 200, rule: 'inline', action: 'egress.proxy' },
  },
  {
    name: 'forward proxy: token for another entry -> 401',
    facts: {
      via: 'proxy',
      vp: TOK.search,
      actor: undefined,
      target: undefined,
      hop: { host: 'notes.tools.svc', port: 8080, hostPort: 'notes.tools.svc:8080', connect: false },
    },
    expect: { status: 401, rule: 'identity', reason: /not the target "notes"/ },
  },
  {
    name: 'forward proxy: token to an external host -> 401',
    facts: {
      via: 'proxy',
      vp: TOK.search,
      actor: undefined,
      target: undefined,
      hop: { host: 'api.example.com', port: 80, hostPort: 'api.example.com:80', connect: false },
    },
    expect: { status: 401, rule: 'identity', reason: /not an external host/ },
  },
];

describe('Writ access tokens at egress (issue 43)', () => {
  it.each(rows)('$name', async (row) => {
    const facts = { ...base, ...row.facts } as EgressFacts;
    const { live, explained } = await liveAndExplained(facts, { identity: row.identity ?? withTokens(), identityMode: row.mode });
    check(live, row.expect);
    checkExplained('egress', live, explained);
  });

  it('a verified token is checked once: repeats cost no signature verification', async () => {
    const identity = withTokens();
    for (let i = 0; i < 5; i++)
      check((await liveAndExplained({ ...base, ...regulated, ...bearer(TOK.good) }, { identity })).live, { status: 200, rule: 'delegation' });
    expect(identity.tokens!().signatureChecks()).toBe(1);
  });
});
