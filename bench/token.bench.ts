/**
 * Writ access-token verification at an enforcement point (runtime/identity/oauth/), each figure as
 * a ratio of raw Ed25519 verification (node:crypto `verify` of the same token's signing input)
 * measured in the same rounds, interleaved:
 *
 *   fresh   `verifyAccessToken` on distinct tokens (parse, header, issuer, signature, claims,
 *           lifetime): the cost of a token first seen. Target >= 0.8x.
 *   cached  `createTokenVerifier().check` of a token already verified (lifetime, revocation and
 *           standing still read on each use): no signature verification; the row shows how many
 *           the whole cached run made (target: 0).
 *
 * (b) `/authz` egress in header mode carrying a client_credentials access token for the target
 *     (`Authorization: Bearer`, checked offline by the control plane's token follower, which read
 *     the key from a real identity authority's JWKS and follows its revocation list) against the
 *     same egress without it, on one control plane, interleaved rounds. Target >= 0.8x.
 *
 *   npx tsx bench/token.bench.ts   (BENCH_CRYPTO_SECONDS=2 per figure per round, BENCH_ROUNDS=3,
 *                                   BENCH_SECONDS=5 BENCH_WARMUP=1 BENCH_CONNECTIONS=50, BENCH_PARTS=verify,authz)
 */
import { randomUUID, verify } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { SignJWT } from 'jose';
import { H } from '../runtime/lib/brand.js';
import { loadIdentity, type AgentIdentity } from '../runtime/identity/client.js';
import { makeIssuer } from '../runtime/identity/testkit.js';
import { answeredCpu, codeUnderTest, configFor, loadAutocannon, median, serverCpuUs, startServer } from './lib.js';

const SECONDS = Number(process.env.BENCH_CRYPTO_SECONDS ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const HTTP_SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 1);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const PARTS = new Set((process.env.BENCH_PARTS || 'verify,authz').split(','));
const POOL = 5000;
const code = codeUnderTest();
const { mintAccessToken, verifyAccessToken } = (await import(code.from('identity/oauth/token'))) as typeof import('../runtime/identity/oauth/token.js');
const { createTokenVerifier } = (await import(code.from('identity/oauth/verifier'))) as typeof import('../runtime/identity/oauth/verifier.js');
const { parseJws } = (await import(code.from('lib/jws'))) as typeof import('../runtime/lib/jws.js');

const ISS = 'http://idp.bench.test';
const issuer = makeIssuer('idp.bench.test');
const keyFor = (kid: unknown) => (kid === issuer.kid ? issuer.publicKey : undefined);
const nowSec = Math.floor(Date.now() / 1000);

async function pool(): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < POOL; i++) {
    out.push(
      await mintAccessToken(issuer, {
        iss: ISS,
        sub: 'alice@example.com',
        aud: 'crm',
        act: { sub: 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK', name: 'agent-1' },
        client_id: 'agent-1',
        membership_jti: 'urn:uuid:membership-1',
        scope: 'crm:read',
        jti: `urn:uuid:bench-${i}`,
        iat: nowSec,
        exp: nowSec + 3600,
        delegation: { id: `d-${i}`, vc_jti: `urn:uuid:vc-${i}`, task: 'T-1', action: 'crm:read', resource: 'crm/acme/*' },
      }),
    );
  }
  return out;
}

/** Operations per second of `op(i)` over SECONDS. */
function rate(op: (i: number) => boolean): number {
  const end = performance.now() + SECONDS * 1000;
  let n = 0;
  let ok = true;
  while (performance.now() < end) {
    for (let k = 0; k < 200; k++) ok = op(n++) && ok;
  }
  if (!ok) throw new Error('a verification failed');
  return n / SECONDS;
}

