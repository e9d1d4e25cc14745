/**
 * A deactivated human at every enforcement point (issue 43 item 4): a real token exchanged for a
 * delegation that human approved is used at `/authz` egress (`Authorization: Bearer`) and through
 * the forward proxy (`Proxy-Authorization`) of a real control plane that follows a real identity
 * authority over HTTP. The human is deactivated by a SCIM snapshot (`active: false`); within 1 s
 * the token is refused at both points (the standing feed the control plane already polls, never a
 * call per request) and introspection answers `active: false`; the exchange refuses that human.
 * Reactivated: the token issued before the deactivation stays refused (as Entra's "valid from" and
 * Okta's deactivation: access comes back through a new token), and a new token works.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { close as closeServer, listen } from '../lib/http.js';
import { setLogLevel } from '../lib/log.js';
import { entraUser } from '../identity/enterprise/directory/fixtures.js';
import { agent, delegation, exchangeDelegation, openBed, postForm, type OAuthBed } from '../identity/oauth/oauth-testing.js';
import type { AgentIdentity } from '../identity/client.js';
import { testBackends } from '../store/testing.js';
import type { RunningWithEgress } from './egress-gateway.js';
import { startFollowingPlane, type FollowingPlane } from './following-testing.js';

const HUMAN = 'alice@corp.test';
const alice = (active: boolean) => entraUser({ oid: '0a11ce00-0000-4000-8000-000000000001', upn: HUMAN, given: 'Alice', family: 'Doe', active });
const bob = entraUser({ oid: '0b0b0000-0000-4000-8000-000000000002', upn: 'bob@corp.test', given: 'Bob', family: 'Roe' });

describe.each(testBackends())('a deactivated human at every enforcement point on $name', (b) => {
  let bed: OAuthBed;
  let plane: FollowingPlane;
  let run: RunningWithEgress;
  let echo: http.Server;
  let me: AgentIdentity;
  let delegationVc: string;

  beforeAll(async () => {
    setLogLevel('error');
    bed = await openBed(b);
    echo = http.createServer((req, res) => void req.resume().on('end', () => res.end('upstream ok')));
    const port = await listen(echo, '127.0.0.1:0');
    const entries = [
      { name: 'crm', upstream: `127.0.0.1:${port}`, kind: 'service' as const },
      { name: 'hu-bot', upstream: 'hu-bot.agents.svc:8080', kind: 'agent' as const, egressAllow: ['crm'] },
    ];
    me = await agent(bed, 'hu-bot');
    for (const e of entries) bed.services.set(e.name, e);
    expect((await bed.api.post('/v1/directory/sync', { tenantId: 'default', users: [alice(true), bob] })).status).toBe(200);
    delegationVc = (await delegation(bed, 'hu-bot', { task: 'T-h', action: 'crm:read', resource: 'crm/*', approver: HUMAN })).vc!;
    plane = await startFollowingPlane(bed, entries);
    run = plane.run;
  }, 60_000);
  afterAll(async () => {
    await plane?.close();
    if (echo) await closeServer(echo);
    await bed?.close();
  });

  const exchange = () => exchangeDelegation(bed, me, delegationVc, 'crm');

  /** Status (and deny reason) at /authz egress and through the forward proxy, with the token as the agent's credential. */
  async function statuses(token: string): Promise<[string, string]> {
    const authz = await fetch(`http://127.0.0.1:${run.cp.decisionPort}/authz/crm`, {
      headers: { [H.actor]: 'hu-bot', [H.service]: 'crm', [H.task]: 'T-h', authorization: `Bearer ${token}` },
    });
    const body = await authz.text();
    const said = (status: number, reason: unknown) => (status === 200 ? '200' : `${status} ${String(reason)}`);
    const upstream = (bed.services.get('crm') as { upstream: string }).upstream;
    const proxied = await new Promise<string>((resolve, reject) => {
      const req = http.request({
        host: '127.0.0.1',
        port: run.gateway.port,
        path: `http://${upstream}/records/1`,
        headers: { host: upstream, 'proxy-authorization': `Bearer ${token}`, [H.actor]: 'hu-bot' },
      });
      req.on('response', (res) => res.resume().on('end', () => resolve(said(res.statusCode ?? 0, res.headers[H.denyReason]))));
      req.on('error', reject);
      req.end();
    });
    return [said(authz.status, authz.headers.get(H.denyReason) ?? (JSON.parse(body) as { reason?: string }).reason), proxied];
  }

  const introspected = async (token: string) => (await postForm(bed, '/oauth/introspect', { token })).json.active;
  const sync = async (active: boolean) =>
    expect((await bed.api.post('/v1/directory/sync', { tenantId: 'default', users: [alice(active), bob] })).status).toBe(200);

  it('deactivation refuses the token everywhere within 1 s; after reactivation only a new token works', async () => {
    const first = await exchange();
    expect(first.json).toMatchObject({ token_type: 'Bearer' });
    const token = first.json.access_token as string;
    // The control plane has loaded the key and polled both feeds.
    await expect.poll(() => statuses(token), { timeout: 5000, interval: 50 }).toEqual(['200', '200']);
    expect(await introspected(token)).toBe(true);

    await sync(false);
    const t0 = Date.now();
    const refused = (why: string) => [`401 ${why}`, `403 ${why}`];
    const deactivated = `invalid access token: human "${HUMAN}" is deactivated (directory)`;
    await expect.poll(() => statuses(token), { timeout: 1000, interval: 25 }).toEqual(refused(deactivated));
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(await introspected(token)).toBe(false);
    expect(await exchange()).toMatchObject({ status: 400, json: { error: 'invalid_grant' } });

    await sync(true);
    // Issued in a later second than the deactivation (a token of the same second is refused: deny on ambiguity).
    const deactivatedSec = Math.floor(t0 / 1000);
    await expect.poll(() => Math.floor(Date.now() / 1000) > deactivatedSec + 1, { timeout: 3000, interval: 50 }).toBe(true);
    const second = await exchange();
    expect(second.status).toBe(200);
    const fresh = second.json.access_token as string;
    await expect.poll(() => statuses(fresh), { timeout: 1000, interval: 25 }).toEqual(['200', '200']);
    expect(await statuses(token)).toEqual(refused(`invalid access token: token issued before human "${HUMAN}" was deactivated (directory)`));
    expect([await introspected(token), await introspected(fresh)]).toEqual([false, true]);
  });
});
