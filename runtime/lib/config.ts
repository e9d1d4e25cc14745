/** Typed access to environment variables. Pure helpers: pass `env` explicitly in tests. */
export type Env = Record<string, string | undefined>;

export interface ListenAddr {
  host: string;
  port: number;
}

/**
 * Parses a Go-style listen address: `:9191`, `127.0.0.1:9191`, `[::1]:9191`, `9191`.
 * An empty host means all interfaces.
 */
export function parseAddr(addr: string): ListenAddr {
  const s = addr.trim();
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(s) ?? /^()()(\d{1,5})$/.exec(s);
  if (!m) throw new Error(`invalid listen address: ${JSON.stringify(addr)}`);
  const port = Number(m[3]);
  if (port > 65535) throw new Error(`invalid port in listen address: ${JSON.stringify(addr)}`);
  const host = m[1] ?? m[2] ?? '';
  return { host: host === '' ? '0.0.0.0' : host, port };
}

export function str(env: Env, name: string, fallback: string): string {
  const v = env[name];
  return v === undefined || v === '' ? fallback : v;
}

export function optional(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v === '' ? undefined : v;
}

export function int(env: Env, name: string, fallback: number): number {
  const v = optional(env, name);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`${name} must be a number, got ${JSON.stringify(v)}`);
  return n;
}

/** An integer of at least 1 (`fallback` when unset); anything else throws, naming the variable. */
export function positiveInt(env: Env, name: string, fallback: number): number {
  const n = int(env, name, fallback);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(env[name])}`);
  return n;
}

export function bool(env: Env, name: string, fallback: boolean): boolean {
  const v = optional(env, name);
  if (v === undefined) return fallback;
  if (/^(1|true|yes|on)$/i.test(v)) return true;
  if (/^(0|false|no|off)$/i.test(v)) return false;
  throw new Error(`${name} must be a boolean, got ${JSON.stringify(v)}`);
}

export function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const v = optional(env, name);
  if (v === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(v)) {
    throw new Error(`${name} must be one of ${allowed.join(', ')}, got ${JSON.stringify(v)}`);
  }
  return v as T;
}
