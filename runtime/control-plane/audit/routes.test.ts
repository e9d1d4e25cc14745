/**
 * The audit routes over real HTTP, and `writ audit verify` against them: whole-store verify,
 * checkpoints and their key, the consistency check, export and its offline verification.
 */
import type { Server } from 'node:http';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createAdaptorServer } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { close, listen } from '../../lib/http.js';
import { setLogLevel } from '../../lib/log.js';
import type { Store } from '../../store/factory.js';
import { testBackends } from '../../store/testing.js';
import { main } from '../../cli/main.js';
import { openAuditChain, type AuditChain } from './chain.js';
import { AUDIT_KEY_PATH, type Jwks, type SignedCheckpoint } from './checkpoint.js';
import { verifyExport } from './export.js';
import { auditRoutes } from './routes.js';

setLogLevel('error');

async function* linesOf(text: string) {
  yield* text.split('\n');
}

async function cli(args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['audit', ...args], { out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

describe.each(testBackends())('audit routes on $name', (b) => {
  let store: Store;
  let chain: AuditChain;
  let server: Server;
  let base: string;
  const dir = mkdtempSync(join(tmpdir(), 'audit-routes-'));

  beforeAll(async () => {
    store = await b.open();
    chain = await openAuditChain(store, { chain: 'http', proof: { checkpointEvery: 300, checkpointIntervalMs: 3_600_000, verifyIntervalMs: 0 } });
    for (let i = 1; i <= 700; i++) chain.append({ action: 'authz', subject: `u${i}`, service: 's', allow: true, reason: 'ok', rule: 'inline' });
    await chain.flush();
    await chain.proof!.checkpoint();
    server = createAdaptorServer({ fetch: auditRoutes(chain).fetch }) as Server;
    base = `http://127.0.0.1:${await listen(server, '127.0.0.1:0')}`;
  });
  afterAll(async () => {
    await close(server);
    await chain.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('GET /v1/audit/verify without parameters is exactly SPEC 4.3 (the ring); with a range it verifies the store', async () => {
    expect(await (await fetch(`${base}/v1/audit/verify`)).json()).toEqual({ ok: true, brokenAtSeq: -1 });
    expect(await (await fetch(`${base}/v1/audit/verify?from=1`)).json()).toMatchObject({ ok: true, brokenAtSeq: -1, checked: 700, lastSeq: 700 });
    expect(await (await fetch(`${base}/v1/audit/verify?from=100&to=199`)).json()).toMatchObject({ ok: true, checked: 100, from: 100, lastSeq: 199 });
    expect(await (await fetch(`${base}/v1/audit/verify?chain=nobody`)).json()).toMatchObject({ ok: true, checked: 0 });
    for (const q of ['from=0', 'from=x', 'to=-1', 'from=5&to=2', 'from=1.5', `chain=${'c'.repeat(201)}`]) {
      const r = await fetch(`${base}/v1/audit/verify?${q}`);
      expect(r.status, q).toBe(400);
      expect(((await r.json()) as { error: string }).error, q).toMatch(/from|to|chain/);
    }
  });

  it('serves checkpoints and their key; POST /v1/audit/consistency checks a kept one', async () => {
    const jwks = (await (await fetch(`${base}${AUDIT_KEY_PATH}`)).json()) as Jwks;
    expect(jwks.keys[0]).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig' });
    const cps = (await (await fetch(`${base}/v1/audit/checkpoints`)).json()) as SignedCheckpoint[];
    expect(cps.length).toBeGreaterThanOrEqual(2);
    expect(cps[cps.length - 1]).toMatchObject({ chainId: 'http', seq: 700, kid: jwks.keys[0]!.kid });
    const post = (body: unknown) =>
      fetch(`${base}/v1/audit/consistency`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect(await (await post({ checkpoint: cps[0]!.jws })).json()).toMatchObject({ ok: true, checkpoint: { seq: cps[0]!.seq } });
    // A checkpoint with its payload altered does not verify: 400, never a 500.
    const [h, , s] = cps[0]!.jws.split('.');
    const forged = `${h}.${Buffer.from(JSON.stringify({ chainId: 'http', seq: 5, hash: 'f'.repeat(64), time: 'x' })).toString('base64url')}.${s}`;
    for (const bad of [{ checkpoint: forged }, { checkpoint: 'nope' }, { checkpoint: 5 }, {}]) expect((await post(bad)).status).toBe(400);
    expect((await fetch(`${base}/v1/audit/consistency`, { method: 'POST', body: '{' })).status).toBe(400);
  });

  it('export as JSON lines verifies offline; `writ audit verify` proves the live log extends a kept checkpoint', async () => {
    const text = await (await fetch(`${base}/v1/audit/export`)).text();
    const lines = text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string });
    expect(lines[0]).toMatchObject({ type: 'header', chainId: 'http', from: 1 });
    expect(lines.filter((l) => l.type === 'record')).toHaveLength(700);
    expect(await verifyExport(linesOf(text))).toMatchObject({ ok: true, checked: 700, provenThrough: 700 });
    // A range: anchored by the record before it, proven up to the last checkpoint inside it.
    const cps = (await (await fetch(`${base}/v1/audit/checkpoints`)).json()) as SignedCheckpoint[];
    const inside = Math.max(0, ...cps.map((c) => c.seq).filter((q) => q > 200 && q <= 600));
    const part = await (await fetch(`${base}/v1/audit/export?from=201&to=600`)).text();
    expect(await verifyExport(linesOf(part))).toMatchObject({ ok: true, checked: 400, from: 201, lastSeq: 600, provenThrough: inside });
    const keptFile = join(dir, 'kept.json');
    writeFileSync(keptFile, JSON.stringify(cps[cps.length - 1]));
    const exportFile = join(dir, 'export.jsonl');
    writeFileSync(exportFile, text);

    const ok = await cli(['verify', '--checkpoint', keptFile, '--server', base]);
    expect(ok.code, ok.err).toBe(0);
    expect(JSON.parse(ok.out)).toMatchObject({ ok: true, brokenAtSeq: -1, lastSeq: 700, provenThrough: 700 });
    expect((await cli(['verify', '--export', exportFile, '--checkpoint', keptFile])).code).toBe(0);
    const latest = await cli(['checkpoint', '--server', base]);
    expect(JSON.parse(latest.out)).toMatchObject({ seq: 700 });

    // A record changed in the exported file: offline verification finds it.
    const tampered = text.replace('"subject":"u123"', '"subject":"eve"');
    writeFileSync(join(dir, 'tampered.jsonl'), tampered);
    const bad = await cli(['verify', '--export', join(dir, 'tampered.jsonl')]);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.out)).toMatchObject({ ok: false, brokenAtSeq: 123, reason: 'hash' });
    // Truncated: the kept checkpoint at 700 is never reached.
    writeFileSync(
      join(dir, 'short.jsonl'),
      text
        .split('\n')
        .filter((l) => !l.includes('"seq":700,'))
        .join('\n'),
    );
    const short = await cli(['verify', '--export', join(dir, 'short.jsonl'), '--checkpoint', keptFile]);
    expect(JSON.parse(short.out)).toMatchObject({ ok: false, brokenAtSeq: 700, reason: 'truncated' });
    // Another key set pinned: the kept checkpoint does not verify with it.
    writeFileSync(
      join(dir, 'other-key.json'),
      JSON.stringify({ keys: [{ kty: 'OKP', crv: 'Ed25519', x: Buffer.alloc(32, 7).toString('base64url'), kid: 'k' }] }),
    );
    const wrongKey = await cli(['verify', '--export', exportFile, '--checkpoint', keptFile, '--key', join(dir, 'other-key.json')]);
    expect(JSON.parse(wrongKey.out)).toMatchObject({ ok: false, reason: 'signature' });
    expect(readFileSync(keptFile, 'utf8')).toContain('"jws"');
    // Usage errors are 2.
    expect((await cli(['verify'])).code).toBe(2);
    expect((await cli(['frobnicate'])).code).toBe(2);
  });

  it('the live log, altered in the store, fails `writ audit verify` at the altered seq', async () => {
    const cps = (await (await fetch(`${base}/v1/audit/checkpoints`)).json()) as SignedCheckpoint[];
    const keptFile = join(dir, 'kept2.json');
    writeFileSync(keptFile, cps[cps.length - 1]!.jws);
    await store.exec(`update audit_log set reason = 'forged' where chain = 'http' and seq = 42`);
    try {
      const r = await cli(['verify', '--checkpoint', keptFile, '--server', base]);
      expect(r.code).toBe(1);
      expect(JSON.parse(r.out)).toMatchObject({ ok: false, brokenAtSeq: 42, reason: 'hash' });
      expect(await (await fetch(`${base}/v1/audit/verify?from=1`)).json()).toMatchObject({ ok: false, brokenAtSeq: 42 });
    } finally {
      await store.exec(`update audit_log set reason = 'ok' where chain = 'http' and seq = 42`);
    }
  });
});
