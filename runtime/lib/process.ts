/**
 * Process lifecycle of the entry points: start, then close cleanly on SIGINT/SIGTERM.
 *
 *   if (isMain(import.meta.url)) void runUntilSignal('identity', (config) => startIdentity(config));
 *
 * The configuration is loaded (and every setting validated) once, before anything opens, from
 * this process's environment (`load` overrides: the webhook puts its flags over it), and handed to
 * `start`. Once started it logs one `{"msg":"up", ...ports}` line and collects the heap whenever
 * the process goes quiet after load (`IDLE_GC_INTERVAL_MS`, idle-gc.ts). A start failure exits 1 with one log
 * line. A signal closes what started (a signal during start waits for the start, then closes)
 * and exits 0; 1 when the close fails or takes longer than `forceMs`. Repeated signals are ignored.
 */
import { fileURLToPath } from 'node:url';
import type { Config } from './config.js';
import { startIdleGc } from './idle-gc.js';
import { errMsg, logger } from './log.js';
import { loadProcessConfig } from './settings.js';

export interface Closable {
  close(): Promise<void>;
  /** Bound ports, logged in the `up` line (tests and operators read it). */
  ports?: Record<string, number | undefined>;
}

/** True when the module at `url` is the script node was started with. */
export function isMain(url: string): boolean {
  return !!process.argv[1] && fileURLToPath(url) === process.argv[1];
}

export async function runUntilSignal(
  component: string,
  start: (config: Config) => Promise<Closable>,
  opts: { forceMs?: number; load?: () => Config } = {},
): Promise<void> {
  const log = logger(component);
  const forceMs = opts.forceMs ?? 15_000;
  let running: Closable | undefined;
  let signalled: NodeJS.Signals | undefined;
  const shutdown = (r: Closable, signal: NodeJS.Signals) => {
    log.info('stopping', { signal });
    setTimeout(() => {
      log.error('stop timed out; exiting', { afterMs: forceMs });
      process.exit(1);
    }, forceMs).unref();
    r.close().then(
      () => {
        log.info('stopped');
        process.exit(0);
      },
      (e: unknown) => {
        log.error('stop failed', { err: errMsg(e) });
        process.exit(1);
      },
    );
  };
  const onSignal = (signal: NodeJS.Signals) => {
    if (signalled) return;
    signalled = signal;
    if (running) shutdown(running, signal);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  let config: Config;
  try {
    // Every setting is validated once, before anything opens: a bad one names itself and exits 1.
    config = (opts.load ?? loadProcessConfig)();
    running = await start(config);
  } catch (e) {
    log.error('start failed', { err: errMsg(e) });
    process.exit(1);
  }
  log.info('up', { ...running.ports });
  // Memory the last burst of load left behind is collected once the process goes quiet (idle-gc.ts).
  startIdleGc({ intervalMs: config.process.idleGcIntervalMs });
  if (signalled) shutdown(running, signalled);
}
