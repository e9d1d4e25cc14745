/**
 * The token endpoint's refusals, each with its RFC 6749 5.2 / 8693 / 8707 code: a VP of another
 * agent, a delegation denied, pending, revoked, expired or for another task, an unknown entry or
 * one the agent may not call, a scope not offered, a suspended agent, client_id of another agent,
 * malformed requests; and client assertions that must not pass.
 */
import { describe, expect, it } from 'vitest';
import { SignJWT } from 'jose';
import { eq } from 'drizzle-orm';
import { employees } from '../../store/schema/directory.js';
import { seedAgent } from '../enterprise/governance/testkit.js';
import { testBackends } from '../../store/testing.js';
import { loadIdentity, type AgentIdentity } from '../client.js';
import { actorVp, agent, delegation, ISSUER, postForm, tool, TOKEN_ENDPOINT, useBed } from './oauth-testing.js';

const EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const JWT = 'urn:ietf:params:oauth:token-type:jwt';
const ID_TOKEN = 'urn:ietf:params:oauth:token-type:id_token';
const BEARER = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';

/** A client assertion signed by `a`'s did:key, fields overridable. */
async function assertion(a: AgentIdentity, o: { iss?: string; aud?: string; exp?: number; jti?: string; alg?: string } = {}): Promise<string> {
  const id = loadIdentity(a);
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({})
    .setProtectedHeader({ alg: o.alg ?? 'EdDSA' })
    .setIssuer(o.iss ?? a.name!)
    .setSubject(o.iss ?? a.name!)
    .setAudience(o.aud ?? ISSUER)
    .setJti(o.jti ?? crypto.randomUUID())
    .setIssuedAt(now)
    .setExpirationTime(o.exp ?? now + 60)
    .sign(id.key);
}

