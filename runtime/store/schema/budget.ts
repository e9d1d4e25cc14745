/** Drizzle view of the shared budget tables (migrations 0016_budget_usage, 0017_budget_reservations, 0020_budget_reservation_claims). */
import { bigint, doublePrecision, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';

const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'string' });

export const BUDGET_LEDGER_DIMENSIONS = ['calls', 'tokens', 'cost'] as const;
export type LedgerDimension = (typeof BUDGET_LEDGER_DIMENSIONS)[number];

export const budgetUsage = pgTable(
  'budget_usage',
  {
    agent: text('agent').notNull(),
    dimension: text('dimension').$type<LedgerDimension>().notNull(),
    /** floor(epoch ms / bucket span): minutes for calls and tokens, 15 minutes for cost. */
    bucket: bigint('bucket', { mode: 'number' }).notNull(),
    used: doublePrecision('used').notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.agent, t.dimension, t.bucket] })],
);

/** `unreserved`: a settlement that came before its row (migration 0020), charged as unreserved usage. */
export const RESERVATION_STATES = ['open', 'settled', 'expired', 'unreserved'] as const;
export type ReservationState = (typeof RESERVATION_STATES)[number];

export const budgetReservations = pgTable('budget_reservations', {
  id: text('id').primaryKey(),
  agent: text('agent').notNull(),
  tokens: doublePrecision('tokens').notNull(),
  costUsd: doublePrecision('cost_usd').notNull(),
  hourBucket: bigint('hour_bucket', { mode: 'number' }).notNull(),
  dayBucket: bigint('day_bucket', { mode: 'number' }).notNull(),
  state: text('state').$type<ReservationState>().notNull(),
  createdAt: ts('created_at').notNull(),
  expiresAt: ts('expires_at').notNull(),
  settledTokens: doublePrecision('settled_tokens'),
  settledCostUsd: doublePrecision('settled_cost_usd'),
});
