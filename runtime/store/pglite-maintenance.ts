/**
 * What PostgreSQL's autovacuum does, for PGlite, which has none (one backend, no launcher).
 * Without it, a table's deleted and updated rows are never reclaimed: measured, a table that
 * took 60k rows, settled and deleted each (as budget reservations are) grew to 20 MB with none
 * left, and kept growing; vacuumed, the space is used again. The planner's statistics are never
 * gathered either. Reservations are deleted after two days, audit records past their retention,
 * so the embedded store would grow for as long as it runs.
 *
 * On the engine thread (pglite-worker.ts), every `MAINTENANCE_INTERVAL_MS`: the tables due by
 * PostgreSQL's default autovacuum thresholds, the system catalogs among them (their rows age
 * towards wraparound too; a TOAST table goes with its table), are vacuumed or analyzed, one
 * statement each, so the store's other work runs between them.
 */
import type { PGlite } from '@electric-sql/pglite';

/** autovacuum_naptime's default. */
export const MAINTENANCE_INTERVAL_MS = 60_000;

/**
 * Tables due, by the defaults of autovacuum_vacuum_threshold / _scale_factor (50, 0.2),
 * autovacuum_vacuum_insert_threshold / _scale_factor (1000, 0.2: an append-only table's pages
 * marked all-visible and frozen), autovacuum_freeze_max_age (200M transactions: a table not
 * frozen by then is vacuumed before transaction ids wrap around, which would stop the database)
 * and autovacuum_analyze_threshold / _scale_factor (50, 0.1).
 */
const DUE = `select quote_ident(s.schemaname) || '.' || quote_ident(s.relname) as name,
    s.n_dead_tup > 50 + 0.2 * s.n_live_tup or s.n_ins_since_vacuum > 1000 + 0.2 * s.n_live_tup
      or age(c.relfrozenxid) > 200000000 as vacuum,
    s.n_mod_since_analyze > 50 + 0.1 * s.n_live_tup as analyze
  from pg_stat_all_tables s join pg_class c on c.oid = s.relid
  where s.schemaname <> 'information_schema' and s.schemaname not like 'pg\\_toast%' order by 1`;

/** The statement a table needs now, if any. */
export function maintenanceOf(t: { name: string; vacuum: boolean; analyze: boolean }): string | undefined {
  if (t.vacuum) return `vacuum ${t.analyze ? '(analyze) ' : ''}${t.name}`;
  return t.analyze ? `analyze ${t.name}` : undefined;
}

/** One pass over `pg`: the statements it ran. */
export async function maintain(pg: PGlite): Promise<string[]> {
  const due = await pg.query<{ name: string; vacuum: boolean; analyze: boolean }>(DUE);
  const ran: string[] = [];
  for (const t of due.rows) {
    const statement = maintenanceOf(t);
    if (!statement || pg.closed) continue;
    await pg.exec(statement);
    ran.push(statement);
  }
  return ran;
}
