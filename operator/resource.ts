/**
 * One observed custom resource, whatever the source (Kubernetes or a folder), checked against its
 * CRD: defaults applied, structural schema and CEL rules evaluated (operator/validate/schema.ts).
 * An invalid resource keeps its identity so its status can say why (Accepted=False, Invalid).
 */
import { API_VERSION, kindOf, openApiSchema, type CrKind } from './crd/definitions.js';
import { formatPath, validateAgainst, withDefaults, type FieldError } from './validate/schema.js';
import { whenProblem } from '../runtime/control-plane/decision/tool-rules.js';

export interface Observed {
  kind: CrKind;
  namespace: string;
  name: string;
  /** metadata.generation (1 for folder resources; bumped by spec changes in Kubernetes). */
  generation: number;
  /** The spec after defaulting; undefined when the resource is invalid. */
  spec: Record<string, any> | undefined;
  /** Validation errors (empty when valid), as "path: message". */
  errors: string[];
  /** metadata.deletionTimestamp is set: withdraw what it granted. */
  deleting: boolean;
  /** Where it came from, for messages: `file.yaml:12` or `kubernetes:<ns>/<name>`. */
  origin: string;
}

export const keyOf = (r: Pick<Observed, 'kind' | 'namespace' | 'name'>): string => `${r.kind}/${r.namespace}/${r.name}`;

const isObj = (v: unknown): v is Record<string, any> => typeof v === 'object' && v !== null && !Array.isArray(v);

export interface Checked {
  /** Undefined when the document is not a resource of ours at all (another group, or no kind). */
  observed?: Observed;
  errors: FieldError[];
}

/**
 * Checks one document. Documents of another apiVersion are not ours (a GitOps folder may hold
 * Deployments): `observed` is undefined and `errors` empty. A writ.io document with an unknown
 * kind or version is an error without an identity.
 */
export function checkResource(doc: unknown, origin: string, old?: unknown): Checked {
  if (!isObj(doc)) return { errors: [{ path: [], message: 'a resource must be a mapping' }] };
  const apiVersion = doc.apiVersion;
  if (typeof apiVersion !== 'string' || !apiVersion.startsWith(API_VERSION.split('/')[0] + '/')) return { errors: [] };
  if (apiVersion !== API_VERSION)
    return { errors: [{ path: ['apiVersion'], message: `unsupported apiVersion ${JSON.stringify(apiVersion)}: use ${API_VERSION}` }] };
  const crd = kindOf(String(doc.kind));
  if (!crd) return { errors: [{ path: ['kind'], message: `unknown kind ${JSON.stringify(doc.kind)}: RegistryService, AgentPolicy or GovernedAgent` }] };
  const meta = isObj(doc.metadata) ? doc.metadata : {};
  const name = typeof meta.name === 'string' && meta.name ? meta.name : undefined;
  if (!name) return { errors: [{ path: ['metadata', 'name'], message: 'required field is missing' }] };
  const namespace = typeof meta.namespace === 'string' && meta.namespace ? meta.namespace : 'default';
  const schema = openApiSchema(crd);
  const body = withDefaults(
    { apiVersion, kind: doc.kind, metadata: { name }, spec: doc.spec, ...(doc.status ? { status: doc.status } : {}) },
    schema,
  ) as Record<string, any>;
  const oldBody = isObj(old) ? withDefaults({ apiVersion, kind: doc.kind, metadata: { name }, spec: old.spec }, schema) : undefined;
  const errors = validateAgainst(body, schema, oldBody);
  if (errors.length === 0 && crd.kind === 'AgentPolicy') errors.push(...toolRuleErrors(body.spec));
  return {
    observed: {
      kind: crd.kind,
      namespace,
      name,
      generation: typeof meta.generation === 'number' ? meta.generation : 1,
      spec: errors.length ? undefined : (body.spec as Record<string, any>),
      errors: errors.map((e) => `${formatPath(e.path)}: ${e.message}`),
      deleting: typeof meta.deletionTimestamp === 'string' && meta.deletionTimestamp !== '',
      origin,
    },
    errors,
  };
}

/** A tool rule's `when` that cannot be a call-time rule (does not compile, or reads what a call cannot see). */
function toolRuleErrors(spec: Record<string, any> | undefined): FieldError[] {
  const rules: unknown[] = Array.isArray(spec?.toolRules) ? spec.toolRules : [];
  const out: FieldError[] = [];
  rules.forEach((r, i) => {
    const when = isObj(r) ? r.when : undefined;
    if (typeof when !== 'string') return;
    const why = whenProblem(when);
    if (why) out.push({ path: ['spec', 'toolRules', i, 'when'], message: `does not compile as a call-time rule: ${why}` });
  });
  return out;
}
