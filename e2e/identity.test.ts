/**
 * End to end, identity: a real identity authority and a real control plane on loopback sockets,
 * wired by AGENT_IDP_URL (the HTTP identity client with its VP cache and revocation watcher), in
 * `vc` identity mode. Provision an agent -> VP -> /authz egress allowed -> revoke its Membership
 * VC -> denied within a second. Regulated target: 401 needs-approval -> request and approve a
 * delegation -> 200 with delegationId/delegationExp in the audit row -> revoke the delegation VC
 * -> denied. Runs on PGlite in memory, and on PostgreSQL too when TEST_DATABASE_URL is set; and
 * with the per-request identity calls (verify-presentation, delegation check) over HTTP (a control
 * plane of its own) and in process (the all-in-one's `inProcessIdentity`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { startControlPlane, type RunningControlPlane } from '../runtime/control-plane/server.js';
import { inProcessIdentity } from '../runtime/identity/in-process.js';
import { startIdentityAuthority } from '../runtime/identity/server.js';
import { presentationFor, type AgentIdentity } from '../runtime/identity/client.js';
import type { AuditRecord } from '../runtime/control-plane/types.js';
import { jtiOf } from '../runtime/control-plane/proxy/testkit.js';
import type { Store } from '../runtime/store/factory.js';
import { testBackends } from '../runtime/store/testing.js';
import { loadConfig } from '../runtime/lib/settings.js';

const json = (body: unknown): RequestInit => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** Polls `probe` until it returns a status other than `while`, for at most `ms`. */
async function until(probe: () => Promise<number>, whileStatus: number, ms: number): Promise<{ status: number; elapsed: number }> {
  const t0 = Date.now();
  let status = await probe();
  while (status === whileStatus && Date.now() - t0 < ms) {
    await new Promise((r) => setTimeout(r, 25));
    status = await probe();
  }
  return { status, elapsed: Date.now() - t0 };
}

const cases = testBackends().flatMap((b) => [
  { b, name: b.name, verify: 'over HTTP' },
  { b, name: b.name, verify: 'in process' },
]);

