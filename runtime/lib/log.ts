/**
 * Minimal structured logger: one JSON line per event on stderr. Never pass secrets in fields;
 * `redact` masks the well-known secret-bearing keys as a second line of defence.
 */
type Level = 'debug' | 'info' | 'warn' | 'error';
const order: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };
const SECRET_KEYS = /^(authorization|proxy-authorization|password|secret|token|plaintext|privatekey.*|.*_key|apikey|vp)$/i;

let threshold: number = order[(process.env.LOG_LEVEL as Level) ?? 'info'] ?? order.info;

export function setLogLevel(level: Level): void {
  threshold = order[level];
}

function redact(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) out[k] = SECRET_KEYS.test(k) ? '[redacted]' : v;
  return out;
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

/** Message of an unknown thrown value, without a stack. */
export function errMsg(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
