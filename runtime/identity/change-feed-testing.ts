/**
 * Test helper: a replica on a slow link, for the change feed's cross-replica tests. Notifications
 * reach it `lateMs` late (in order); `hold()` stalls its queries and NOTIFYs until `resume()`.
 */
import type { Db, Store } from '../store/factory.js';

export function slowReplica(store: Store, lateMs: number) {
  let gate: Promise<void> | undefined;
  let release = () => {};
  const through = async () => {
    while (gate) await gate;
  };
  const db = new Proxy(store.db, {
    get: (t, k) => (k === 'execute' ? async (q: unknown) => (await through(), (t as Db).execute(q as never)) : Reflect.get(t, k)),
  });
  const slow: Store = {
    ...store,
    db,
    notify: async (ch, p) => (await through(), store.notify(ch, p)),
    listen: (ch, cb) => store.listen(ch, (p) => void setTimeout(() => cb(p), lateMs)),
  };
  return {
    store: slow,
    hold: () => void (gate = new Promise<void>((r) => (release = r))),
    resume: () => {
      gate = undefined;
      release();
    },
  };
}
