/**
 * Authenticated management (issue 15 item 8): the all-in-one as `npm start` runs it, with
 * `WRIT_API_AUTH=keys` and a bootstrap key, over real sockets. Every route of both management
 * listeners' `/openapi.json` (and the route they do not document: the portal's forwarder)
 * answers 401 without a credential, 403 with a key that lacks the route's scope, and neither with a
 * key holding exactly that scope; the public routes answer without one; a revoked or rotated key
 * stops working at once on both listeners; no key mints or rotates a key stronger than itself; a
 * tenant's key is no management credential; and the stack still works end to end with auth on (the
 * examples were applied and their directory seeded through the bootstrap credential, and a
 * decision at /authz is unaffected: it is not a management route).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, PUBLIC, requiredScope } from '../runtime/lib/api-auth.js';
import { H } from '../runtime/lib/brand.js';
import { setLogLevel } from '../runtime/lib/log.js';
import { startWrit, type Writ } from '../runtime/main.js';

setLogLevel('error');
const BOOT = 'bootstrap-secret-for-the-auth-test-0123456789';
type Json = any;

describe('WRIT_API_AUTH=keys on the all-in-one', () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-auth-'));
  let writ: Writ;
  let cp: string;
  let idp: string;
  const keys = new Map<string, { id: string; plaintext: string }>();

  const call = async (base: string, method: string, path: string, key?: string, body?: unknown) => {
    const headers: Record<string, string> = {};
    if (key) headers.authorization = `Bearer ${key}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), redirect: 'manual' });
    const text = await res.text();
    return { status: res.status, text, header: (n: string) => res.headers.get(n) };
  };
  /** A key holding exactly `scopes` (minted once with the bootstrap key). */
  const keyFor = async (...scopes: string[]) => {
    const name = scopes.join(' ') || '(none)';
    let k = keys.get(name);
    if (!k) {
      const r = await call(idp, 'POST', '/v1/keys', BOOT, { name: `k-${keys.size}`, scopes });
      expect(r.status, r.text).toBe(201);
      const j = JSON.parse(r.text) as Json;
      k = { id: j.key.id, plaintext: j.plaintext };
      keys.set(name, k);
    }
    return k;
  };

  beforeAll(async () => {
    writ = await startWrit({
      PATH: process.env.PATH,
      WRIT_DATA_DIR: join(dir, 'data'),
      WRIT_API_AUTH: 'keys',
      WRIT_BOOTSTRAP_ADMIN_KEY: BOOT,
      PORT: '0',
      DECISION_ADDR: '127.0.0.1:0',
      DECISION_GRPC_ADDR: '127.0.0.1:0',
      MGMT_ADDR: '127.0.0.1:0',
      EGRESS_PROXY_ADDR: '127.0.0.1:0',
      BROKER_ADDR: '127.0.0.1:0',
      LOG_LEVEL: 'error',
    });
    cp = `http://127.0.0.1:${writ.ports.mgmt}`;
    idp = `http://127.0.0.1:${writ.ports.identity}`;
  }, 120_000);
  afterAll(async () => {
    await writ?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the all-in-one refuses keys mode with no credential for its own components', async () => {
    await expect(startWrit({ PATH: process.env.PATH, WRIT_API_AUTH: 'keys', WRIT_DATA_DIR: join(dir, 'other') })).rejects.toThrow(
      /WRIT_BOOTSTRAP_ADMIN_KEY or WRIT_API_KEY/,
    );
  });

  it('the scope table: public routes, named scopes, and admin for anything it does not name', () => {
    expect(requiredScope('GET', '/healthz')).toBe(PUBLIC);
    expect(requiredScope('GET', '/.well-known/did.json')).toBe(PUBLIC);
    expect(requiredScope('GET', '/status/revocation')).toBe(PUBLIC);
    expect(requiredScope('POST', '/v1/registry/apply')).toBe('registry:write');
    expect(requiredScope('DELETE', '/v1/registry/services/web')).toBe('registry:write');
    expect(requiredScope('GET', '/v1/audit/verify')).toBe('audit:read');
    expect(requiredScope('POST', '/v1/audit/consistency')).toBe('audit:read');
    expect(requiredScope('POST', '/v1/delegations/d1/approve')).toBe('approvals:decide');
    expect(requiredScope('POST', '/v1/egress/requests/r1/approve')).toBe('approvals:decide');
    expect(requiredScope('POST', '/v1/agents/a/provision')).toBe('identity:write');
    expect(requiredScope('POST', '/v1/revoke')).toBe('identity:admin');
    expect(requiredScope('POST', '/v1/keys')).toBe('keys:admin');
    expect(requiredScope('POST', '/v1/directory/sync')).toBe('directory:sync');
    expect(requiredScope('GET', '/portal/api/config')).toBe(PUBLIC);
    expect(['GET', 'POST'].map((m) => requiredScope(m, '/oauth/authorize'))).toEqual([PUBLIC, PUBLIC]);
    expect(requiredScope('POST', '/oauth/introspect')).toBe('identity:verify');
    expect(requiredScope('GET', '/portal/api/identity/v1/delegations')).toBe('authenticated');
    expect(requiredScope('GET', '/v1/nothing-here')).toBe(ADMIN);
    expect(requiredScope('POST', '/healthz')).toBe(ADMIN);
  });

  it('public routes answer without a credential on both listeners', async () => {
    for (const [base, path] of [
      [cp, '/healthz'],
      [cp, '/readyz'],
      [cp, '/openapi.json'],
      [cp, '/docs'],
      [cp, '/metrics'],
      [cp, '/portal/'],
      [cp, '/portal/api/config'],
      [idp, '/healthz'],
      [idp, '/readyz'],
      [idp, '/.well-known/did.json'],
      [idp, '/v1/issuer'],
      [idp, '/openapi.json'],
      [idp, '/docs'],
    ] as const) {
      const r = await call(base, 'GET', path);
      expect(r.status, `${base}${path}: ${r.text.slice(0, 200)}`).toBe(200);
    }
  });

  it('every documented route of both listeners: 401 without a key, 403 with the wrong scope, through with the right one', async () => {
    const wrong = await keyFor('unrelated:scope');
    const routes: [string, string, string][] = [];
    for (const base of [cp, idp]) {
      const doc = JSON.parse((await call(base, 'GET', '/openapi.json')).text) as Json;
      for (const [path, ops] of Object.entries(doc.paths as Record<string, Json>)) {
        for (const method of Object.keys(ops)) routes.push([base, method.toUpperCase(), path.replace(/\{[^}]+\}/g, 'p1')]);
      }
    }
    // Mounted outside the documented apps.
    routes.push([cp, 'GET', '/portal/api/identity/v1/delegations']);
    // The egress approvals are documented now.
    for (const p of ['/v1/egress/requests', '/v1/egress/requests/p1/approve']) expect(routes.some(([b, , path]) => b === cp && path === p)).toBe(true);
    const checked: string[] = [];
    for (const [base, method, path] of routes) {
      const scope = requiredScope(method, path);
      const where = `${method} ${base === cp ? ':8181' : ':8090'}${path} (${scope})`;
      // Every route is classified: none falls through to the admin-only default.
      expect(scope, where).not.toBe(ADMIN);
      if (scope === PUBLIC) continue;
      const none = await call(base, method, path, undefined, method === 'GET' ? undefined : {});
      expect(none.status, `${where} without a key: ${none.text.slice(0, 200)}`).toBe(401);
      expect(none.header('www-authenticate')).toMatch(/^Bearer/);
      const bad = await call(base, method, path, 'writ_test_notakey', method === 'GET' ? undefined : {});
      expect(bad.status, `${where} with a made-up key`).toBe(401);
      if (scope !== 'authenticated') {
        const w = await call(base, method, path, wrong.plaintext, method === 'GET' ? undefined : {});
        expect(w.status, `${where} with the wrong scope: ${w.text.slice(0, 200)}`).toBe(403);
      }
      // The portal's forwarder passes the credential on: the identity authority checks its own route's scope.
      const right = await keyFor(scope === 'authenticated' ? requiredScope(method, path.replace('/portal/api/identity', '')) : scope);
      const ok = await call(base, method, path, right.plaintext, method === 'GET' ? undefined : {});
      expect([401, 403], `${where} with its scope: ${ok.status} ${ok.text.slice(0, 200)}`).not.toContain(ok.status);
      checked.push(where);
    }
    expect(checked.length).toBeGreaterThan(50);
  }, 120_000);

  it('verify-presentation, answered outside the app on its fast path, is guarded the same way', async () => {
    const body = { vp: 'not.a.vp' };
    expect((await call(idp, 'POST', '/v1/agents/verify-presentation', undefined, body)).status).toBe(401);
    expect((await call(idp, 'POST', '/v1/agents/verify-presentation', (await keyFor('identity:read')).plaintext, body)).status).toBe(403);
    const ok = await call(idp, 'POST', '/v1/agents/verify-presentation', (await keyFor('identity:verify')).plaintext, body);
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.text).ok).toBe(false);
  });

  it('the bootstrap key holds every scope; a revoked or rotated key is refused at once on both listeners', async () => {
    expect((await call(cp, 'GET', '/v1/registry/services', BOOT)).status).toBe(200);
    expect((await call(idp, 'GET', '/v1/agents', BOOT)).status).toBe(200);
    const mint = async () => {
      const r = await call(idp, 'POST', '/v1/keys', BOOT, { name: 'short-lived', scopes: ['registry:read', 'identity:read'] });
      expect(r.status, r.text).toBe(201);
      const j = JSON.parse(r.text) as Json;
      const k = { id: j.key.id as string, plaintext: j.plaintext as string };
      // Used on both listeners first, so an answer remembered from this use would be what stays.
      expect((await call(cp, 'GET', '/v1/registry/services', k.plaintext)).status).toBe(200);
      expect((await call(idp, 'GET', '/v1/agents', k.plaintext)).status).toBe(200);
      return k;
    };
    const refusedNow = async (k: { plaintext: string }) => {
      const [a, b] = await Promise.all([call(cp, 'GET', '/v1/registry/services', k.plaintext), call(idp, 'GET', '/v1/agents', k.plaintext)]);
      expect([a.status, b.status]).toEqual([401, 401]);
    };
    const revoked = await mint();
    expect((await call(idp, 'POST', `/v1/keys/${revoked.id}/revoke`, BOOT, { by: 'test' })).status).toBe(200);
    await refusedNow(revoked);
    const rotated = await mint();
    const r = await call(idp, 'POST', `/v1/keys/${rotated.id}/rotate`, BOOT, { by: 'test' });
    expect(r.status, r.text).toBe(200);
    await refusedNow(rotated);
    expect((await call(cp, 'GET', '/v1/registry/services', (JSON.parse(r.text) as Json).plaintext)).status).toBe(200);
  });

  it('no key mints or rotates a key with a scope it does not hold itself', async () => {
    const keyAdmin = await keyFor('keys:admin');
    const stronger = await call(idp, 'POST', '/v1/keys', keyAdmin.plaintext, { name: 'escalate', scopes: ['admin'] });
    expect(stronger.status, stronger.text).toBe(403);
    expect(stronger.text).toContain('scope_escalation');
    const wider = await call(idp, 'POST', '/v1/keys', keyAdmin.plaintext, { name: 'escalate', scopes: ['keys:admin', 'registry:write'] });
    expect(wider.status, wider.text).toBe(403);
    expect(JSON.parse((await call(idp, 'GET', '/v1/keys', BOOT)).text).some((k: Json) => k.name === 'escalate')).toBe(false);
    // Within its own scopes it may mint.
    expect((await call(idp, 'POST', '/v1/keys', keyAdmin.plaintext, { name: 'peer', scopes: ['keys:admin'] })).status).toBe(201);
    // Rotating hands over a new secret of the same scopes: an admin key is not the key admin's to rotate.
    const admin = JSON.parse((await call(idp, 'POST', '/v1/keys', BOOT, { name: 'an-admin', scopes: ['admin'] })).text) as Json;
    const rot = await call(idp, 'POST', `/v1/keys/${admin.key.id}/rotate`, keyAdmin.plaintext, { by: 'test' });
    expect(rot.status, rot.text).toBe(403);
    expect(rot.text).not.toContain('plaintext');
    expect((await call(cp, 'GET', '/v1/registry/services', admin.plaintext)).status).toBe(200);
  });

  it('a key bound to a tenant is refused as a management credential on both listeners', async () => {
    const r = await call(idp, 'POST', '/v1/keys', BOOT, { name: 'tenant-key', scopes: ['admin'], tenantId: 'example' });
    expect(r.status, r.text).toBe(201);
    const k = JSON.parse(r.text) as Json;
    for (const [base, path] of [
      [idp, '/v1/governance/agents'],
      [cp, '/v1/registry/services'],
    ] as const) {
      const a = await call(base, 'GET', path, k.plaintext);
      expect(a.status, a.text).toBe(403);
      expect(a.text).toMatch(/bound to tenant/);
    }
    // It is still that tenant's key where keys are checked for a tenant.
    const v = await call(idp, 'POST', '/v1/keys/verify', undefined, { key: k.plaintext, tenantId: 'example' });
    expect(JSON.parse(v.text).valid).toBe(true);
  });

  it('an authority grant needs approvals:decide and names the key that asserted it; records name the caller, not the body', async () => {
    const owner = 'idp_a:example:e1a2b3c4-0000-4000-8000-000000000002';
    const grant = { tenantId: 'example', agentId: 'research-agent', approverRef: owner, action: 'payments.write', resource: 'ledger/*' };
    const writer = await keyFor('identity:write');
    const refused = await call(idp, 'POST', '/v1/authority/delegations', writer.plaintext, grant);
    expect(refused.status, refused.text).toBe(403);
    const decider = await keyFor('approvals:decide');
    const ok = await call(idp, 'POST', '/v1/authority/delegations', decider.plaintext, grant);
    expect(ok.status, ok.text).toBe(201);
    const d = JSON.parse(ok.text) as Json;
    expect(d.granted_by).toBe(owner);
    expect(d.authority_evidence.asserted_by).toBe(`key:${decider.id}`);
    const admin = await keyFor('identity:admin');
    const revoked = await call(idp, 'POST', `/v1/authority/delegations/${d.delegation_id}/revoke`, admin.plaintext, { by: 'the-CISO' });
    expect(revoked.status, revoked.text).toBe(200);
    expect(JSON.stringify((JSON.parse(revoked.text) as Json).history)).not.toContain('the-CISO');
    expect(JSON.stringify((JSON.parse(revoked.text) as Json).history)).toContain(`key:${admin.id}`);
    const minted = await call(idp, 'POST', '/v1/keys', BOOT, { name: 'who-made-me', scopes: [], createdBy: 'someone-else' });
    expect((JSON.parse(minted.text) as Json).key.createdBy).toBe('bootstrap');
    // A governed agent's createdBy and lifecycle by stay the producer's stated names: the operator
    // finds the agents it created, and tells its own moves from a human's hold, by them.
    const agents = JSON.parse((await call(idp, 'GET', '/v1/governance/agents', BOOT)).text) as Json[];
    expect(agents.find((a) => a.agent_name === 'research-agent')?.created_by).toMatch(/^folder:/);
  });

  it('applying as a producer owner needs registry:owner:<owner>; registry:write alone cannot prune its entries', async () => {
    const services = JSON.parse((await call(cp, 'GET', '/v1/registry/services', BOOT)).text) as Json[];
    const owned = services.find((x) => x.owner && x.owner !== 'api');
    expect(owned, 'the examples are applied under a producer owner').toBeDefined();
    const owner = owned.owner as string;
    const writer = await keyFor('registry:write', 'registry:read');
    const takeover = await call(cp, 'POST', '/v1/registry/apply', writer.plaintext, { owner, services: [] });
    expect(takeover.status, takeover.text).toBe(403);
    expect(takeover.text).toContain(`registry:owner:${owner}`);
    // A plan writes nothing: allowed, and says what would go.
    const plan = await call(cp, 'POST', '/v1/registry/apply', writer.plaintext, { owner, services: [], dryRun: true });
    expect(plan.status, plan.text).toBe(200);
    expect(JSON.parse((await call(cp, 'GET', '/v1/registry/services', BOOT)).text)).toHaveLength(services.length);
    // Its own owner scope lets a credential apply as it (an unchanged apply here).
    const producer = await keyFor('registry:write', `registry:owner:${owner}`);
    const mine = services.filter((x) => x.owner === owner).map(({ owner: _o, version: _v, registeredAt: _r, updatedAt: _u, ...rest }) => rest);
    const same = await call(cp, 'POST', '/v1/registry/apply', producer.plaintext, { owner, services: mine });
    expect(same.status, same.text).toBe(200);
  });

  it('a governed agent update names the authenticated caller; applying identity or governed agents as a producer needs <area>:owner:<owner>', async () => {
    const writer = await keyFor('governance:write');
    const r = await call(idp, 'PATCH', '/v1/governance/agents/summarizer', writer.plaintext, { riskTier: 'medium', by: 'the-CISO' });
    expect(r.status, r.text).toBe(200);
    const agent = JSON.parse(r.text) as Json;
    expect(agent.history.at(-1)).toEqual({ at: expect.any(String), action: 'updated', by: `key:${writer.id}`, detail: 'risk_tier: "low" -> "medium"' });
    const owner = agent.created_by as string;
    expect(owner).toMatch(/^folder:/);
    const gov = await call(idp, 'POST', '/v1/governance/agents/apply', writer.plaintext, { owner, agents: [] });
    expect(gov.status, gov.text).toBe(403);
    expect(gov.text).toContain(`governance:owner:${owner}`);
    const ids = await call(idp, 'POST', '/v1/agents/apply', (await keyFor('identity:write')).plaintext, { owner, agents: [] });
    expect(ids.status, ids.text).toBe(403);
    expect(ids.text).toContain(`identity:owner:${owner}`);
    // Nothing was retired by the refused applies.
    const after = JSON.parse((await call(idp, 'GET', '/v1/governance/agents/summarizer', BOOT)).text) as Json;
    expect(after.status).toBe('approved');
  });

  it('a delegation approval names the authenticated caller, never the body field', async () => {
    const writer = await keyFor('identity:write');
    const approverKey = await keyFor('approvals:decide');
    const agent = await call(idp, 'POST', '/v1/agents', writer.plaintext, { name: 'auth-bot', role: 'worker', capabilities: [] });
    expect(agent.status, agent.text).toBe(201);
    expect((await call(idp, 'POST', '/v1/agents/auth-bot/provision', writer.plaintext, {})).status).toBe(200);
    const req = await call(idp, 'POST', '/v1/delegations/request', writer.plaintext, {
      actorName: 'auth-bot',
      task: 't',
      action: 'read',
      resource: 'r',
      reason: 'why',
    });
    expect(req.status, req.text).toBe(201);
    const id = (JSON.parse(req.text) as { id: string }).id;
    // The writer may ask, not decide.
    expect((await call(idp, 'POST', `/v1/delegations/${id}/approve`, writer.plaintext, { approver: 'alice' })).status).toBe(403);
    const ok = await call(idp, 'POST', `/v1/delegations/${id}/approve`, approverKey.plaintext, { approver: 'mallory' });
    expect(ok.status, ok.text).toBe(200);
    const d = JSON.parse((await call(idp, 'GET', `/v1/delegations/${id}`, (await keyFor('identity:read')).plaintext)).text) as { approver: string };
    expect(d.approver).toBe(`key:${approverKey.id}`);
  });

  it('re-provisioning an agent needs identity:admin and says which Membership VC it revoked', async () => {
    const writer = await keyFor('identity:write');
    expect((await call(idp, 'POST', '/v1/agents', writer.plaintext, { name: 'again-bot', role: 'worker', capabilities: [] })).status).toBe(201);
    const first = JSON.parse((await call(idp, 'POST', '/v1/agents/again-bot/provision', writer.plaintext, {})).text) as Json;
    expect(first.revokedMembershipJti).toBeUndefined();
    const refused = await call(idp, 'POST', '/v1/agents/again-bot/provision', writer.plaintext, {});
    expect(refused.status, refused.text).toBe(403);
    expect(refused.text).toMatch(/identity:admin/);
    const second = await call(idp, 'POST', '/v1/agents/again-bot/provision', (await keyFor('identity:write', 'identity:admin')).plaintext, {});
    expect(second.status, second.text).toBe(200);
    expect(JSON.parse(second.text).revokedMembershipJti).toBe(first.membershipJti);
    const log = await call(idp, 'GET', '/v1/revocations', BOOT);
    expect(log.text).toContain(first.membershipJti);
  });

  it('the stack works with auth on: examples applied through the bootstrap credential, /authz unaffected', async () => {
    const reg = await call(cp, 'GET', '/v1/registry/services', BOOT);
    expect(reg.text).toContain('research-agent');
    const emp = await call(idp, 'GET', '/v1/directory/employees?tenant=example', BOOT);
    expect(JSON.parse(emp.text).length).toBeGreaterThan(0);
    const d = await fetch(`http://127.0.0.1:${writ.ports.decision}/authz/index.html`, { headers: { [H.service]: 'web' } });
    expect(d.status).toBe(200);
  });
});
