/** Drizzle view of the egress approval queue (migration 0006_egress). */
import { bigserial, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'string' });

export const EGRESS_STATUSES = ['pending', 'approved', 'denied', 'expired'] as const;
export type EgressStatus = (typeof EGRESS_STATUSES)[number];

export const egressRequests = pgTable('egress_requests', {
  id: text('id').primaryKey(),
  seq: bigserial('seq', { mode: 'number' }).notNull(),
  status: text('status').$type<EgressStatus>().notNull(),
  actor: text('actor').notNull(),
  actorDid: text('actor_did').notNull(),
  target: text('target').notNull(),
  service: text('service').notNull(),
  action: text('action').notNull(),
  resource: text('resource').notNull(),
  reason: text('reason').notNull(),
  requestedAt: ts('requested_at').notNull(),
  /** Hold deadline: after it, any replica may expire the row. */
  expiresAt: ts('expires_at').notNull(),
  /** Replica id of the process that first held the client connection. */
  holder: text('holder').notNull(),
  /** Instance holding the connection now (approvals/holders.ts); NULL: no connection waits on it. */
  holderInstance: text('holder_instance'),
  approver: text('approver'),
  decidedAt: ts('decided_at'),
  denyReason: text('deny_reason'),
  /** When the decision reached the agent (its held connection, or its retry after a restart). */
  usedAt: ts('used_at'),
});
