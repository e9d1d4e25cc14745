/**
 * Audit routes of the management listener (SPEC 4.3 plus issue 16), a zod-openapi sub-app mounted
 * with `app.route('/', auditRoutes(chain))`; its schemas validate the queries and generate
 * `/openapi.json`:
 *
 *   GET  /v1/audit?limit=N            stored records, newest last (SPEC 4.3)
 *   GET  /v1/audit/verify             the ring, exactly SPEC 4.3: {ok, brokenAtSeq}
 *   GET  /v1/audit/verify?from=&to=&chain=   whole-store verification of a range, streamed
 *   GET  /v1/audit/checkpoints?chain=&from=&to=&limit=   signed checkpoints, oldest first
 *   POST /v1/audit/consistency {checkpoint: <jws>}       does the log extend a kept checkpoint?
 *   GET  /v1/audit/export?chain=&from=&to=               JSON lines with checkpoints (export.ts)
 *   GET  /.well-known/writ-audit-key  the checkpoint key set (JWKS)
 *
 * Bad input is 400 `{error}` naming the parameter; a store failure 503 `{error: 'audit store unavailable'}`.
 */
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import type { Context } from 'hono';
import type { ZodError } from 'zod';
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

const mustBe = (name: string) => (iss: { input?: unknown }) => `${name} must be an integer >= 1 (got ${JSON.stringify(iss.input)})`;
/** A sequence number: 1 to 15 digits, at least 1. */
const seqParam = (name: string) =>
  z
    .string({ error: mustBe(name) })
    .regex(/^(?=\d{1,15}$)0*[1-9]\d*$/, { error: mustBe(name) })
    .optional();
const chainParam = z
  .string({ error: 'chain must be 1-200 characters' })
  .min(1, 'chain must be 1-200 characters')
  .max(200, 'chain must be 1-200 characters')
  .optional()
  .openapi({ description: "The chain (default this plane's own)." });
const num = (v: string | undefined): number | undefined => (v === undefined ? undefined : Number(v));
const RangeQuery = z.object({ from: seqParam('from'), to: seqParam('to'), chain: chainParam });

const json = <T extends z.ZodType>(schema: T, description: string) => ({ content: { 'application/json': { schema } }, description });
const Err = z.object({ error: z.string() });
const AuditRecordSchema = z
  .object({
    seq: z.number().int(),
    time: z.string(),
    prevHash: z.string(),
    hash: z.string(),
    action: z.string(),
    subject: z.string().optional(),
    actor: z.string().optional(),
    task: z.string().optional(),
    service: z.string().optional(),
    allow: z.boolean(),
    reason: z.string(),
    rule: z.string().optional(),
    delegationId: z.string().optional(),
    delegationExp: z.number().optional(),
  })
  .openapi('AuditRecord');
const Verified = z
  .object({
    ok: z.boolean(),
    brokenAtSeq: z.number().int().openapi({ description: '-1 when the chain verifies, else the first seq that does not.' }),
    checked: z.number().int().optional(),
    from: z.number().int().optional(),
    lastSeq: z.number().int().optional(),
    lastHash: z.string().optional(),
    reason: z.string().optional(),
  })
  .openapi('AuditVerification');
const Checkpoint = z
  .object({
    chainId: z.string(),
    seq: z.number().int(),
    hash: z.string(),
    time: z.string(),
    prune: z.literal(true).optional(),
    jws: z.string(),
    kid: z.string(),
  })
  .openapi('AuditCheckpoint');
const ConsistencyBody = z
  .object({ checkpoint: z.string().openapi({ description: 'The compact JWS of a kept checkpoint.' }) })
  .openapi('AuditConsistencyRequest');
const Consistency = Verified.extend({ checkpoint: z.object({ chainId: z.string(), seq: z.number().int(), hash: z.string(), time: z.string() }) }).openapi(
  'AuditConsistency',
);
const Jwks = z.object({ keys: z.array(z.record(z.string(), z.unknown())) }).openapi('AuditKeySet');

/** Query errors as these routes always answered them: 400 with the parameter's own message. */
function auditHook(result: { success: boolean; error?: unknown }, c: Context) {
  if (result.success) return undefined;
  return c.json({ error: (result.error as ZodError).issues.map((i) => i.message).join('; ') }, 400);
}

/** `to` before `from` is no range. */
function orderedRange(from: number | undefined, to: number | undefined): void {
  if (from !== undefined && to !== undefined && to < from) throw new BadQuery('to must be >= from');
}

