/**
 * The `when` of an agent's tool rules (issue 42): a CEL expression over what a tool call carries,
 * checked at call time only. Compiled once per expression text; an expression that does not parse,
 * names a variable a call cannot see, or is not a boolean is refused where it is applied
 * (`ServiceSchema`, so the management API, the operator's status and `writ validate` all say why).
 * Pure: no I/O.
 */
import { Environment } from '@marcbachmann/cel-js';

/** What a call-time rule may read; list-time filtering never evaluates a rule. */
export const CALL_VARIABLES = ['args', 'agent', 'task', 'onBehalfOf'] as const;

const env = new Environment({ limits: { maxAstNodes: 2000, maxDepth: 64, maxListElements: 1000, maxMapEntries: 1000, maxCallArguments: 32 } })
  .registerVariable('args', 'map')
  .registerVariable('agent', 'string')
  .registerVariable('task', 'string')
  .registerVariable('onBehalfOf', 'string');

type Program = ReturnType<typeof env.parse>;

/** Longest `when` accepted. */
export const WHEN_MAX_CHARS = 4096;
/** Compiled programs by expression text (a registry holds a bounded set of rules). */
const compiled = new Map<string, Program>();
const COMPILED_MAX = 10_000;

/** Why `expr` cannot be a call-time rule, or undefined when it can. */
export function whenProblem(expr: string): string | undefined {
  if (expr.length > WHEN_MAX_CHARS) return `longer than ${WHEN_MAX_CHARS} characters`;
  let c: ReturnType<typeof env.check>;
  try {
    c = env.check(expr);
  } catch (e) {
    return firstLine(e);
  }
  if (!c.valid) {
    const msg = firstLine(c.error);
    return /unknown variable|undeclared|not declared/i.test(msg) || c.error?.name === 'TypeError'
      ? `${msg} (a call-time rule sees only ${CALL_VARIABLES.join(', ')})`
      : msg;
  }
  if (c.type !== 'bool' && c.type !== 'dyn') return `evaluates to ${c.type}, not bool`;
  return undefined;
}

const firstLine = (e: unknown) => String((e as { message?: unknown } | undefined)?.message ?? e).split('\n')[0]!;

function program(expr: string): Program {
  let p = compiled.get(expr);
  if (!p) {
    p = env.parse(expr);
    if (compiled.size >= COMPILED_MAX) compiled.clear();
    compiled.set(expr, p);
  }
  return p;
}

/** What a call-time rule is evaluated over. */
export interface CallContext {
  args: Record<string, unknown>;
  agent: string;
  task: string;
  onBehalfOf: string;
}

/** True when `expr` holds for the call; false when it does not, or cannot be evaluated (why in `error`). */
export function whenHolds(expr: string, ctx: CallContext): { ok: boolean; error?: string } {
  try {
    return { ok: program(expr)(ctx as unknown as Record<string, unknown>) === true };
  } catch (e) {
    return { ok: false, error: firstLine(e) };
  }
}