async function verifyPart(): Promise<void> {
  const tokens = await pool();
  const parts = tokens.map((t) => parseJws(t)!);
  const state = { isRevoked: () => false, agentDenial: () => undefined };
  const cachedVerifier = createTokenVerifier({ issuer: ISS, keyFor, state });
  const hot = tokens[0]!;
  cachedVerifier.check(hot);
  const before = cachedVerifier.signatureChecks();

  const raw: number[] = [];
  const fresh: number[] = [];
  const cached: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    raw.push(rate((i) => verify(null, parts[i % POOL]!.signingInput, issuer.publicKey, parts[i % POOL]!.signature)));
    fresh.push(rate((i) => verifyAccessToken(tokens[i % POOL]!, { issuer: ISS, keyFor, nowSec }).ok));
    cached.push(rate(() => cachedVerifier.check(hot).ok));
  }
  const base = median(raw);
  const fmt = (n: number) => `${Math.round(n).toLocaleString('en-US')}/s`;
  console.log(`token verification (${code.label}), ${ROUNDS} rounds x ${SECONDS}s, medians`);
  console.log(`  raw Ed25519 verify       ${fmt(base)}   1.00x`);
  console.log(`  fresh token              ${fmt(median(fresh))}   ${(median(fresh) / base).toFixed(2)}x   (target >= 0.80x)`);
  console.log(
    `  cached token             ${fmt(median(cached))}   ${(median(cached) / base).toFixed(2)}x   signature verifications: ${cachedVerifier.signatureChecks() - before}`,
  );
}

// ---------------------------------------------------------------------------------------------
// (b) child: an identity authority and a header-mode control plane following its tokens.

interface Ports {
  authz: number;
  token: string;
}

