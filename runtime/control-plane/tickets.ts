/**
 * Call tickets: one completion is one call. The forward proxy counts an agent's call when it
 * allows it and stamps `X-Writ-Call-Ticket` on the upstream request (never on anything the
 * agent sees; a client-sent one is stripped). The broker passes it to /authz, which skips the
 * calls-per-hour count for a valid ticket of the same agent and upstream. A ticket is
 * `v1.<payload>.<mac>`: HMAC-SHA-256 under a key every replica of one database shares (kept in
 * `control_plane_secrets`), bound to agent and upstream, valid for a minute, usable once per
 * replica. An agent cannot forge one without the key; a forged or stale one just counts.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { rowsOf, type Store } from '../store/factory.js';
import type { TicketMinter } from './decision/commit.js';
import type { TicketVerifier } from './decision/gather.js';

const KEY_NAME = 'call-ticket-key';
export const TICKET_TTL_MS = 60_000;

export interface CallTickets extends TicketMinter, TicketVerifier {}

/** The shared key: created by the first replica, read by the others. */
export async function callTicketKey(store: Store): Promise<Buffer> {
  const fresh = randomBytes(32).toString('base64');
  await store.db.execute(sql`insert into control_plane_secrets (name, value) values (${KEY_NAME}, ${fresh}) on conflict (name) do nothing`);
  const [row] = await rowsOf<{ value: string }>(store.db, sql`select value from control_plane_secrets where name = ${KEY_NAME}`);
  if (!row) throw new Error('call-ticket key missing after insert');
  return Buffer.from(row.value, 'base64');
}

export function createCallTickets(key: Buffer, now: () => number = Date.now, ttlMs = TICKET_TTL_MS): CallTickets {
  const used = new Map<string, number>();
  // Nonces only need to be unique (the MAC makes them unforgeable): a random prefix per minter and
  // a counter. A CSPRNG call per request cost the proxy ~15 % of its CPU (bench/proxy.bench.ts).
  const prefix = randomBytes(9).toString('base64url');
  let counter = 0;
  const mac = (payload: string) => createHmac('sha256', key).update(payload).digest();
  const norm = (upstream: string) => upstream.toLowerCase();
  function sweep(t: number): void {
    if (used.size < 1024) return;
    for (const [n, exp] of used) if (exp <= t) used.delete(n);
  }
  return {
    mint(actor, upstream) {
      const payload = Buffer.from(JSON.stringify({ a: actor, u: norm(upstream), x: now() + ttlMs, n: `${prefix}${(counter++).toString(36)}` })).toString(
        'base64url',
      );
      return `v1.${payload}.${mac(payload).toString('base64url')}`;
    },
    verify(ticket, actor, upstream) {
      if (ticket.length > 1024) return false;
      const [v, payload, sig] = ticket.split('.');
      if (v !== 'v1' || !payload || !sig) return false;
      const want = mac(payload);
      const got = Buffer.from(sig, 'base64url');
      if (got.length !== want.length || !timingSafeEqual(got, want)) return false;
      let p: { a?: unknown; u?: unknown; x?: unknown; n?: unknown };
      try {
        p = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as typeof p;
      } catch {
        return false;
      }
      const t = now();
      if (p.a !== actor || p.u !== norm(upstream) || typeof p.x !== 'number' || p.x <= t || typeof p.n !== 'string') return false;
      if (used.has(p.n)) return false;
      sweep(t);
      used.set(p.n, p.x);
      return true;
    },
  };
}
