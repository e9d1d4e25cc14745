/**
 * Minimal structured logger: one JSON line per event on stderr. Never pass secrets in fields;
 * `redact` masks the well-known secret-bearing keys as a second line of defence, and strips the
 * SQL parameters drizzle puts in a failed query's message (a freshly signed VC, a key's salt and
 * hash, ...) from every string and error it is given.
 */
import { processSetting } from './settings.js';

type Level = 'debug' | 'info' | 'warn' | 'error';
const order: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };
const SECRET_KEYS = /^(authorization|proxy-authorization|password|secret|token|plaintext|privatekey.*|.*_key|apikey|vp)$/i;

let threshold: number = order[processSetting('logLevel') as Level] ?? order.info;

export function setLogLevel(level: Level): void {
  threshold = order[level];
}

function redact(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) {
    out[k] = SECRET_KEYS.test(k) ? '[redacted]' : typeof v === 'string' ? withoutParams(v) : v instanceof Error ? errMsg(v) : v;
  }
  return out;
}

const PARAMS = '\nparams: ';

/** A text without the `params: ...` part drizzle appends to a failed query's message (the rest of a stack's frames kept). */
export function withoutParams(s: string): string {
  const i = s.indexOf(PARAMS);
  if (i < 0) return s;
  const frames = s
    .slice(i)
    .split('\n')
    .filter((l) => /^\s+at /.test(l));
  return [s.slice(0, i) + ' [parameters withheld]', ...frames].join('\n');
}

function emit(level: Level, component: string, msg: string, fields: Record<string, unknown>): void {
  if (order[level] < threshold) return;
  const line = JSON.stringify({ t: new Date().toISOString(), level, component, msg, ...redact(fields) });
  process.stderr.write(line + '\n');
}

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export function logger(component: string): Logger {
  return {
    debug: (m, f = {}) => emit('debug', component, m, f),
    info: (m, f = {}) => emit('info', component, m, f),
    warn: (m, f = {}) => emit('warn', component, m, f),
    error: (m, f = {}) => emit('error', component, m, f),
  };
}

/**
 * Message of an unknown thrown value, without a stack and never with SQL parameters: a failed
 * drizzle query (DrizzleQueryError: `Failed query: <sql>\nparams: <values>`, the database's error as
 * its cause) is told by its statement and its cause only.
 */
export function errMsg(e: unknown): string {
  if (!(e instanceof Error)) return withoutParams(String(e));
  if (e.message.startsWith('Failed query: ') && 'query' in e) {
    const cause = (e as { cause?: unknown }).cause;
    const m = (cause as { message?: unknown } | undefined)?.message;
    const why = typeof m === 'string' ? withoutParams(m) : `unknown cause ${String(cause)}`;
    return `query failed: ${why} (${String((e as { query: unknown }).query)
      .replace(/\s+/g, ' ')
      .slice(0, 160)})`;
  }
  return withoutParams(e.message);
}