async function serve(): Promise<void> {
  const { openStore } = (await import(code.from('store/factory'))) as typeof import('../runtime/store/factory.js');
  const { startControlPlane } = (await import(code.from('control-plane/server'))) as typeof import('../runtime/control-plane/server.js');
  const { startIdentityAuthority } = (await import(code.from('identity/server'))) as typeof import('../runtime/identity/server.js');
  const { setLogLevel } = (await import(code.from('lib/log'))) as typeof import('../runtime/lib/log.js');
  setLogLevel('error');
  const services = [
    { name: 'bot', upstream: 'bot.agents.svc:8080', kind: 'agent' as const, allowTools: ['search'] },
    { name: 'search', upstream: 'search.tools.svc:8080', kind: 'tool' as const },
  ];
  const idpStore = await openStore({ backend: 'memory' });
  const idp = await startIdentityAuthority({
    store: idpStore,
    ...(await configFor(code.from, { IDP_ISSUER_HOST: 'idp.bench.test', OTEL_SDK_DISABLED: 'true' })),
    addr: '127.0.0.1:0',
  });
  await idp.authority.whenReady();
  idp.authority.useRegistry({
    entry: async (n) => services.find((x) => x.name === n),
    byResource: async (url) => services.find((x) => (x as { oauthResource?: string }).oauthResource === url),
  });
  const idpUrl = `http://127.0.0.1:${idp.port}`;
  const json = (body: unknown) => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  await fetch(`${idpUrl}/v1/agents`, json({ name: 'bot', role: 'worker', capabilities: [] }));
  const bot = (await (await fetch(`${idpUrl}/v1/agents/bot/provision`, { method: 'POST' })).json()) as AgentIdentity;
  const now = Math.floor(Date.now() / 1000);
  const assertion = await new SignJWT({})
    .setProtectedHeader({ alg: 'EdDSA' })
    .setIssuer('bot')
    .setSubject('bot')
    .setAudience('https://idp.bench.test')
    .setJti(randomUUID())
    .setIssuedAt(now)
    .setExpirationTime(now + 60)
    .sign(loadIdentity(bot).key);
  const form = new URLSearchParams({
    grant_type: 'client_credentials',
    client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
    client_assertion: assertion,
    audience: 'search',
  });
  const t = (await (
    await fetch(`${idpUrl}/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: form.toString() })
  ).json()) as { access_token?: string };
  if (!t.access_token) throw new Error(`token endpoint refused: ${JSON.stringify(t)}`);
  const store = await openStore({ backend: 'memory' });
  const cp = await startControlPlane({
    store,
    ...(await configFor(code.from, { AGENT_IDP_URL: idpUrl, OTEL_SDK_DISABLED: 'true' })),
    decisionAddr: '127.0.0.1:0',
    mgmtAddr: '127.0.0.1:0',
    durableAudit: false,
  });
  for (const x of services) await cp.plane.registry.upsert(x);
  process.send?.({ authz: cp.decisionPort, token: t.access_token } satisfies Ports);
  process.on('message', async (m) => {
    if (answeredCpu(m)) return;
    await cp.close();
    await store.close();
    await idp.close();
    await idpStore.close();
    process.exit(0);
  });
}

async function authzPart(): Promise<void> {
  const autocannon = await loadAutocannon();
  // BENCH_PROFILE=<dir>: the server process writes a V8 CPU profile there (node --cpu-prof).
  const profile = process.env.BENCH_PROFILE;
  const { child, ready } = await startServer<Ports>(fileURLToPath(import.meta.url), { execArgv: profile ? ['--cpu-prof', '--cpu-prof-dir', profile] : [] });
  try {
    const headers = { [H.actor]: 'bot', [H.service]: 'search', [H.onBehalfOf]: 'alice@example.com', [H.task]: 'bench' };
    const withToken = { ...headers, authorization: `Bearer ${ready.token}` };
    const url = `http://127.0.0.1:${ready.authz}/authz/search`;
    // The token is really checked: an altered one is refused, the real one allowed (once the key is loaded).
    const [th, tp] = ready.token.split('.');
    for (let i = 0; i < 50 && (await fetch(url, { headers: withToken })).status !== 200; i++) await new Promise((r) => setTimeout(r, 100));
    const altered = (await fetch(url, { headers: { ...headers, authorization: `Bearer ${th}.${tp}.${'A'.repeat(86)}` } })).status;
    const good = (await fetch(url, { headers: withToken })).status;
    if (altered !== 401 || good !== 200) throw new Error(`token probe: altered ${altered}, good ${good}`);
    // Each run: req/s, and the server process's CPU per request (user + system, µs).
    const run = async (h: Record<string, string>) => {
      const o = { url, connections: CONNECTIONS, pipelining: 1, headers: h };
      await autocannon({ ...o, duration: WARMUP });
      const before = await serverCpuUs(child);
      const r = await autocannon({ ...o, duration: HTTP_SECONDS });
      const cpu = (await serverCpuUs(child)) - before;
      if (r.errors || r.non2xx) throw new Error(`${r.errors} errors, ${r.non2xx} non-2xx`);
      return { rps: r.requests.average, cpuUs: cpu / r.requests.total };
    };
    const plain: { rps: number; cpuUs: number }[] = [];
    const token: { rps: number; cpuUs: number }[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const order = i % 2 === 0 ? [plain, token] : [token, plain];
      for (const into of order) into.push(await run(into === plain ? headers : withToken));
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const p = mean(plain.map((x) => x.rps));
    const t = mean(token.map((x) => x.rps));
    const cpu = (xs: { cpuUs: number }[]) => `server CPU ${mean(xs.map((x) => x.cpuUs)).toFixed(0)} µs/req`;
    console.log(
      `token bench (b): /authz egress, header mode, ${CONNECTIONS} connections, ${HTTP_SECONDS} s after ${WARMUP} s, mean of ${ROUNDS} interleaved runs; ${code.label}`,
    );
    console.log(`  without a token                ${Math.round(p)} req/s   1.00x   ${cpu(plain)}`);
    console.log(`  with an access token           ${Math.round(t)} req/s   ${(t / p).toFixed(2)}x   ${cpu(token)}   (target >= 0.80x)`);
  } finally {
    child.send('stop');
    await new Promise((r) => child.once('exit', r));
  }
}

if (process.argv.includes('--serve')) await serve();
else {
  if (PARTS.has('verify')) await verifyPart();
  if (PARTS.has('authz')) await authzPart();
}
