/**
 * Audit routes of the management listener (SPEC 4.3 plus issue 16), a Hono sub-app mounted with
 * `app.route('/', auditRoutes(chain))`:
 *
 *   GET  /v1/audit?limit=N            stored records, newest last (SPEC 4.3)
 *   GET  /v1/audit/verify             the ring, exactly SPEC 4.3: {ok, brokenAtSeq}
 *   GET  /v1/audit/verify?from=&to=&chain=   whole-store verification of a range, streamed
 *   GET  /v1/audit/checkpoints?chain=&from=&to=&limit=   signed checkpoints, oldest first
 *   POST /v1/audit/consistency {checkpoint: <jws>}       does the log extend a kept checkpoint?
 *   GET  /v1/audit/export?chain=&from=&to=               JSON lines with checkpoints (export.ts)
 *   GET  /.well-known/writ-audit-key  the checkpoint key set (JWKS)
 */
import { Hono, type Context } from 'hono';
import { errMsg, logger } from '../../lib/log.js';
import type { AuditChain, AuditReader } from './chain.js';
import { DEFAULT_RECENT, RING_SIZE } from './chain.js';
import { AUDIT_KEY_PATH } from './checkpoint.js';
import { exportLines } from './export.js';

const log = logger('audit.routes');

/** How long GET /v1/audit waits for records appended so far to be stored before answering. */
const SERVE_FLUSH_MS = 1000;

/** What the routes read: the ring reader, plus the stored-chain parts when the chain has a store. */
export type AuditRoutesReader = AuditReader & Partial<Pick<AuditChain, 'served' | 'flush' | 'proof' | 'chainId'>>;

class BadQuery extends Error {}

/** A positive integer query parameter, or undefined when absent; BadQuery otherwise. */
function seqParam(c: Context, name: string): number | undefined {
  const raw = c.req.query(name);
  if (raw === undefined) return undefined;
  if (!/^\d{1,15}$/.test(raw) || Number(raw) < 1) throw new BadQuery(`${name} must be an integer >= 1 (got ${JSON.stringify(raw)})`);
  return Number(raw);
}

function chainParam(c: Context, fallback: string | undefined): string {
  const raw = c.req.query('chain') ?? fallback ?? 'default';
  if (!raw || raw.length > 200) throw new BadQuery('chain must be 1-200 characters');
  return raw;
}

export function auditRoutes(audit: AuditRoutesReader): Hono {
  const app = new Hono();

  app.onError((e, c) => {
    if (e instanceof BadQuery) return c.json({ error: e.message }, 400);
    log.error('audit route failed', { err: errMsg(e), path: c.req.path });
    return c.json({ error: 'audit store unavailable' }, 503);
  });

  app.get('/v1/audit', async (c) => {
    const raw = c.req.query('limit');
    let limit = DEFAULT_RECENT;
    if (raw !== undefined) {
      if (!/^\d+$/.test(raw) || Number(raw) < 1) return c.json({ error: `limit must be an integer >= 1 (got ${JSON.stringify(raw)})` }, 400);
      limit = Math.min(Number(raw), RING_SIZE);
    }
    if (!audit.served) return c.json(audit.recent(limit));
    // Only stored records are served (a served seq never names another record after a crash);
    // give what was appended so far a moment to be stored.
    await audit.flush?.(SERVE_FLUSH_MS).catch(() => {});
    return c.json(audit.served(limit));
  });

  app.get('/v1/audit/verify', async (c) => {
    const q = c.req.query();
    if (q.from === undefined && q.to === undefined && q.chain === undefined) return c.json(audit.verify());
    const from = seqParam(c, 'from');
    const to = seqParam(c, 'to');
    const chain = chainParam(c, audit.chainId);
    if (from !== undefined && to !== undefined && to < from) throw new BadQuery('to must be >= from');
    if (!audit.proof) return c.json({ error: 'no audit store: whole-store verification needs a durable chain' }, 503);
    // What was appended so far is covered too (given a moment to be stored).
    if (chain === audit.chainId) await audit.flush?.(SERVE_FLUSH_MS).catch(() => {});
    return c.json(await audit.proof.verify({ chain, from, to }));
  });

  app.get('/v1/audit/checkpoints', async (c) => {
    const from = seqParam(c, 'from');
    const to = seqParam(c, 'to');
    const limit = Math.min(seqParam(c, 'limit') ?? 1000, 10_000);
    const chain = chainParam(c, audit.chainId);
    if (!audit.proof) return c.json([]);
    return c.json(await audit.proof.checkpoints(chain, { from, to, limit }));
  });

  app.post('/v1/audit/consistency', async (c) => {
    if (!audit.proof) return c.json({ error: 'no audit store: consistency checks need a durable chain' }, 503);
    let body: unknown;
    try {
      body = JSON.parse(await c.req.text());
    } catch {
      return c.json({ error: 'malformed JSON body' }, 400);
    }
    const jws = (body as { checkpoint?: unknown } | null)?.checkpoint;
    if (typeof jws !== 'string') return c.json({ error: 'checkpoint must be the compact JWS string of a checkpoint' }, 400);
    try {
      return c.json(await audit.proof.consistency(jws));
    } catch (e) {
      const m = errMsg(e);
      return c.json({ error: m }, /pruned history/.test(m) ? 422 : 400);
    }
  });

  app.get('/v1/audit/export', async (c) => {
    const from = seqParam(c, 'from') ?? 1;
    const to = seqParam(c, 'to');
    if (to !== undefined && to < from) throw new BadQuery('to must be >= from');
    const chain = chainParam(c, audit.chainId);
    const proof = audit.proof;
    if (!proof) return c.json({ error: 'no audit store: export needs a durable chain' }, 503);
    const pruned = (await proof.checkpoints(chain, {})).filter((cp) => cp.prune).pop();
    const it = exportLines({ store: proof.store, jwks: proof.jwks(), pruned }, chain, from, to);
    const enc = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      async pull(ctl) {
        try {
          // Up to 256 lines per chunk.
          let chunk = '';
          for (let i = 0; i < 256; i++) {
            const n = await it.next();
            if (n.done) {
              if (chunk) ctl.enqueue(enc.encode(chunk));
              ctl.close();
              return;
            }
            chunk += n.value + '\n';
          }
          ctl.enqueue(enc.encode(chunk));
        } catch (e) {
          log.error('audit export failed mid-stream', { err: errMsg(e) });
          ctl.error(e);
        }
      },
      async cancel() {
        await it.return(undefined);
      },
    });
    return new Response(body, { status: 200, headers: { 'content-type': 'application/x-ndjson; charset=utf-8' } });
  });

  app.get(AUDIT_KEY_PATH, (c) => (audit.proof ? c.json(audit.proof.jwks()) : c.json({ error: 'no audit signing key (memory-only chain)' }, 404)));

  return app;
}
