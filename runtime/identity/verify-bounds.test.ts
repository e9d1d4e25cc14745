/**
 * One oversized presentation must never starve the other requests (issue 15 item 1): a VP whose
 * `iss` is a 45,000-character did:key used to block the event loop 1-2 s per request (quadratic
 * base58 decode before any signature check). Over real sockets: the attack runs against
 * verify-presentation and against `/authz` of a control plane in vc mode (both in this process,
 * as in the all-in-one) from another process while an unrelated request's latency is measured.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../lib/brand.js';
import { setLogLevel } from '../lib/log.js';
import type { Store } from '../store/factory.js';
import { openTestPglite } from '../store/testing.js';
import { startControlPlane } from '../control-plane/server.js';
import { base58btcDecode, DID_KEY_CHARS, publicKeyFromDidKey } from './did.js';
import { startIdentityAuthority } from './server.js';
import { isVpJwt } from '../lib/jws.js';
import { loadConfig } from '../lib/settings.js';

/** The attacking process: tallies `status reason` answers per target. */
const ATTACKER = `
const { IDP_URL, AUTHZ_URL, VP, VP_HEADER, ATTACK_MS, AUTHZ_HEADERS } = process.env;
const end = Date.now() + Number(ATTACK_MS);
const tally = { verify: {}, authz: {} };
const add = (t, k) => (t[k] = (t[k] ?? 0) + 1);
const body = JSON.stringify({ vp: VP });
const verify = async () => {
  do {
    const r = await fetch(IDP_URL + '/v1/agents/verify-presentation', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    add(tally.verify, r.status + ' ' + (await r.json()).reason);
  } while (Date.now() < end);
};
const authz = async () => {
  do {
    const r = await fetch(AUTHZ_URL + '/authz/v1/chat/completions', { headers: { ...JSON.parse(AUTHZ_HEADERS), [VP_HEADER]: VP } });
    await r.arrayBuffer();
    add(tally.authz, String(r.status));
  } while (Date.now() < end);
};
await Promise.all([...Array.from({ length: 8 }, verify), ...Array.from({ length: 8 }, authz)]);
process.stdout.write(JSON.stringify(tally));
`;

const b64u = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
const attackVp = (issLen: number) =>
  `${b64u({ alg: 'EdDSA', typ: 'JWT' })}.${b64u({ iss: `did:key:z${'2'.repeat(issLen)}`, vp: {} })}.${randomBytes(64).toString('base64url')}`;

describe('oversized did:key in a presentation', () => {
  let idpStore: Store;
  let cpStore: Store;
  let idp: Awaited<ReturnType<typeof startIdentityAuthority>>;
  let cp: Awaited<ReturnType<typeof startControlPlane>>;
  let idpUrl: string;
  let authzUrl: string;

  beforeAll(async () => {
    setLogLevel('error');
    idpStore = await openTestPglite();
    idp = await startIdentityAuthority({
      store: idpStore,
      config: loadConfig({ IDP_ISSUER_HOST: 'idp.bounds.test', OTEL_SDK_DISABLED: 'true' }),
      addr: '127.0.0.1:0',
    });
    await idp.authority.whenReady();
    idpUrl = `http://127.0.0.1:${idp.port}`;
    cpStore = await openTestPglite();
    cp = await startControlPlane({
      store: cpStore,
      config: loadConfig({ AGENT_IDENTITY_MODE: 'vc', AGENT_IDP_URL: idpUrl }),
      decisionAddr: '127.0.0.1:0',
      mgmtAddr: '127.0.0.1:0',
      durableAudit: false,
    });
    await cp.plane.registry.upsert({ name: 'web', upstream: 'web.default.svc:80', public: true, kind: 'service' });
    await cp.plane.registry.upsert({ name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent', allowModels: ['gpt'] });
    await cp.plane.registry.upsert({ name: 'gpt', upstream: 'broker.default.svc:8080', kind: 'model' });
    authzUrl = `http://127.0.0.1:${cp.decisionPort}`;
  }, 120_000);
  afterAll(async () => {
    await cp?.close();
    await idp?.close();
    await cpStore?.close();
    await idpStore?.close();
  });

  it('is refused before any decoding, and unrelated requests keep their latency while it runs', async () => {
    const vp = attackVp(45_000);
    // An unrelated request: a public ingress decision and the authority's health, together.
    const unrelated = async () => {
      const t0 = performance.now();
      const [a, h] = await Promise.all([fetch(`${authzUrl}/authz/api/items`, { headers: { [H.service]: 'web' } }), fetch(`${idpUrl}/healthz`)]);
      expect([a.status, h.status]).toEqual([200, 200]);
      return performance.now() - t0;
    };
    await unrelated();

    // The attacker is another process: 8 loops against verify-presentation and 8 against /authz
    // (vc mode), for ATTACK_MS; it reports every answer it got.
    const attacker = spawn(process.execPath, ['--input-type=module', '-e', ATTACKER], {
      env: {
        ...process.env,
        IDP_URL: idpUrl,
        AUTHZ_URL: authzUrl,
        VP: vp,
        VP_HEADER: H.agentVp,
        ATTACK_MS: '1500',
        AUTHZ_HEADERS: JSON.stringify({ [H.actor]: 'bot', [H.service]: 'gpt', [H.onBehalfOf]: 'alice@example.com', [H.task]: 't' }),
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    attacker.stdout.on('data', (d) => (out += d));
    let attacking = true;
    const exited = new Promise<number | null>((r) => attacker.on('exit', (code) => ((attacking = false), r(code))));
    const latencies: number[] = [];
    do latencies.push(await unrelated());
    while (attacking);
    expect(await exited).toBe(0);
    const report = JSON.parse(out) as { verify: Record<string, number>; authz: Record<string, number> };
    expect(Object.keys(report.verify)).toEqual(['200 presentation issuer is not a valid Ed25519 did:key']);
    expect(Object.keys(report.authz)).toEqual(['403']);
    expect(Object.values(report.verify)[0]! + Object.values(report.authz)[0]!).toBeGreaterThanOrEqual(16);
    // Generous bounds for a shared, loaded machine (the issue's target is a p99 under 50 ms);
    // before the fix each attack held the loop 1-2 s and an unrelated request waited 10-15 s.
    latencies.sort((a, b) => a - b);
    expect(latencies[Math.floor(latencies.length / 2)]).toBeLessThan(150);
    expect(latencies[latencies.length - 1]).toBeLessThan(750);
  }, 60_000);

  it('did:key and base58 decoding are bounded before any work', () => {
    expect(() => publicKeyFromDidKey(`did:key:z${'2'.repeat(45_000)}`)).toThrow(/length/);
    expect(() => base58btcDecode('2'.repeat(10_000))).toThrow(/too long/);
    expect(DID_KEY_CHARS).toBe(56);
    const t0 = performance.now();
    for (let i = 0; i < 100; i++) expect(isVpJwt(attackVp(45_000))).toBe(true);
    expect(isVpJwt(attackVp(70_000))).toBe(false);
    expect(performance.now() - t0).toBeLessThan(2_000);
  });
});
