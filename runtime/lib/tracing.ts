/**
 * Traces (SPEC 6, 8): OpenTelemetry with W3C trace context, one tracer provider per process.
 *
 * - `OTEL_EXPORTER_OTLP_ENDPOINT` set: every span (identity-authority operations and decisions)
 *   goes to `<endpoint>/v1/traces` over OTLP/HTTP, batched, with the headers of
 *   `OTEL_EXPORTER_OTLP_HEADERS`, encoded as `OTEL_EXPORTER_OTLP_PROTOCOL` says (`http/protobuf`,
 *   the OTLP default, or `http/json`; `grpc` is not offered). Decision spans are recorded and
 *   written by `decision-spans.ts` (a fifth of the SDK's cost per span), the rest by the SDK.
 * - unset: the SPEC's stdout fallback, at a level that does not flood: only the identity
 *   authority's identity and credential operations (register, provision, VC issue, delegation
 *   request/approve/deny, revoke, resolve, and requests that arrive with a `traceparent`), one
 *   JSON line per span on stdout. What runs once per agent request is not recorded there (one
 *   line per request would flood): decision spans, and verify-presentation and the delegation
 *   check unless their request carries a `traceparent` (a sidecar sends a fresh VP per request).
 * - `OTEL_SDK_DISABLED=true`: no tracing at all.
 * - `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` as the OTel SDK spec writes them (default
 *   `parentbased_always_on`: a gateway's sampling decision is followed, a trace Writ starts is
 *   recorded); one sampler decides for decision spans and SDK spans alike.
 * These variables are read and validated by `tracing-config.ts` (`tracingConfig`, through `loadConfig`).
 *
 * A caller's `traceparent` is continued; outgoing calls (control plane -> identity authority,
 * broker -> `/authz`) send the active context on (`injectTrace`), so one trace runs gateway ->
 * /authz -> identity authority. The active context is synchronous (`sync-context.ts`: no
 * AsyncLocalStorage, which costs every request on Node 20). `startDecisionSpan` is the decision
 * paths' API: a shared no-op when decision tracing is off.
 */
