/** Test helper: polls until something holds, for what happens in the background (another replica, a socket, an exporter). */

/**
 * Calls `f` every `everyMs` until it returns something other than undefined or false, and
 * returns that (true for a condition); throws `timed out waiting for <what>` after `ms`.
 */
export async function eventually<T>(f: () => T | undefined | false | Promise<T | undefined | false>, what: string, ms = 10_000, everyMs = 10): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
