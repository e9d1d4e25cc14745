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
 *   npx tsx bench/token.bench.ts   (BENCH_CRYPTO_SECONDS=2 per figure per round, BENCH_ROUNDS=3)
 */
import { verify } from 'node:crypto';
import { makeIssuer } from '../runtime/identity/testkit.js';
import { codeUnderTest, median } from './lib.js';

const SECONDS = Number(process.env.BENCH_CRYPTO_SECONDS ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
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