import {
  context,
  isSpanContextValid,
  ROOT_CONTEXT,
  propagation,
  trace,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  type Attributes,
  type Context,
  type Span,
  type SpanContext,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { createRequire } from 'node:module';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  SamplingDecision,
  SimpleSpanProcessor,
  TraceIdRatioBasedSampler,
  type Sampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';
import type { MiddlewareHandler } from 'hono';
import { routePath } from 'hono/route';
import { BRAND } from './brand.js';
import { DecisionSpanWriter, nowUs, randomId, type DecisionAttributes } from './decision-spans.js';
import { OTLP_PROTOCOLS } from './tracing-config.js';
import { JsonLineSpanExporter } from './span-stdout.js';
import { SyncContextManager } from './sync-context.js';
import type { TracingConfig, TracingMode } from './tracing-config.js';

// Entry points (and bench/tracing.bench.ts, also against a base build) take it from here with initTracing.
export { type SamplerName, type TracingConfig, type TracingMode } from './tracing-config.js';

/** A sampler as the SDK takes it, and as decision spans apply it: parent based or not, and the sampler of a root. */
interface Sampling {
  sdk: Sampler;
  parentBased: boolean;
  root: Sampler;
}

function samplingOf(cfg: TracingConfig['sampler']): Sampling {
  const name = cfg?.name ?? 'parentbased_always_on';
  const root = name.endsWith('always_on')
    ? new AlwaysOnSampler()
    : name.endsWith('always_off')
      ? new AlwaysOffSampler()
      : new TraceIdRatioBasedSampler(cfg!.ratio);
  const parentBased = name.startsWith('parentbased_');
  return { sdk: parentBased ? new ParentBasedSampler({ root }) : root, parentBased, root };
}

interface State {
  mode: TracingMode;
  provider?: BasicTracerProvider;
  tracer?: Tracer;
  /** Writes decision spans (mode otlp). */
  decisions?: DecisionSpanWriter;
  /** The sampling unless it is the default (parentbased_always_on), which decision spans apply without a call. */
  sampling?: Sampling;
}

const state: State = { mode: 'off' };

const load = createRequire(import.meta.url);
/** Both exporter packages have this shape. */
type OtlpPackage = typeof import('@opentelemetry/exporter-trace-otlp-http');
type ExporterOptions = ConstructorParameters<OtlpPackage['OTLPTraceExporter']>[0];

/**
 * The SDK's OTLP/HTTP span exporter for `protocol`, its package loaded only now: the exporters
 * and what they pull in (protobufjs, the OTLP transformer, the metrics SDK) are about a third of
 * the modules a process loads, and only a process exporting over OTLP needs them (a restart's
 * time is mostly module loading: bench/restart.bench.ts).
 */
function otlpExporter(protocol: string, o: ExporterOptions): SpanExporter {
  const pkg = protocol === 'http/json' ? '@opentelemetry/exporter-trace-otlp-http' : '@opentelemetry/exporter-trace-otlp-proto';
  const { OTLPTraceExporter } = load(pkg) as OtlpPackage;
  return new OTLPTraceExporter(o);
}
/** Read on the hot path: decision spans are recorded only when exporting over OTLP. */
let decisionsOn = false;

/**
 * Installs the process-wide tracer provider, W3C propagator and async context (idempotent: the
 * first call wins, as the all-in-one starts several components in one process). True when this
 * call installed it (its caller then owns `shutdownTracing`).
 */
export function initTracing(cfg: TracingConfig, serviceName = BRAND): boolean {
  if (state.provider || cfg.mode === 'off') return false;
  // The OTLP/HTTP traces URL (stdout mode has no endpoint).
  const url = cfg.mode === 'otlp' ? `${cfg.endpoint}/v1/traces` : '';
  const protocol = cfg.protocol ?? OTLP_PROTOCOLS[0];
  const exporter: SpanExporter = cfg.mode === 'otlp' ? otlpExporter(protocol, { url, headers: cfg.headers, timeoutMillis: 5000 }) : new JsonLineSpanExporter();
  const processor =
    cfg.mode === 'otlp'
      ? new BatchSpanProcessor(exporter, { scheduledDelayMillis: 1000, maxQueueSize: 8192, maxExportBatchSize: 512 })
      : new SimpleSpanProcessor(exporter);
  const resource = { 'service.name': serviceName };
  const sampling = samplingOf(cfg.sampler);
  const provider = new BasicTracerProvider({ resource: resourceFromAttributes(resource), spanProcessors: [processor], sampler: sampling.sdk });
  trace.setGlobalTracerProvider(provider);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  context.setGlobalContextManager(new SyncContextManager());
  state.mode = cfg.mode;
  state.provider = provider;
  state.tracer = provider.getTracer(BRAND);
  state.sampling = cfg.sampler ? sampling : undefined;
  if (cfg.mode === 'otlp') state.decisions = new DecisionSpanWriter({ url, headers: cfg.headers, resource, brand: BRAND, protocol });
  decisionsOn = cfg.mode === 'otlp';
  return true;
}

export function tracingMode(): TracingMode {
  return state.mode;
}

/** Exports what is buffered (tests, shutdown). */
export async function flushTracing(): Promise<void> {
  await Promise.all([state.provider?.forceFlush(), state.decisions?.flush()]);
}

/** Flushes and removes the provider (process shutdown; tests re-init afterwards). */
export async function shutdownTracing(): Promise<void> {
  const p = state.provider;
  if (!p) return;
  const decisions = state.decisions;
  state.provider = undefined;
  state.tracer = undefined;
  state.decisions = undefined;
  state.sampling = undefined;
  state.mode = 'off';
  decisionsOn = false;
  await Promise.all([p.shutdown(), decisions?.close()]);
  trace.disable();
  propagation.disable();
  context.disable();
}

const getter = {
  get: (carrier: Record<string, string | string[] | undefined>, key: string) => carrier[key],
  keys: (carrier: Record<string, string | string[] | undefined>) => Object.keys(carrier),
};

/** Adds `traceparent` (and `tracestate`) of the active context to outgoing request headers. */
export function injectTrace(headers: Record<string, string>): Record<string, string>;
export function injectTrace(headers: Record<string, string | string[]>): Record<string, string | string[]>;
export function injectTrace(headers: Record<string, string | string[]>): Record<string, string | string[]> {
  if (state.provider) propagation.inject(context.active(), headers);
  return headers;
}

// --- decision spans ------------------------------------------------------------------------

export type { DecisionAttributes };

export interface DecisionSpan {
  /** False for the shared no-op (tracing off): nothing to carry, `run` just calls. */
  readonly traced: boolean;
  /**
   * Calls `fn` with this span's context active for its synchronous part: a request `fn` starts
   * before its first await (`injectTrace`) carries it. A decision that awaits asks each question
   * inside the span (`askingWithin`).
   */
  run<T>(fn: () => T): T;
  end(attrs: DecisionAttributes): void;
}

const NOOP: DecisionSpan = {
  traced: false,
  run: (fn) => fn(),
  end: () => {},
};

/** A plain version-00 `traceparent`: `00-<trace id>-<span id>-<flags>`, lowercase hex. */
const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
const INVALID_TRACE = '00000000000000000000000000000000';
const INVALID_SPAN = '0000000000000000';

/**
 * The caller's span context, valid or undefined: a plain version-00 `traceparent` without
 * `tracestate` (what Envoy sends) is read here by position, a fraction of the generic
 * propagator's cost on the hot path; anything else goes through the W3C propagator. No header:
 * the active context's.
 */
function callerOf(traceparent: string | string[] | undefined, tracestate: string | string[] | undefined): SpanContext | undefined {
  if (!traceparent) return validOrUndefined(trace.getSpanContext(context.active()));
  if (typeof traceparent !== 'string' || tracestate !== undefined || !TRACEPARENT.test(traceparent))
    return validOrUndefined(trace.getSpanContext(propagation.extract(ROOT_CONTEXT, { traceparent, tracestate }, getter)));
  const traceId = traceparent.slice(3, 35);
  const spanId = traceparent.slice(36, 52);
  if (traceId === INVALID_TRACE || spanId === INVALID_SPAN) return undefined;
  // The sampled flag is the lowest bit of the flags byte: of its last hex digit.
  const sampledFlag = parseInt(traceparent[54]!, 16) & TraceFlags.SAMPLED;
  return { traceId, spanId, traceFlags: sampledFlag, isRemote: true };
}

const validOrUndefined = (sc: SpanContext | undefined) => (sc && isSpanContextValid(sc) ? sc : undefined);

/**
 * Whether a decision span is recorded, as the SDK's sampler would decide: parent based (the
 * default), the caller's flag; else, and for a root, the root sampler (the default records).
 */
function sampled(name: string, traceId: string, caller: SpanContext | undefined): boolean {
  const s = state.sampling;
  if (caller && (!s || s.parentBased)) return (caller.traceFlags & TraceFlags.SAMPLED) !== 0;
  if (!s) return true;
  return s.root.shouldSample(ROOT_CONTEXT, traceId, name, SpanKind.SERVER, {}, []).decision === SamplingDecision.RECORD_AND_SAMPLED;
}

/**
 * A span around one decision (`/authz`, proxy, broker), continuing the caller's `traceparent`.
 * The shared no-op when decision tracing is off (stdout or disabled): one branch, no allocation.
 */
export function startDecisionSpan(name: string, traceparent?: string | string[], tracestate?: string | string[]): DecisionSpan {
  if (!decisionsOn) return NOOP;
  const caller = callerOf(traceparent, tracestate);
  const traceId = caller ? caller.traceId : randomId(16);
  const parent = context.active();
  if (!sampled(name, traceId, caller)) {
    // Not recorded (a gateway's flags 00, or the sampler's ratio): the context still travels,
    // flags 00, so the identity authority does not start a trace of its own.
    const sc = caller ? { ...caller, traceFlags: TraceFlags.NONE } : { traceId, spanId: randomId(8), traceFlags: TraceFlags.NONE, isRemote: false };
    return new LiveSpan(parent, sc);
  }
  // A sampled decision: a row for the decision-span writer, its span context the active one
  // while the decision runs (so what it calls, in process or over HTTP, is its child).
  const own: SpanContext = { traceId, spanId: randomId(8), traceFlags: TraceFlags.SAMPLED, isRemote: false, traceState: caller?.traceState };
  return new LiveSpan(parent, own, { writer: state.decisions!, name, parentSpanId: caller?.spanId, start: nowUs() });
}

/**
 * A decision span that carries a context: recorded when it has a `row` (the writer and what the
 * row needs besides the end), else only continued. Its OTel context is made the first time a
 * question runs inside it (a decision that asks nothing never needs one).
 */
class LiveSpan implements DecisionSpan {
  readonly traced = true;
  private ctx: Context | undefined;
  private ended = false;

  constructor(
    private readonly parent: Context,
    private readonly sc: SpanContext,
    private readonly row?: { writer: DecisionSpanWriter; name: string; parentSpanId: string | undefined; start: number },
  ) {}

  run<T>(fn: () => T): T {
    return context.with((this.ctx ??= trace.setSpanContext(this.parent, this.sc)), fn);
  }

  end(attrs: DecisionAttributes): void {
    const r = this.row;
    if (!r || this.ended) return;
    this.ended = true;
    r.writer.add({ traceId: this.sc.traceId, spanId: this.sc.spanId, parentSpanId: r.parentSpanId, name: r.name, start: r.start, end: nowUs(), attrs });
  }
}

// --- identity-authority spans --------------------------------------------------------------

/** The identity authority's identity and credential operations (SPEC 6), by `METHOD route`. */
export const IDENTITY_OPERATIONS: Record<string, string> = {
  'POST /v1/agents': 'agent.register',
  'POST /v1/agents/:name/provision': 'agent.provision',
  'POST /v1/agents/verify-presentation': 'vp.verify',
  'POST /v1/delegations/request': 'delegation.request',
  'POST /v1/delegations/:id/approve': 'delegation.approve',
  'POST /v1/delegations/:id/deny': 'delegation.deny',
  'GET /v1/delegations/check': 'delegation.check',
  'GET /v1/delegations/:id/vc': 'vc.issue',
  'POST /v1/revoke': 'vc.revoke',
  'POST /v1/identity/resolve': 'identity.resolve',
  'POST /v1/authority/delegations': 'authority.grant',
  'POST /v1/authority/delegations/:id/revoke': 'authority.revoke',
  'POST /v1/keys': 'key.create',
};

/** Identity-authority operations that run once per agent request (see the stdout fallback above). */
const PER_REQUEST_OPERATIONS = new Set(['vp.verify', 'delegation.check']);
const PER_REQUEST_PATHS = new Set(['/v1/agents/verify-presentation', '/v1/delegations/check']);

/**
 * Hono middleware of the identity authority: a server span per identity/credential operation
 * (and per request that arrives with a `traceparent`), continuing the caller's trace; polls and
 * probes without one are not traced. Attributes: operation, route, method, status.
 */
export function identityTracing(): MiddlewareHandler {
  return async (c, next) => {
    const tracer = state.tracer;
    if (!tracer) return next();
    const traceparent = c.req.header('traceparent');
    // The route is known only after routing: decide from the method and raw path first, cheaply.
    if (!traceparent && !/^\/v1\/(agents|delegations|revoke|identity\/resolve|authority\/delegations|keys)/.test(c.req.path)) return next();
    if (!traceparent && state.mode === 'stdout' && PER_REQUEST_PATHS.has(c.req.path)) return next();
    const parent = traceparent ? propagation.extract(context.active(), { traceparent, tracestate: c.req.header('tracestate') }, getter) : context.active();
    const span: Span = tracer.startSpan(`${c.req.method} ${c.req.path}`, { kind: SpanKind.SERVER }, parent);
    try {
      await context.with(trace.setSpan(parent, span), next);
    } finally {
      // After next(): the index of the handler that answered (not the last route that matched).
      const route = routePath(c) || c.req.path;
      const op = IDENTITY_OPERATIONS[`${c.req.method} ${route}`];
      span.updateName(op ?? `${c.req.method} ${route}`);
      const status = c.res.status;
      span.setAttributes({
        'http.request.method': c.req.method,
        'http.route': route,
        'http.response.status_code': status,
        ...(op ? { [`${BRAND}.operation`]: op } : {}),
      });
      // OTel's HTTP server spans: a 5xx is an error; a 4xx is the caller's and leaves the status
      // unset, even when a handler threw it (hono's HTTPException sets c.error for 404/422 too).
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: c.error?.message ?? `HTTP ${status}` });
      // A traced operation that is not one of ours and had no caller context is noise: drop it.
      if (op || traceparent) span.end();
    }
  };
}

/** An explicit child span around `fn` (a no-op wrapper when tracing is off). */
export async function withSpan<T>(name: string, attrs: Attributes, fn: () => Promise<T>): Promise<T> {
  const tracer = state.tracer;
  if (!tracer || (state.mode === 'stdout' && PER_REQUEST_OPERATIONS.has(name))) return fn();
  return tracer.startActiveSpan(name, { attributes: attrs }, async (span) => {
    try {
      return await fn();
    } catch (e) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: e instanceof Error ? e.message : String(e) });
      throw e;
    } finally {
      span.end();
    }
  });
}