describe.each(testBackends())('token endpoint refusals on $name', (b) => {
  const bed = useBed(b);
  const exchange = (p: Record<string, string>) => postForm(bed, '/oauth/token', { grant_type: EXCHANGE, ...p });

  it('exchange: each unusable grant is refused with its code', async () => {
    const me = await agent(bed, 'neg-a', ['crm', 'plain']);
    const other = await agent(bed, 'neg-b', ['crm']);
    tool(bed, 'crm', { dataClass: 'regulated' });
    tool(bed, 'plain');
    tool(bed, 'hr');
    const ok = await delegation(bed, 'neg-a', { task: 'T-1', action: 'crm:read', resource: 'crm/acme/*', approver: 'alice' });
    const revoked = await delegation(bed, 'neg-a', { task: 'T-R', action: 'crm:read', resource: 'crm/acme/*' });
    expect((await bed.api.post('/v1/revoke', { vcJti: revoked.vcJti })).status).toBe(200);
    await delegation(bed, 'neg-a', { task: 'T-P', action: 'crm:read', resource: 'crm/x', approver: 'bob', outcome: 'pending' });
    await delegation(bed, 'neg-a', { task: 'T-D', action: 'crm:read', resource: 'crm/x', approver: 'bob', outcome: 'deny' });
    const myVp = await actorVp(me);
    const base = { subject_token: ok.vc!, subject_token_type: JWT, actor_token: myVp, actor_token_type: JWT, audience: 'crm' };
    const bob = await bed.humanToken('bob');
    const cases: [string, Record<string, string>, number, string, RegExp][] = [
      ['VP of another agent', { actor_token: await actorVp(other) }, 400, 'invalid_grant', /delegation .* is for agent neg-a/],
      ['VP for another audience', { actor_token: await actorVp(me, 'writ-egress') }, 400, 'invalid_grant', /audience/],
      ['no actor token', { actor_token: '' }, 400, 'invalid_request', /actor_token/],
      ['revoked delegation', { subject_token: revoked.vc! }, 400, 'invalid_grant', /revoked/],
      ['pending delegation (OIDC)', { subject_token: bob, subject_token_type: ID_TOKEN, task: 'T-P' }, 400, 'invalid_grant', /is pending/],
      ['denied delegation (OIDC)', { subject_token: bob, subject_token_type: ID_TOKEN, task: 'T-D' }, 400, 'invalid_grant', /is denied/],
      [
        'delegation for another task (OIDC)',
        { subject_token: await bed.humanToken('alice'), subject_token_type: ID_TOKEN, task: 'T-9' },
        400,
        'invalid_grant',
        /no usable delegation/,
      ],
      ['OIDC token without task', { subject_token: bob, subject_token_type: ID_TOKEN }, 400, 'invalid_request', /task/],
      ['unknown entry', { audience: 'nope' }, 400, 'invalid_target', /unknown registry entry/],
      ['entry the agent may not call', { audience: 'hr' }, 400, 'invalid_target', /hr is not in neg-a.allowTools/],
      ['audience and resource disagree', { resource: 'plain' }, 400, 'invalid_target', /different entries/],
      ['the MCP route URL of an entry it may not call', { audience: 'http://gw.test/mcp/hr' }, 400, 'invalid_target', /hr is not in neg-a.allowTools/],
      ['a URL that is no MCP route', { audience: 'http://gw.test/v1/crm' }, 400, 'invalid_target', /^http:\/\/gw.test\/v1\/crm is no MCP gateway route/],
      ['an MCP route URL with a query', { audience: 'http://gw.test/mcp/crm?x=1' }, 400, 'invalid_target', /is no MCP gateway route/],
      [
        'the listener base (root RFC 9728 metadata)',
        { resource: 'http://gw.test' },
        400,
        'invalid_target',
        /^http:\/\/gw.test is no MCP gateway route nor a service's oauthResource: a token is for one registry entry/,
      ],
      ['no audience', { audience: '' }, 400, 'invalid_target', /audience/],
      ['scope not offered', { scope: 'crm:write' }, 400, 'invalid_scope', /crm:write/],
      ['client_id of another agent', { client_id: 'neg-b' }, 401, 'invalid_client', /client_id/],
      ['altered subject token', { subject_token: ok.vc!.slice(0, -4) + (ok.vc!.endsWith('AAAA') ? 'BBBB' : 'AAAA') }, 400, 'invalid_grant', /signature/],
      ['unsupported subject token type', { subject_token_type: 'urn:x' }, 400, 'unsupported_token_type', /urn:x/],
    ];
    for (const [name, change, status, code, why] of cases) {
      const r = await exchange({ ...base, ...change });
      expect({ name, status: r.status, error: r.json.error }).toEqual({ name, status, error: code });
      expect(r.json.error_description, name).toMatch(why);
      expect(r.headers.get('cache-control'), name).toBe('no-store');
    }
    // The same request without the fault passes; so does one naming the entry's MCP route (RFC 8707, as MCP clients do).
    expect((await exchange(base)).status).toBe(200);
    const byUrl = await exchange({ ...base, resource: 'https://gw.test/mcp/crm' });
    expect([byUrl.status, JSON.parse(Buffer.from(String(byUrl.json.access_token).split('.')[1]!, 'base64url').toString()).aud]).toEqual([200, 'crm']);
  });

  it('exchange with a workforce OIDC token: the human approved it, exactly one usable delegation', async () => {
    const me = await agent(bed, 'oidc-a', ['crm']);
    tool(bed, 'crm');
    await delegation(bed, 'oidc-a', { task: 'T-O', action: 'crm:read', resource: 'crm/1', approver: 'carol' });
    const r = await exchange({
      subject_token: await bed.humanToken('carol'),
      subject_token_type: ID_TOKEN,
      task: 'T-O',
      actor_token: await actorVp(me),
      actor_token_type: JWT,
      audience: 'crm',
    });
    expect(r.status).toBe(200);
    const claims = JSON.parse(Buffer.from(r.json.access_token.split('.')[1], 'base64url').toString());
    expect(claims).toMatchObject({ sub: 'carol', act: { name: 'oidc-a' }, delegation: { task: 'T-O', resource: 'crm/1' } });
    // Another human's token finds no delegation of theirs.
    const dave = await exchange({
      subject_token: await bed.humanToken('dave'),
      subject_token_type: ID_TOKEN,
      task: 'T-O',
      actor_token: await actorVp(me),
      actor_token_type: JWT,
      audience: 'crm',
    });
    expect(dave.json.error).toBe('invalid_grant');
    // Two usable delegations: ambiguous until one is named.
    await delegation(bed, 'oidc-a', { task: 'T-O', action: 'crm:list', resource: 'crm/2', approver: 'carol' });
    const two = await exchange({
      subject_token: await bed.humanToken('carol'),
      subject_token_type: ID_TOKEN,
      task: 'T-O',
      actor_token: await actorVp(me),
      actor_token_type: JWT,
      audience: 'crm',
    });
    expect(two.json).toMatchObject({ error: 'invalid_grant', error_description: '2 usable delegations match: name one with action or delegation_id' });
    const named = await exchange({
      subject_token: await bed.humanToken('carol'),
      subject_token_type: ID_TOKEN,
      task: 'T-O',
      action: 'crm:list',
      actor_token: await actorVp(me),
      actor_token_type: JWT,
      audience: 'crm',
    });
    expect(named.status).toBe(200);
  });

  it('a governed agent that is not active gets no token', async () => {
    const me = await agent(bed, 'gov-a', ['crm']);
    tool(bed, 'crm');
    const d = await delegation(bed, 'gov-a', { task: 'T-G', action: 'crm:read', resource: 'crm/1' });
    const now = new Date().toISOString();
    await seedAgent(bed.store.db, 'default', { agentName: 'gov-a', ownerRef: 'x', status: 'suspended', createdAt: now, updatedAt: now });
    const r = await exchange({ subject_token: d.vc!, subject_token_type: JWT, actor_token: await actorVp(me), actor_token_type: JWT, audience: 'crm' });
    expect(r.json).toMatchObject({ error: 'invalid_grant', error_description: 'agent gov-a is suspended (governance)' });
  });

  it('a deactivated human: no token for their delegation, and a token issued before is inactive', async () => {
    const me = await agent(bed, 'hum-a', ['crm']);
    tool(bed, 'crm');
    const now = new Date().toISOString();
    const employee = { tenantId: 'default', idp: 'okta', groups: [], roles: [], appAssignments: [], source: 'test', createdAt: now, updatedAt: now };
    await bed.store.db.insert(employees).values({ ...employee, employeeSubject: 'erin', externalId: 'e-1', email: 'erin@example.com', status: 'active' });
    const d = await delegation(bed, 'hum-a', { task: 'T-H', action: 'crm:read', resource: 'crm/1', approver: 'erin@example.com' });
    const asked = async () =>
      exchange({ subject_token: d.vc!, subject_token_type: JWT, actor_token: await actorVp(me), actor_token_type: JWT, audience: 'crm' });
    const issued = await asked();
    expect(issued.status).toBe(200);
    const introspect = async () => (await postForm(bed, '/oauth/introspect', { token: issued.json.access_token })).json;
    expect(await introspect()).toMatchObject({ active: true, sub: 'erin@example.com' });
    await bed.store.db.update(employees).set({ status: 'inactive' }).where(eq(employees.employeeSubject, 'erin'));
    expect(await introspect()).toEqual({ active: false });
    expect((await asked()).json).toMatchObject({ error: 'invalid_grant', error_description: "human 'erin@example.com' is deactivated (directory)" });
  });

  it('client_credentials: bad assertions, regulated entries and bad requests are refused', async () => {
    const me = await agent(bed, 'cc-n', ['plain', 'crm']);
    const other = await agent(bed, 'cc-o', ['plain']);
    tool(bed, 'plain');
    tool(bed, 'crm', { dataClass: 'regulated' });
    const cc = async (p: Record<string, string>) =>
      postForm(bed, '/oauth/token', { grant_type: 'client_credentials', client_assertion_type: BEARER, audience: 'plain', ...p });
    const now = Math.floor(Date.now() / 1000);
    const cases: [string, Record<string, string>, string, RegExp][] = [
      ['signed by another agent', { client_assertion: await assertion({ ...other, name: 'cc-n' }) }, 'invalid_client', /signature invalid/],
      ['wrong audience', { client_assertion: await assertion(me, { aud: 'https://elsewhere' }) }, 'invalid_client', /audience/],
      ['expired', { client_assertion: await assertion(me, { exp: now - 120 }) }, 'invalid_client', /expired/],
      ['too long-lived', { client_assertion: await assertion(me, { exp: now + 3600 }) }, 'invalid_client', /longer than 300 s/],
      ['client_id differs', { client_assertion: await assertion(me), client_id: 'cc-o' }, 'invalid_client', /client_id/],
      ['unknown client', { client_assertion: await assertion(me, { iss: 'ghost' }) }, 'invalid_client', /unknown client/],
      ['no assertion type', { client_assertion: await assertion(me), client_assertion_type: '' }, 'invalid_client', /private_key_jwt/],
      ['regulated entry', { client_assertion: await assertion(me), audience: 'crm' }, 'invalid_target', /regulated/],
    ];
    for (const [name, change, code, why] of cases) {
      const r = await cc(change);
      expect({ name, error: r.json.error }).toEqual({ name, error: code });
      expect(r.json.error_description, name).toMatch(why);
    }
    // Token endpoint by DID as client_id, with RFC 7523's token-endpoint audience: accepted.
    const byDid = await cc({ client_assertion: await assertion(me, { iss: me.did, aud: TOKEN_ENDPOINT }) });
    expect(byDid.status).toBe(200);
  });

  it('malformed requests: grant type, media type, repeated parameters', async () => {
    expect((await postForm(bed, '/oauth/token', { grant_type: 'password' })).json.error).toBe('unsupported_grant_type');
    expect((await postForm(bed, '/oauth/token', {})).json).toMatchObject({
      error: 'unsupported_grant_type',
      error_description: 'missing parameter grant_type',
    });
    const json = await bed.fetchVia(`${ISSUER}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"grant_type":"client_credentials"}',
    });
    expect(json.status).toBe(400);
    expect(await json.json()).toMatchObject({ error: 'invalid_request' });
    const twice = await bed.fetchVia(`${ISSUER}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'grant_type=client_credentials&grant_type=client_credentials',
    });
    expect(await twice.json()).toMatchObject({ error: 'invalid_request', error_description: 'parameter grant_type is included more than once' });
    const browser = await bed.fetchVia(`${ISSUER}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'cross-site' },
      body: 'grant_type=client_credentials',
    });
    expect(browser.status).toBe(403);
  });
});
