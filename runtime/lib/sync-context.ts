/**
 * The trace context manager: a context is active for the synchronous extent of `context.with`
 * and nothing else (the semantics of OpenTelemetry's `StackContextManager` for browsers).
 *
 * Why not `AsyncLocalStorage` (`@opentelemetry/context-async-hooks`), which carries the context
 * across `await`: on Node 20 it installs an async hook that runs for every promise and every
 * async resource the process makes, traced or not, and measured 11-17 % of `/authz`'s CPU
 * with no span recorded at all (bench/tracing.bench.ts, "gateway not sampling"). Writ needs the
 * context in few places, each reached synchronously from a `with`: a decision's questions are
 * asked inside its span (`askingWithin`, control-plane/decision/gather.ts), and an
 * identity-authority or `/authz` request takes `traceparent` from the active context as it is
 * built (`injectTrace`), before its first await. Spans started after an await take their
 * parent explicitly.
 */
import { ROOT_CONTEXT, type Context, type ContextManager } from '@opentelemetry/api';

export class SyncContextManager implements ContextManager {
  private current: Context = ROOT_CONTEXT;

  active(): Context {
    return this.current;
  }

  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(ctx: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    const previous = this.current;
    this.current = ctx;
    try {
      return fn.call(thisArg, ...args);
    } finally {
      this.current = previous;
    }
  }

  bind<T>(ctx: Context, target: T): T {
    if (typeof target !== 'function') return target;
    const fn = target as unknown as (...a: unknown[]) => unknown;
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const manager = this;
    return function (this: unknown, ...a: unknown[]): unknown {
      return manager.with(ctx, () => fn.apply(this, a));
    } as unknown as T;
  }

  enable(): this {
    return this;
  }

  disable(): this {
    this.current = ROOT_CONTEXT;
    return this;
  }
}
