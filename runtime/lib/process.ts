/**
 * Process lifecycle of the entry points: start, then close cleanly on SIGINT/SIGTERM.
 *
 *   if (isMain(import.meta.url)) void runUntilSignal('identity', () => startIdentityAuthority());
 *
 * A start failure exits 1 with one log line; a signal closes what started and exits 0 (1 when
 * the close fails or takes longer than `forceMs`). A second signal while closing is ignored.
 */
import { fileURLToPath } from 'node:url';
import { errMsg, logger } from './log.js';

export interface Closable {
  close(): Promise<void>;
}

/** True when the module at `url` is the script node was started with. */
export function isMain(url: string): boolean {
  return !!process.argv[1] && fileURLToPath(url) === process.argv[1];
}

export async function runUntilSignal(component: string, start: () => Promise<Closable>, opts: { forceMs?: number } = {}): Promise<void> {
  const log = logger(component);
  let running: Closable;
  try {
    running = await start();
  } catch (e) {
    log.error('start failed', { err: errMsg(e) });
    process.exit(1);
  }
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    log.info('stopping', { signal });
    const force = setTimeout(() => {
      log.error('stop timed out; exiting', { afterMs: opts.forceMs ?? 15_000 });
      process.exit(1);
    }, opts.forceMs ?? 15_000);
    force.unref();
    running.close().then(
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
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}
