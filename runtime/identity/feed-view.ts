/**
 * An in-memory view of some store rows, loaded from the store and kept current by the change
 * feed (change-feed.ts). It answers only while it can be trusted: the feed is live and the view
 * was reloaded in the feed's current epoch; otherwise `get` is undefined and the caller reads the
 * store. Changes that arrive while a reload runs are replayed onto its result, and reloads asked
 * for during one run once more after it, so a reload never loses a change.
 */
import type { Change, ChangeConsumer, ChangeFeed } from './change-feed.js';

export interface FeedView<V> {
  /** The view, or undefined when it cannot be trusted right now. */
  get(): V | undefined;
  /** Applies a change this replica committed (the others learn it from the feed). */
  apply(c: Change): void;
  /** The view, trusted or not (counts for tests and logs). */
  peek(): V;
  /** True when `get` would answer. */
  current(): boolean;
}

export interface FeedViewSpec<V> {
  empty(): V;
  /** Reads the rows into a fresh view. */
  load(): Promise<V>;
  /** Folds one change into a view (ignoring kinds it does not hold). */
  apply(v: V, c: Change): void;
}

export function feedView<V>(feed: ChangeFeed, spec: FeedViewSpec<V>): FeedView<V> {
  let view = spec.empty();
  let loadedEpoch = -1;
  /** Changes seen while a reload runs, replayed onto its result. */
  let pending: Change[] | undefined;
  let running: Promise<void> | undefined;
  let again = false;

  async function load(): Promise<void> {
    const epoch = feed.epoch();
    pending = [];
    try {
      const next = await spec.load();
      for (const c of pending) spec.apply(next, c);
      view = next;
      loadedEpoch = epoch;
    } finally {
      pending = undefined;
    }
  }

  const consumer: ChangeConsumer = {
    apply(c) {
      spec.apply(view, c);
      pending?.push(c);
    },
    async resync() {
      if (running) {
        again = true;
        return running;
      }
      running = (async () => {
        try {
          do {
            again = false;
            await load();
          } while (again);
        } finally {
          running = undefined;
        }
      })();
      return running;
    },
  };
  feed.subscribe(consumer);

  const current = () => feed.live() && loadedEpoch === feed.epoch();
  return {
    get: () => (current() ? view : undefined),
    apply: (c) => consumer.apply(c),
    peek: () => view,
    current,
  };
}
