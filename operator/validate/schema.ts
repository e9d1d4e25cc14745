/**
 * Offline validation of a custom resource against its CRD, the way the apiserver does it:
 * defaults first, then the structural schema (types, required, enums, patterns, bounds, list
 * types, unknown fields rejected as `kubectl apply`'s strict field validation does), then the
 * CEL rules (`x-kubernetes-validations`) of every node whose structure is valid, with `self`
 * bound to that node and `oldSelf` to the previous object's node (transition rules run only on
 * update, as in Kubernetes). CEL is @marcbachmann/cel-js; integers are passed as CEL ints.
 *
 * Pure: no I/O. The result carries JSON paths; `operator/validate/files.ts` maps them to lines.
 */
import { parse as parseCel } from '@marcbachmann/cel-js';
import type { Schema } from '../crd/definitions.js';

export interface FieldError {
  /** JSON path segments from the resource root, e.g. ['spec', 'budget', 'tokensPerHour']. */
  path: (string | number)[];
  message: string;
}

type Compiled = ReturnType<typeof parseCel>;
const compiled = new Map<string, Compiled>();
function cel(rule: string): Compiled {
  let c = compiled.get(rule);
  if (!c) {
    c = parseCel(rule);
    compiled.set(rule, c);
  }
  return c;
}

const regexps = new Map<string, RegExp>();
const re = (pattern: string): RegExp => {
  let r = regexps.get(pattern);
  if (!r) regexps.set(pattern, (r = new RegExp(pattern)));
  return r;
};

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/** Returns a copy with schema defaults filled in (objects that are present get their defaults). */
export function withDefaults(v: unknown, s: Schema): unknown {
  if (isObj(v) && s.properties) {
    const out: Record<string, unknown> = { ...v };
    for (const [k, ps] of Object.entries(s.properties)) {
      if (out[k] === undefined && ps.default !== undefined) out[k] = structuredClone(ps.default);
      if (out[k] !== undefined) out[k] = withDefaults(out[k], ps);
    }
    return out;
  }
  if (Array.isArray(v) && s.items) return v.map((x) => withDefaults(x, s.items!));
  return v;
}

function typeOk(v: unknown, t: Schema['type']): boolean {
  switch (t) {
    case 'object':
      return isObj(v);
    case 'array':
      return Array.isArray(v);
    case 'string':
      return typeof v === 'string';
    case 'boolean':
      return typeof v === 'boolean';
    case 'integer':
      // Exact in a double, as the management API's schemas take it (past 2^53, 1e26 reads as an integer).
      return typeof v === 'number' && Number.isSafeInteger(v);
    case 'number':
      return typeof v === 'number' && Number.isFinite(v);
    default:
      return true;
  }
}

const show = (v: unknown) => JSON.stringify(v);

/** The schema of field `k`: only the schema's own (`__proto__` or `constructor` is no field of ours). */
const propertyOf = (s: Schema, k: string): Schema | undefined => (s.properties && Object.hasOwn(s.properties, k) ? s.properties[k] : undefined);

/** CEL values: integer-typed nodes become ints (bigint), everything else as JSON gives it. */
function toCel(v: unknown, s: Schema): unknown {
  if (s.type === 'integer' && typeof v === 'number') return BigInt(v);
  if (Array.isArray(v)) return v.map((x) => toCel(x, s.items ?? {}));
  if (isObj(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[k] = toCel(x, propertyOf(s, k) ?? {});
    return out;
  }
  return v;
}

function checkNode(v: unknown, s: Schema, path: FieldError['path'], old: unknown, errs: FieldError[]): void {
  const before = errs.length;
  const at = (message: string, p = path) => errs.push({ path: p, message });
  if (s.type && !typeOk(v, s.type)) {
    at(`must be of type ${s.type}, got ${show(v)}`);
    return;
  }
  if (s.enum && !s.enum.includes(v as string)) at(`unsupported value ${show(v)}: supported values: ${s.enum.map((e) => show(e)).join(', ')}`);
  if (typeof v === 'string') {
    if (s.minLength !== undefined && v.length < s.minLength) at(`must be at least ${s.minLength} characters`);
    if (s.maxLength !== undefined && v.length > s.maxLength) at(`must be at most ${s.maxLength} characters`);
    if (s.pattern && !re(s.pattern).test(v)) at(`${show(v)} does not match ${s.pattern}`);
    if (s.format === 'date-time' && !DATE_TIME.test(v)) at(`${show(v)} is not an RFC 3339 date-time`);
  }
  if (typeof v === 'number') {
    if (s.minimum !== undefined && v < s.minimum) at(`must be >= ${s.minimum}, got ${v}`);
    if (s.maximum !== undefined && v > s.maximum) at(`must be <= ${s.maximum}, got ${v}`);
  }
  if (Array.isArray(v)) {
    if (s.maxItems !== undefined && v.length > s.maxItems) at(`must have at most ${s.maxItems} items, got ${v.length}`);
    const listType = s['x-kubernetes-list-type'];
    const keyOf =
      listType === 'set'
        ? (x: unknown) => show(x)
        : listType === 'map'
          ? (x: unknown) => show((s['x-kubernetes-list-map-keys'] ?? []).map((k) => (isObj(x) ? x[k] : undefined)))
          : undefined;
    const seen = new Set<string>();
    v.forEach((x, i) => {
      if (s.items) checkNode(x, s.items, [...path, i], undefined, errs);
      if (keyOf) {
        const key = keyOf(x);
        if (seen.has(key)) at(`duplicate entry ${key}`, [...path, i]);
        seen.add(key);
      }
    });
  }
  if (isObj(v)) {
    for (const r of s.required ?? []) if (v[r] === undefined) at('required field is missing', [...path, r]);
    for (const [k, x] of Object.entries(v)) {
      if (x === undefined) continue; // absent (a JS key without a value), reported by required
      const ps = propertyOf(s, k);
      if (!ps) {
        if (s.properties) at('unknown field', [...path, k]);
        continue;
      }
      checkNode(x, ps, [...path, k], isObj(old) ? old[k] : undefined, errs);
    }
  }
  // CEL rules run on structurally valid nodes only (a rule over a mistyped field says nothing useful).
  if (errs.length > before) return;
  for (const rule of s['x-kubernetes-validations'] ?? []) {
    const transition = /\boldSelf\b/.test(rule.rule);
    if (transition && old === undefined) continue;
    let ok: unknown;
    try {
      ok = cel(rule.rule)({ self: toCel(v, s), oldSelf: toCel(old, s) });
    } catch (e) {
      // A rule that cannot evaluate (a missing key without has()) fails the object, as the apiserver does.
      at(`${rule.message} (rule failed to evaluate: ${(e as Error).message.split('\n')[0]})`);
      continue;
    }
    if (ok !== true) at(rule.message, rule.fieldPath ? [...path, ...rule.fieldPath.split('.').filter(Boolean)] : path);
  }
}

/**
 * Validates one resource body (already defaulted, see withDefaults) against an openAPIV3Schema.
 * `old` is the previous version of the same resource (for transition rules), if any.
 */
export function validateAgainst(obj: unknown, schema: Schema, old?: unknown): FieldError[] {
  const errs: FieldError[] = [];
  checkNode(obj, schema, [], old, errs);
  return errs;
}

export const formatPath = (p: FieldError['path']): string =>
  p
    .map((x) => (typeof x === 'number' ? `[${x}]` : `.${x}`))
    .join('')
    .replace(/^\./, '');
