/**
 * The shared budget tables (migrations 0016_budget_usage, 0017_budget_reservations,
 * 0020_budget_reservation_claims) are read and written with raw SQL only (the ledger's upserts and
 * the reservations' batched statements), so they have no drizzle table here: only the dimensions
 * a `budget_usage` row may name.
 */
export const BUDGET_LEDGER_DIMENSIONS = ['calls', 'tokens', 'cost'] as const;
export type LedgerDimension = (typeof BUDGET_LEDGER_DIMENSIONS)[number];
