/**
 * Maybe-async decisions. Most decisions have no real async work (ingress without OIDC/OPA,
 * header-mode egress to an unregulated target without OPA), and answering from a microtask
 * instead of synchronously costs the /authz listener ~15 µs a request. So the decision bodies are
 * generators that `yield* wait(promise)` where they would `await`; `drive` runs one
 * synchronously up to its first pending promise and returns the result itself when there was
 * none, else a promise of it. A rejected promise is thrown back into the generator at the
 * `yield`, so the body's try/catch sees it exactly as it would see a rejected `await`.
 */

/** A decision body: yields the promises it waits on, returns the result. */
export type Step<T> = Generator<PromiseLike<unknown>, T, unknown>;

/** `const v = yield* wait(p)`: the generator form of `const v = await p`. */
export function* wait<T>(p: PromiseLike<T>): Generator<PromiseLike<T>, T, unknown> {
  return (yield p) as T;
}

/** True for what `drive` returns when the body had to wait (results here are never thenables). */
export function isPending<T>(v: T | Promise<T>): v is Promise<T> {
  return v instanceof Promise;
}

/**
 * Runs `body` synchronously until it yields; returns its result directly when it never did. A
 * throw out of the body propagates synchronously before the first wait, as a rejection after.
 */
export function drive<T>(body: Step<T>): T | Promise<T> {
  return advance(body, body.next());
}

function advance<T>(body: Step<T>, r: IteratorResult<PromiseLike<unknown>, T>): T | Promise<T> {
  if (r.done) return r.value;
  return Promise.resolve(r.value).then(
    (v) => advance(body, body.next(v)),
    (e: unknown) => advance(body, body.throw(e)),
  );
}