describe.each(cases)('identity end to end on $name, identity calls $verify', ({ b, verify }) => {
  let idpStore: Store;
  let cpStore: Store;
  let idp: Awaited<ReturnType<typeof startIdentityAuthority>>;
  let cp: RunningControlPlane;
  let idpUrl: string;
  let mgmt: string;
  let authz: string;
  let agent: AgentIdentity;

  const decide = (headers: Record<string, string>) => fetch(`${authz}/authz`, { headers });
  const auditRows = async (): Promise<AuditRecord[]> => (await (await fetch(`${mgmt}/v1/audit?limit=1000`)).json()) as AuditRecord[];

  beforeAll(async () => {
    idpStore = await b.open();
    cpStore = await b.open();
    idp = await startIdentityAuthority({ store: idpStore, config: loadConfig({ IDP_ISSUER_HOST: 'idp.e2e' }), addr: '127.0.0.1:0' });
    await idp.authority.whenReady();
    idpUrl = `http://127.0.0.1:${idp.port}`;
    cp = await startControlPlane({
      store: cpStore,
      config: loadConfig({ AGENT_IDP_URL: idpUrl, AGENT_IDENTITY_MODE: 'vc', AGENT_IDP_REVOCATION_POLL_MS: '200' }),
      ...(verify === 'in process' ? { localIdentity: inProcessIdentity(idp.authority) } : {}),
      decisionAddr: '127.0.0.1:0',
      mgmtAddr: '127.0.0.1:0',
    });
    mgmt = `http://127.0.0.1:${cp.mgmtPort}`;
    authz = `http://127.0.0.1:${cp.decisionPort}`;
    for (const s of [
      { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowModels: ['gpt'], allowTools: ['ledger'] },
      { name: 'gpt', upstream: 'broker.default.svc:8080', kind: 'model' },
      { name: 'ledger', upstream: 'ledger.tools.svc:8080', kind: 'tool', dataClass: 'regulated' },
    ]) {
      expect((await fetch(`${mgmt}/v1/registry/services`, json(s))).status).toBe(200);
    }
    expect(
      (await fetch(`${idpUrl}/v1/agents`, json({ name: 'bot', role: 'worker', capabilities: [{ action: 'ledger:read', resource: 'acct/*' }] }))).status,
    ).toBe(201);
    const prov = await fetch(`${idpUrl}/v1/agents/bot/provision`, { method: 'POST' });
    expect(prov.status).toBe(200);
    agent = (await prov.json()) as AgentIdentity;
  });
  afterAll(async () => {
    await cp?.close();
    await idp?.close();
    await cpStore?.close();
    await idpStore?.close();
  });

  it('vc mode: a VP is required, verified, and must name the actor', async () => {
    const vp = await presentationFor(agent, { ttlSeconds: 600 });
    const ok = await decide({ [H.actor]: 'bot', [H.service]: 'gpt', [H.agentVp]: vp });
    expect(ok.status).toBe(200);
    expect(ok.headers.get(H.actor)).toBe('bot');
    expect(ok.headers.get(H.agentDid)).toBe(agent.did);
    expect((await decide({ [H.actor]: 'bot', [H.service]: 'gpt' })).status).toBe(403);
    expect((await decide({ [H.actor]: 'bot', [H.service]: 'gpt', [H.agentVp]: 'garbage' })).status).toBe(403);
    // Another agent's VP does not speak for "bot".
    expect(
      (await fetch(`${idpUrl}/v1/agents`, json({ name: 'other', role: 'worker', capabilities: [{ action: 'ledger:read', resource: 'acct/*' }] }))).status,
    ).toBe(201);
    const other = (await (await fetch(`${idpUrl}/v1/agents/other/provision`, { method: 'POST' })).json()) as AgentIdentity;
    const mismatch = await decide({ [H.actor]: 'bot', [H.service]: 'gpt', [H.agentVp]: await presentationFor(other) });
    expect(mismatch.status).toBe(403);
    // A VP minted for another audience is not an egress VP.
    expect((await decide({ [H.actor]: 'bot', [H.service]: 'gpt', [H.agentVp]: await presentationFor(agent, { audience: 'elsewhere' }) })).status).toBe(403);
  });

  it('regulated: 401 needs-approval, approved delegation 200 with its id and expiry audited, revoked delegation denied', async () => {
    const vp = await presentationFor(agent, { ttlSeconds: 600 });
    const h = { [H.actor]: 'bot', [H.service]: 'ledger', [H.agentVp]: vp, [H.task]: 'close-books', [H.action]: 'ledger:read', [H.resource]: 'acct/42' };
    const no = await decide(h);
    expect(no.status).toBe(401);
    expect(no.headers.get(H.needsApproval)).toBe('true');

    const req = await fetch(
      `${idpUrl}/v1/delegations/request`,
      json({ actorName: 'bot', task: 'close-books', action: 'ledger:read', resource: 'acct/*', reason: 'month end', ttlSeconds: 900 }),
    );
    expect(req.status).toBe(201);
    const { id } = (await req.json()) as { id: string };
    const appr = await fetch(`${idpUrl}/v1/delegations/${id}/approve`, json({ approver: 'controller@example.com' }));
    expect(appr.status).toBe(200);
    const approved = (await appr.json()) as { vcJti: string; notAfter: number };

    const yes = await decide(h);
    expect(yes.status).toBe(200);
    const row = (await auditRows()).filter((r) => r.service === 'ledger' && r.allow).at(-1);
    expect(row).toMatchObject({ action: 'tool.read', actor: 'bot', task: 'close-books', delegationId: id, delegationExp: approved.notAfter });

    expect((await fetch(`${idpUrl}/v1/revoke`, json({ vcJti: approved.vcJti }))).status).toBe(200);
    const after = await decide(h);
    expect(after.status).toBe(401);
    expect(after.headers.get(H.needsApproval)).toBe('true');
    expect(await (await fetch(`${mgmt}/v1/audit/verify`)).json()).toMatchObject({ ok: true });
  });

  it('revoking the Membership VC cuts egress within one second', async () => {
    const vp = await presentationFor(agent, { ttlSeconds: 600 });
    const probe = async () => (await decide({ [H.actor]: 'bot', [H.service]: 'gpt', [H.agentVp]: vp })).status;
    expect(await probe()).toBe(200);
    expect(await probe()).toBe(200); // now served from the VP cache
    expect((await fetch(`${idpUrl}/v1/revoke`, json({ vcJti: jtiOf(agent.membershipVc) }))).status).toBe(200);
    const { status, elapsed } = await until(probe, 200, 3000);
    expect(status).toBe(403);
    expect(elapsed).toBeLessThan(1000);
    // A fresh VP over the same revoked Membership VC is refused too.
    expect((await decide({ [H.actor]: 'bot', [H.service]: 'gpt', [H.agentVp]: await presentationFor(agent) })).status).toBe(403);
  });
});