export function auditRoutes(audit: AuditRoutesReader): OpenAPIHono {
  const app = new OpenAPIHono({ defaultHook: auditHook });

  app.onError((e, c) => {
    if (e instanceof BadQuery) return c.json({ error: e.message }, 400);
    log.error('audit route failed', { err: errMsg(e), path: c.req.path });
    return c.json({ error: 'audit store unavailable' }, 503);
  });

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/audit',
      request: {
        query: z.object({
          limit: z
            .string({ error: mustBe('limit') })
            .regex(/^0*[1-9]\d*$/, { error: mustBe('limit') })
            .optional()
            .openapi({ description: `How many of the newest (default ${DEFAULT_RECENT}, at most ${RING_SIZE}).` }),
        }),
      },
      responses: { 200: json(z.array(AuditRecordSchema), 'Stored records, newest last (SPEC 4.3).'), 400: json(Err, 'Bad limit.') },
    }),
    async (c) => {
      const raw = c.req.valid('query').limit;
      const limit = raw === undefined ? DEFAULT_RECENT : Math.min(Number(raw), RING_SIZE);
      if (!audit.served) return c.json(audit.recent(limit), 200);
      // Only stored records are served (a served seq never names another record after a crash);
      // give what was appended so far a moment to be stored.
      await audit.flush?.(SERVE_FLUSH_MS).catch(() => {});
      return c.json(audit.served(limit), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/audit/verify',
      request: { query: RangeQuery },
      responses: {
        200: json(Verified, 'Without parameters exactly SPEC 4.3 over the ring `{ok, brokenAtSeq}`; with any, the whole stored range of the chain.'),
        400: json(Err, 'Bad range or chain.'),
        503: json(Err, 'No audit store (a memory-only chain), or the store unavailable.'),
      },
    }),
    async (c) => {
      const q = c.req.valid('query');
      if (q.from === undefined && q.to === undefined && q.chain === undefined) return c.json(audit.verify(), 200);
      const from = num(q.from);
      const to = num(q.to);
      const chain = q.chain ?? audit.chainId ?? 'default';
      orderedRange(from, to);
      if (!audit.proof) return c.json({ error: 'no audit store: whole-store verification needs a durable chain' }, 503);
      // What was appended so far is covered too (given a moment to be stored).
      if (chain === audit.chainId) await audit.flush?.(SERVE_FLUSH_MS).catch(() => {});
      return c.json(await audit.proof.verify({ chain, from, to }), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/audit/checkpoints',
      request: { query: RangeQuery.extend({ limit: seqParam('limit').openapi({ description: 'At most this many (default 1000, at most 10000).' }) }) },
      responses: { 200: json(z.array(Checkpoint), 'Signed checkpoints, oldest first (none on a memory-only chain).'), 400: json(Err, 'Bad range or chain.') },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const limit = Math.min(num(q.limit) ?? 1000, 10_000);
      const chain = q.chain ?? audit.chainId ?? 'default';
      if (!audit.proof) return c.json([], 200);
      return c.json(await audit.proof.checkpoints(chain, { from: num(q.from), to: num(q.to), limit }), 200);
    },
  );

  // Documented from its schema; read by hand, so a body of any declared type is parsed as
  // before (the management app's own guard answers a non-JSON type with 415 first).
  app.openAPIRegistry.registerPath({
    method: 'post',
    path: '/v1/audit/consistency',
    request: { body: { content: { 'application/json': { schema: ConsistencyBody } }, required: true } },
    responses: {
      200: json(Consistency, 'Whether the stored chain still extends the kept checkpoint.'),
      400: json(Err, 'Not a checkpoint JWS, or its signature does not verify.'),
      422: json(Err, 'The checkpoint lies in pruned history.'),
      503: json(Err, 'No audit store (a memory-only chain).'),
    },
  });
  app.post('/v1/audit/consistency', async (c) => {
    if (!audit.proof) return c.json({ error: 'no audit store: consistency checks need a durable chain' }, 503);
    let body: unknown;
    try {
      body = JSON.parse(await c.req.text());
    } catch {
      return c.json({ error: 'malformed JSON body' }, 400);
    }
    const parsed = ConsistencyBody.safeParse(body);
    if (!parsed.success) return c.json({ error: 'checkpoint must be the compact JWS string of a checkpoint' }, 400);
    try {
      return c.json(await audit.proof.consistency(parsed.data.checkpoint));
    } catch (e) {
      const m = errMsg(e);
      return c.json({ error: m }, /pruned history/.test(m) ? 422 : 400);
    }
  });

  // Documented from its schemas; a stream of JSON lines is no typed JSON answer, so the route is
  // plain and validates its query with the same schema.
  app.openAPIRegistry.registerPath({
    method: 'get',
    path: '/v1/audit/export',
    request: { query: RangeQuery },
    responses: {
      200: {
        content: { 'application/x-ndjson': { schema: z.string() } },
        description: 'The range as JSON lines (a header, the records, the checkpoints), verifiable offline (`writ audit verify`).',
      },
      400: json(Err, 'Bad range or chain.'),
      503: json(Err, 'No audit store (a memory-only chain).'),
    },
  });
  app.get('/v1/audit/export', async (c) => {
    const parsed = RangeQuery.safeParse(c.req.query());
    if (!parsed.success) throw new BadQuery(parsed.error.issues.map((i) => i.message).join('; '));
    const q = parsed.data;
    const from = num(q.from) ?? 1;
    const to = num(q.to);
    orderedRange(from, to);
    const chain = q.chain ?? audit.chainId ?? 'default';
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
    return c.body(body, 200, { 'content-type': 'application/x-ndjson; charset=utf-8' });
  });

  app.openapi(
    createRoute({
      method: 'get',
      path: AUDIT_KEY_PATH,
      responses: { 200: json(Jwks, 'The checkpoint key set (JWKS).'), 404: json(Err, 'No signing key (a memory-only chain).') },
    }),
    (c) => (audit.proof ? c.json(audit.proof.jwks(), 200) : c.json({ error: 'no audit signing key (memory-only chain)' }, 404)),
  );

  return app;
}
