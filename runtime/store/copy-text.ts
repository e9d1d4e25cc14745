/**
 * Rows in PostgreSQL's COPY text format (tab-separated, one row per line, `\N` for NULL), as
 * `COPY ... FROM` reads them: the cheapest way to load many rows into PGlite (Store.copyRows).
 * Strings go through unchanged but for the four characters the format escapes (backslash, tab,
 * newline, carriage return), so a value cannot end its field, its row or the data (`\.`).
 */
export type CopyValue = string | number | boolean | null | undefined;

const SPECIAL = /[\\\t\n\r]/;
const EVERY_SPECIAL = new RegExp(SPECIAL.source, 'g');
const ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' };

/** One value as a field: a missing value or a number JSON could not write (NaN, ±Infinity) is NULL, as in a JSON parameter. */
export function copyValue(v: CopyValue): string {
  if (typeof v === 'string') return SPECIAL.test(v) ? v.replace(EVERY_SPECIAL, (c) => ESCAPES[c]!) : v;
  if (typeof v === 'number') return Number.isFinite(v) ? String(v) : '\\N';
  if (typeof v === 'boolean') return v ? 't' : 'f';
  return '\\N';
}

/** Rows as COPY text, each ended by a newline. */
export function copyText(rows: Iterable<readonly CopyValue[]>): string {
  let out = '';
  for (const row of rows) {
    for (let i = 0; i < row.length; i++) out += i === 0 ? copyValue(row[i]) : `\t${copyValue(row[i])}`;
    out += '\n';
  }
  return out;
}
